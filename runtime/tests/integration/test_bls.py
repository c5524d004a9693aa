"""Calls of other models from a callable (BLS, ``tritonrt.bls``) against a real tritonserver, in both worker modes:
a bound callable calls another bound callable, a Python-backend ``model.py`` and a decoupled callable, with
``infer`` (numpy dicts), ``InferenceRequest.exec`` / ``async_exec`` (the Python backend's names), large tensors
through the shared-memory regions, errors that name the callee, a cancelled stream, and the model loading API.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import numpy as np
import pytest

from tests.integration.conftest import RunningServer
from tests.integration.test_metrics import scrape
from tests.integration.test_triton_models import write_add_one
from tritonrt import bls
from tritonrt.decorators import batch
from tritonrt.model_config import ModelConfig, Tensor
from tritonrt.triton import Triton

pytestmark = pytest.mark.integration

WORKER_MODES = ("thread", "process")

X = Tensor(name="x", dtype=np.float32, shape=(-1,))
Y = Tensor(name="y", dtype=np.float32, shape=(-1,))
SMALL = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
LARGE = np.arange(2 * 300_000, dtype=np.float32).reshape(2, 300_000)  # 2.4 MB: through the regions both ways


def request_of(model: str, x: np.ndarray) -> bls.InferenceRequest:
    return bls.InferenceRequest(model_name=model, requested_output_names=["y"], inputs=[bls.Tensor("x", x)])


@batch
def double(x):
    return {"y": x * 2}


def through_infer(requests):
    """y = double(x) + add_one(x): two calls per request, numpy dicts."""
    answers = []
    for request in requests:
        doubled = bls.infer("double", x=request["x"])["y"]
        plus_one = bls.infer("add_one", {"x": request["x"]})["y"]
        answers.append({"y": doubled + plus_one})
    return answers


def through_exec(requests):
    """The Python backend's names: InferenceRequest.exec; an error response raised as the caller's error."""
    answers = []
    for request in requests:
        callee = str(request.parameters.get("callee", "double"))
        response = request_of(callee, request["x"]).exec()
        if response.has_error():
            raise bls.TritonModelException(f"callee said: {response.error().message()}")
        answers.append({"y": bls.get_output_tensor_by_name(response, "y").as_numpy()})
    return answers


async def through_async(requests):
    """async_exec from an async callable: the two calls of a request run side by side."""
    answers = []
    for request in requests:
        first, second = request_of("double", request["x"]), request_of("add_one", request["x"])
        doubled, plus_one = await asyncio.gather(first.async_exec(), second.async_exec())
        y = doubled.output_tensors()[0].as_numpy() + plus_one.output_tensors()[0].as_numpy()
        answers.append({"y": y})
    return answers


def count_up(requests):
    """Decoupled: for x = [[n]], streams y = 1 .. n, one response each, 0.05 s apart."""
    (request,) = requests
    for value in range(1, int(request["x"][0][0]) + 1):
        time.sleep(0.05)
        yield [{"y": np.array([[float(value)]], dtype=np.float32)}]


def collect_stream(requests):
    """Calls count_up by decoupled BLS; with parameter stop_after=k, cancels the stream after k responses."""
    answers = []
    for request in requests:
        stop_after = int(request.parameters.get("stop_after", 0))
        responses = request_of("count_up", request["x"]).exec(decoupled=True)
        seen = []
        for response in responses:
            if response.has_error():
                seen.append(-1.0)
                break
            outputs = response.output_tensors()
            if outputs:
                seen.append(float(outputs[0].as_numpy()[0][0]))
            if stop_after and len(seen) == stop_after:
                responses.cancel()
        answers.append({"y": np.array([seen], dtype=np.float32)})
    return answers


def calls_itself(requests):
    """x = [[1]]: calls its own model, whose one instance is busy with this very request, with a 0.3 s timeout;
    y = [[1]] when the call timed out with a message that says so. x = [[0]]: y = [[0]]."""
    answers = []
    for request in requests:
        if request["x"][0][0] != 1.0:
            answers.append({"y": np.zeros((1, 1), np.float32)})
            continue
        call = bls.InferenceRequest(
            model_name="calls_itself", requested_output_names=["y"], inputs=[bls.Tensor("x", request["x"] * 0)],
            timeout=300_000,
        )  # fmt: skip
        response = call.exec()
        timed_out = response.has_error() and "timeout" in response.error().message()
        answers.append({"y": np.full((1, 1), float(timed_out), np.float32)})
    return answers


def model_control(requests):
    """The model loading API: x = [[op]]: 0 readiness of add_one, 1 unload it, 2 load it again."""
    answers = []
    for request in requests:
        op = int(request["x"][0][0])
        if op == 1:
            bls.unload_model("add_one")
        elif op == 2:
            bls.load_model("add_one")
        answers.append({"y": np.array([[float(bls.is_model_ready("add_one"))]], dtype=np.float32)})
    return answers


@pytest.fixture(scope="module")
def server(server_dir, free_triton_config, tmp_path_factory, worker_mode) -> Iterator[RunningServer]:
    models_dir = write_add_one(tmp_path_factory.mktemp("models"))
    triton = Triton(config=free_triton_config(), models_dir=models_dir)
    running = RunningServer(triton)
    config = ModelConfig(max_batch_size=8)
    try:
        triton.bind("double", double, [X], [Y], config=config)
        triton.bind("through_infer", through_infer, [X], [Y], config=config)
        triton.bind("through_exec", through_exec, [X], [Y], config=config)
        triton.bind("through_async", through_async, [X], [Y], config=config)
        triton.bind("count_up", count_up, [X], [Y], config=ModelConfig(max_batch_size=8, decoupled=True))
        triton.bind("collect_stream", collect_stream, [X], [Y], config=config)
        triton.bind("model_control", model_control, [X], [Y], config=config)
        triton.bind("calls_itself", calls_itself, [X], [Y], config=config)
        triton.run()
        yield running
    finally:
        running.close_clients()
        triton.stop()


@pytest.mark.parametrize("data", [SMALL, LARGE], ids=["small", "large"])
def test_a_callable_calls_a_bound_callable_and_a_python_backend_model(server, protocol, data):
    assert np.array_equal(server.infer(protocol, "through_infer", {"x": data})["y"], data * 2 + (data + 1))


@pytest.mark.parametrize("data", [SMALL, LARGE], ids=["small", "large"])
def test_the_python_backend_names_port_unchanged(server, protocol, data):
    assert np.array_equal(server.infer(protocol, "through_exec", {"x": data})["y"], data * 2)
    parameters = {"callee": "add_one"}
    assert np.array_equal(server.infer(protocol, "through_exec", {"x": data}, parameters=parameters)["y"], data + 1)


def test_async_exec_runs_calls_side_by_side(server, protocol):
    assert np.array_equal(server.infer(protocol, "through_async", {"x": SMALL})["y"], SMALL * 2 + SMALL + 1)


def test_a_missing_callee_is_an_error_response_naming_it_and_the_caller_serves_on(server, protocol):
    message = server.infer_error(protocol, "through_exec", {"x": SMALL}, parameters={"callee": "no_such_model"})
    assert "callee said" in message and "no_such_model" in message
    assert np.array_equal(server.infer(protocol, "through_exec", {"x": SMALL})["y"], SMALL * 2)


def test_each_call_is_counted_on_metrics_by_caller_and_callee(server):
    # Counted by the backend as each call ends (the worker sends no METRICS message for them): a call of a model
    # that answered, and one of a missing model (Triton refuses it at once), an error.
    def counts(series, callee: str) -> tuple[float, float, float]:
        wanted = {("model", "through_exec"), ("callee", callee)}
        found = {name: v for (name, labels), v in series.items() if wanted <= labels}
        names = ("tritonrt_bls_calls_total", "tritonrt_bls_errors_total", "tritonrt_bls_seconds_count")
        return tuple(found.get(name, 0.0) for name in names)  # type: ignore[return-value]

    before = scrape(server)
    server.infer("http", "through_exec", {"x": SMALL})
    server.infer("http", "through_exec", {"x": LARGE})
    server.infer_error("http", "through_exec", {"x": SMALL}, parameters={"callee": "no_such_model"})
    after = scrape(server)
    ok, missing = (
        tuple(a - b for a, b in zip(counts(after, callee), counts(before, callee), strict=True))
        for callee in ("double", "no_such_model")
    )
    assert ok == (2.0, 0.0, 2.0), ok  # (calls, errors, observed durations)
    assert missing == (1.0, 1.0, 1.0), missing


def test_infer_raises_with_the_callees_error(server):
    # A bad tensor for the callee (its input is float32): Triton refuses it, and infer raises naming the callee.
    def wrong_dtype(requests):
        try:
            bls.infer("double", x=requests[0]["x"].astype(np.int64))
        except bls.TritonModelException as error:
            return [{"y": np.frombuffer(str(error).encode().ljust(256)[:256], dtype=np.uint8).astype(np.float32)[None]}]
        return [{"y": np.zeros((1, 256), dtype=np.float32)}]

    server.triton.bind("wrong_dtype", wrong_dtype, [X], [Y], config=ModelConfig(max_batch_size=8))
    codes = server.infer("http", "wrong_dtype", {"x": SMALL})["y"][0].astype(np.uint8).tobytes().decode().strip()
    assert "double" in codes and "INT64" in codes.upper()


def test_a_decoupled_call_streams_every_response(server, protocol):
    assert server.infer(protocol, "collect_stream", {"x": np.array([[4.0]], dtype=np.float32)})["y"].tolist() == [
        [1.0, 2.0, 3.0, 4.0]
    ]


def test_cancelling_a_decoupled_call_stops_its_stream(server):
    forty = np.array([[40.0]], dtype=np.float32)
    seen = server.infer("http", "collect_stream", {"x": forty}, parameters={"stop_after": 2})["y"][0].tolist()
    assert seen[:2] == [1.0, 2.0] and len(seen) < 40, seen  # the callee's stream ended early


def test_a_call_of_the_callers_only_instance_ends_at_its_timeout(server, protocol):
    one, zero = np.ones((1, 1), np.float32), np.zeros((1, 1), np.float32)
    assert server.infer(protocol, "calls_itself", {"x": one})["y"].tolist() == [[1.0]]
    assert server.infer(protocol, "calls_itself", {"x": zero})["y"].tolist() == [[0.0]]  # and it serves on


def test_the_model_loading_api(server):
    def ready() -> float:
        return float(server.infer("http", "model_control", {"x": np.array([[0.0]], dtype=np.float32)})["y"][0][0])

    assert ready() == 1.0
    server.infer("http", "model_control", {"x": np.array([[1.0]], dtype=np.float32)})
    deadline = time.monotonic() + 30
    while ready() == 1.0 and time.monotonic() < deadline:  # an unload finishes in the background
        time.sleep(0.1)
    assert ready() == 0.0
    assert server.infer("http", "model_control", {"x": np.array([[2.0]], dtype=np.float32)})["y"][0][0] == 1.0
    assert np.array_equal(server.infer("http", "add_one", {"x": SMALL})["y"], SMALL + 1)


def test_a_call_outside_a_request_says_where_calls_work():
    with pytest.raises(bls.TritonModelException, match="inside the inference callable|while a request"):
        bls.infer("double", x=SMALL)
