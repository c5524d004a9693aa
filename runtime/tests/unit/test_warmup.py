"""Unit tests: warm-up data (``model_config.warmup``) and calling a bound model's callables with it
(``models.warmup``), as ``ModelConfig(model_warmup=...)`` does before the model loads."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tritonrt.decorators import batch
from tritonrt.exceptions import PyTritonBadParameterError
from tritonrt.model_config import ModelConfig, Tensor
from tritonrt.model_config.common import ModelWarmup, WarmupInput
from tritonrt.model_config.warmup import generate_warmup_data, generate_warmup_requests
from tritonrt.models.bound import BoundModel
from tritonrt.models.warmup import warm_up

X = Tensor(name="x", dtype=np.float32, shape=(2,))


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint16, np.int64, np.bool_, np.bytes_, object])
def test_random_and_zero_data_have_the_batch_shape_and_dtype(dtype):
    for flag in ("random_data", "zero_data"):
        data = generate_warmup_data(WarmupInput(dtype=dtype, shape=(2, 3), **{flag: True}), batch_size=4)
        assert data.shape == (4, 2, 3) and data.dtype.kind == np.dtype(dtype).kind
    zeros = generate_warmup_data(WarmupInput(dtype=np.float32, shape=(2,), zero_data=True), 3)
    assert not zeros.any()


def test_data_from_a_file_is_used_repeated_or_cut_to_the_batch(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.array([[1, 2], [3, 4]], dtype=np.int32))
    spec = WarmupInput(dtype=np.float32, shape=(2,), input_data_file=str(path))
    assert generate_warmup_data(spec, 2).tolist() == [[1, 2], [3, 4]]  # the full batch
    assert generate_warmup_data(spec, 3).tolist() == [[1, 2], [3, 4], [1, 2]]  # rows repeated
    assert generate_warmup_data(spec, 1).tolist() == [[1, 2]]  # cut
    assert generate_warmup_data(spec, 1).dtype == np.float32
    np.save(path, np.array([7, 8], dtype=np.int32))  # one row: every row of the batch
    assert generate_warmup_data(spec, 3).tolist() == [[7, 8]] * 3
    np.save(path, np.zeros((2, 5)))
    with pytest.raises(PyTritonBadParameterError, match=r"shape \(2, 5\); give one of shape \(2, 2\)"):
        generate_warmup_data(spec, 2)


def test_an_input_without_data_is_refused():
    with pytest.raises(PyTritonBadParameterError, match="zero_data=True, random_data=True or input_data_file"):
        generate_warmup_data(WarmupInput(dtype=np.float32, shape=(1,)), 1)


def test_count_requests_per_warmup_in_order():
    warmups = [
        ModelWarmup("a", 1, {"x": WarmupInput(np.float32, (2,), zero_data=True)}, count=2),
        ModelWarmup("b", 5, {"x": WarmupInput(np.float32, (2,), random_data=True)}, count=1),
    ]
    assert [request["x"].shape for request in generate_warmup_requests(warmups)] == [(1, 2), (1, 2), (5, 2)]
    assert generate_warmup_requests(None) == []


def _model(infer_func, warmup, **config):
    model = BoundModel.from_bind("m", infer_func, [X], [X], 1, ModelConfig(model_warmup=warmup, **config), False, None)
    return model


WARMUP = [ModelWarmup("zeros", 3, {"x": WarmupInput(np.float32, (2,), zero_data=True)}, count=2)]


def test_each_callable_gets_each_request_plain_async_and_streaming():
    seen = []

    def plain(requests):
        seen.append(("plain", requests[0]["x"].shape))
        return [{"x": requests[0]["x"]}]

    async def coroutine(requests):
        seen.append(("async", requests[0]["x"].shape))
        return [{"x": requests[0]["x"]}]

    def stream(requests):
        seen.append(("stream", requests[0]["x"].shape))
        yield [{"x": requests[0]["x"]}]
        seen.append(("stream-end", None))

    warm_up(_model([plain, coroutine], WARMUP))
    warm_up(_model(stream, WARMUP, decoupled=True))
    assert seen == [("plain", (3, 2))] * 2 + [("async", (3, 2))] * 2 + [("stream", (3, 2)), ("stream-end", None)] * 2


def test_decorated_callables_get_their_context_already():
    batches = []

    @batch
    def infer(x):
        batches.append(x.shape)
        return {"x": x}

    warm_up(_model(infer, WARMUP))
    assert batches == [(3, 2), (3, 2)]  # PyTriton 0.7 attaches the context after warm-up: @batch fails there


def test_failures_are_logged_and_the_rest_goes_on(caplog):
    calls = []

    def failing(requests):
        calls.append(1)
        raise RuntimeError("not warm")

    bad_input = [ModelWarmup("none", 1, {"x": WarmupInput(np.float32, (2,))}, count=1)]
    unknown_input = [ModelWarmup("y", 1, {"y": WarmupInput(np.float32, (2,), zero_data=True)}, count=1)]
    with caplog.at_level(logging.INFO, logger="tritonrt"):
        warm_up(_model(failing, WARMUP))
        warm_up(_model(failing, bad_input))
        warm_up(_model(failing, unknown_input))
    assert len(calls) == 3  # two from WARMUP, none for the input without data, one for "y"
    assert "Warm-up request 2/2 of model 'm' (callable 0) failed: RuntimeError: not warm" in caplog.text
    assert "Warm-up of model 'm' skipped: A WarmupInput needs its data" in caplog.text
    assert "sends inputs the model does not have: y" in caplog.text


def test_a_model_warmup_that_is_not_a_list_of_model_warmups_is_refused():
    with pytest.raises(PyTritonBadParameterError, match="model_warmup must be a list of .*ModelWarmup"):
        _model(lambda requests: requests, {"x": 1})
