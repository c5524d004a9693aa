"""ModelClient against a real tritonserver started by tritonrt, over HTTP and gRPC."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from tritonrt.client import ModelClient
from tritonrt.client.exceptions import (
    PyTritonClientInferenceServerError,
    PyTritonClientModelDoesntSupportBatchingError,
    PyTritonClientModelUnavailableError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)
from tritonrt.model_config.triton_model_config import TritonModelConfig

pytestmark = pytest.mark.integration

X = np.array([1.0, 2.0, 3.0], np.float32)


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("identity", "nobatch", "sleepy", "failing", "bytes", "echo_parameters", "reloadable", "count")


def test_infer_sample_adds_and_removes_the_batch_axis(server, protocol):
    with ModelClient(server.url(protocol), "identity") as client:
        result = client.infer_sample(X)
        assert list(result) == ["y"]
        np.testing.assert_array_equal(result["y"], X)
        np.testing.assert_array_equal(client.infer_sample(x=X)["y"], X)


def test_infer_batch_with_positional_and_named_inputs(server, protocol):
    batch = np.arange(6, dtype=np.float32).reshape(2, 3)
    with ModelClient(server.url(protocol), "identity") as client:
        np.testing.assert_array_equal(client.infer_batch(batch)["y"], batch)
        np.testing.assert_array_equal(client.infer_batch(x=batch)["y"], batch)


def test_model_config_is_parsed(server, protocol):
    with ModelClient(server.url(protocol), "identity") as client:
        config = client.model_config
        assert isinstance(config, TritonModelConfig)
        assert (config.model_name, config.batching, config.max_batch_size, config.decoupled) == (
            "identity",
            True,
            8,
            False,
        )
        assert [(t.name, t.shape, t.dtype) for t in config.inputs] == [("x", (-1,), np.float32)]
        assert [(t.name, t.shape, t.dtype) for t in config.outputs] == [("y", (-1,), np.float32)]
        assert client.is_batching_supported is True


def test_non_batching_model_takes_samples_without_batch_axis(server, protocol):
    with ModelClient(server.url(protocol), "nobatch") as client:
        assert client.is_batching_supported is False
        assert client.model_config.max_batch_size == 0
        np.testing.assert_array_equal(client.infer_sample(X)["y"], X)
        with pytest.raises(PyTritonClientModelDoesntSupportBatchingError, match="'nobatch'.*use infer_sample"):
            client.infer_batch(X[np.newaxis])


def test_explicit_model_version(server, protocol):
    with ModelClient(server.url(protocol), "identity", model_version=1) as client:
        np.testing.assert_array_equal(client.infer_sample(X)["y"], X)
        assert client.model_config.model_version == 1


def test_wait_for_model_returns_once_ready(server, protocol):
    with ModelClient(server.url(protocol), "identity") as client:
        assert client.wait_for_model(timeout_s=10) is None


def test_lazy_init_false_reads_the_model_at_construction(server, protocol):
    with ModelClient(server.url(protocol), "identity", lazy_init=False) as client:
        assert client.model_config.model_name == "identity"
    # The wait covers the server's liveness too: 0.5 s was once too short for it on a loaded 2-core machine.
    with pytest.raises(PyTritonClientTimeoutError, match="'absent'.*index does not list it"):
        ModelClient(server.url(protocol), "absent", lazy_init=False, init_timeout_s=2, access_token=server.token)


def test_mixing_positional_and_named_inputs_is_refused(server, protocol):
    with ModelClient(server.url(protocol), "identity") as client:
        with pytest.raises(PyTritonClientValueError, match="pass all inputs positionally or all by name"):
            client.infer_sample(X, x=X)


def test_wrong_dtype_is_refused_before_sending(server, protocol):
    with ModelClient(server.url(protocol), "identity") as client:
        with pytest.raises(PyTritonClientValueError, match="must have dtype float32, got int64"):
            client.infer_sample(np.array([1, 2]))


def test_failing_callable_raises_inference_server_error(server, protocol):
    with ModelClient(server.url(protocol), "failing") as client:
        with pytest.raises(PyTritonClientInferenceServerError, match="deliberate failure in the inference callable"):
            client.infer_sample(X)


def test_missing_model_is_waited_for_and_named_when_the_index_is_readable(server, protocol):
    # As PyTriton 0.7, the client waits for a model it cannot find: it may be bound (or uploaded) later.
    # 2 s, not shorter: the index must be read within the wait on a loaded machine.
    with ModelClient(server.url(protocol), "absent", init_timeout_s=2, access_token=server.token) as client:
        with pytest.raises(PyTritonClientTimeoutError) as caught:
            client.infer_sample(X)
    assert "Model 'absent'" in caught.value.message and "index does not list it" in caught.value.message
    assert "identity 1" in caught.value.message  # lists the models that are there


def test_missing_model_without_token_times_out_with_a_hint(server, protocol):
    with ModelClient(server.url(protocol), "absent", init_timeout_s=2) as client:
        with pytest.raises(PyTritonClientTimeoutError, match="not ready within 2 s.*pass access_token"):
            client.infer_sample(X)


def test_missing_model_version_is_named_at_the_timeout(server, protocol):
    with ModelClient(server.url(protocol), "identity", model_version=2, access_token=server.token) as client:
        with pytest.raises(PyTritonClientTimeoutError, match="'identity' version 2.*models there: .*identity 1"):
            client.wait_for_model(timeout_s=2)


def test_sub_second_inference_timeout(server, protocol, sleep_s):
    with ModelClient(server.url(protocol), "sleepy", inference_timeout_s=0.25) as client:
        with pytest.raises(PyTritonClientTimeoutError, match="within 0.25 s.*inference_timeout_s"):
            client.infer_sample(X, parameters={"sleep_s": sleep_s})
    # A client with enough time gets its answer once the sleeping request finished.
    with ModelClient(server.url(protocol), "sleepy", inference_timeout_s=sleep_s * 10) as client:
        np.testing.assert_array_equal(client.infer_sample(X, parameters={"sleep_s": 0})["y"], X)


@pytest.mark.parametrize(
    "text",
    [
        np.array([b"abc", b"\x00\xffz"], dtype=np.object_),
        np.array([b"abc", b"de"], dtype=np.bytes_),
        np.array(["abc", "zé"]),
    ],
)
def test_bytes_tensors_round_trip(server, protocol, text):
    with ModelClient(server.url(protocol), "bytes") as client:
        result = client.infer_sample(text)["reversed"]
    expected = [(item.encode() if isinstance(item, str) else item)[::-1] for item in text.tolist()]
    assert result.tolist() == expected


def test_parameters_and_headers_reach_the_callable(server, protocol):
    with ModelClient(server.url(protocol), "echo_parameters") as client:
        result = client.infer_sample(
            X, parameters={"text": "hi", "count": 3, "flag": True, "ratio": 0.5}, headers={"X-Request-Id": "r-1"}
        )
    received = json.loads(result["parameters"][0])
    assert {key: received[key] for key in ("text", "count", "flag", "ratio", "x-request-id")} == {
        "text": "hi",
        "count": 3,
        "flag": True,
        "ratio": 0.5,
        "x-request-id": "r-1",
    }


def test_model_client_refuses_a_decoupled_model(server, protocol):
    with ModelClient(server.url(protocol), "count") as client:
        with pytest.raises(PyTritonClientValueError, match="'count' is decoupled.*DecoupledModelClient"):
            client.infer_sample(np.array([2], np.int32))


def test_unload_and_load_with_the_access_token(server, protocol):
    url = server.url(protocol)
    with ModelClient(url, "reloadable", access_token=server.token) as client:
        client.unload_model()
        with pytest.raises(PyTritonClientModelUnavailableError, match="'reloadable' is unavailable.*Load it"):
            client.infer_sample(X)
        client.load_model()
        np.testing.assert_array_equal(client.infer_sample(X)["y"], X)


def test_load_without_the_access_token_is_refused(server, protocol):
    with ModelClient(server.url(protocol), "reloadable") as client:
        with pytest.raises(PyTritonClientInferenceServerError, match="pass access_token"):
            client.unload_model()
        np.testing.assert_array_equal(client.infer_sample(X)["y"], X)  # still loaded


def test_from_existing_client_shares_model_and_token(server, protocol):
    with ModelClient(server.url(protocol), "reloadable", access_token=server.token) as first:
        np.testing.assert_array_equal(first.infer_sample(X)["y"], X)
        with ModelClient.from_existing_client(first) as second:
            second.load_model()  # needs the token it inherited
            np.testing.assert_array_equal(second.infer_sample(X)["y"], X)


def test_a_server_that_answers_is_waited_for_whatever_unreachable_timeout_s(server, protocol, caplog):
    # unreachable_timeout_s ends the wait only where nothing listens: a live server's model is waited for.
    caplog.set_level(logging.INFO, logger="tritonrt.client")
    url = server.url(protocol)
    with ModelClient(url, "absent", init_timeout_s=2, unreachable_timeout_s=0.1) as client:
        with pytest.raises(PyTritonClientTimeoutError, match="not ready within 2 s"):
            client.infer_sample(X)
    said = [record.getMessage() for record in caplog.records if record.name == "tritonrt.client"]
    assert len(said) == 1 and said[0].startswith(
        f"The server at {url} is live, model 'absent' is not ready yet: waiting up to "
    ), said
