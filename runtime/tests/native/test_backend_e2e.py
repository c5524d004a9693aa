"""The native backend end to end: a real tritonserver loads libtriton_tritonrt.so from each model's directory and
serves peer.py's models, driven with tritonclient over HTTP and gRPC."""

from __future__ import annotations

import json
import queue
import re
import threading
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from native_testlib import Stack
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tritonrt.proxy import wire

pytestmark = pytest.mark.integration

NUMPY = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
    "FP32": np.float32, "FP64": np.float64,
}  # fmt: skip
CLIENTS = {"http": httpclient, "grpc": grpcclient}


@pytest.fixture(scope="module")
def stack(native_library, tmp_path_factory):
    with Stack(tmp_path_factory.mktemp("e2e")) as stack:
        yield stack


def client(stack: Stack, protocol: str):
    port = stack.http if protocol == "http" else stack.grpc
    return CLIENTS[protocol].InferenceServerClient(f"127.0.0.1:{port}")


def infer_input(protocol: str, name: str, array: np.ndarray, datatype: str):
    tensor = CLIENTS[protocol].InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def sample(datatype: str, columns: int) -> np.ndarray:
    if datatype == "BYTES":
        return np.array([[f"é{i}".encode() * (i % 3) for i in range(columns)]], dtype=object)
    rng = np.random.default_rng(columns)
    if datatype == "BOOL":
        return rng.random((1, columns)) > 0.5
    return (rng.random((1, columns)) * 100).astype(NUMPY[datatype])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_every_data_type_goes_through_and_back(stack, protocol):
    types = [*NUMPY, "BYTES"]
    arrays = {datatype: sample(datatype, 5) for datatype in types}
    inputs = [infer_input(protocol, f"IN_{t}", arrays[t], t) for t in types]
    result = client(stack, protocol).infer("identity", inputs)
    for datatype, array in arrays.items():
        got = result.as_numpy(f"OUT_{datatype}")
        assert got.dtype == array.dtype or datatype == "BYTES", datatype
        np.testing.assert_array_equal(got, array, err_msg=datatype)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_empty_and_large_tensors(stack, protocol):
    empty = np.zeros((1, 0), np.float32)
    large = np.random.default_rng(1).random((1, 600_000)).astype(np.float32)  # 2.4 MB: shared memory both ways
    texts = np.array([[b"", b"x" * 100_000]], dtype=object)  # a large BYTES tensor
    inputs = [
        infer_input(protocol, "IN_FP32", large, "FP32"),
        infer_input(protocol, "IN_INT64", np.zeros((1, 0), np.int64), "INT64"),
        infer_input(protocol, "IN_BYTES", texts, "BYTES"),
    ]
    result = client(stack, protocol).infer("identity", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUT_FP32"), large)
    assert result.as_numpy("OUT_INT64").shape == (1, 0)
    assert result.as_numpy("OUT_BYTES").tolist() == texts.tolist()
    result = client(stack, protocol).infer("identity", [infer_input(protocol, "IN_FP32", empty, "FP32")])
    assert result.as_numpy("OUT_FP32").shape == (1, 0)


def test_concurrent_requests_reach_the_worker_as_one_batch(stack):
    counts, errors = [], []
    start = threading.Barrier(8)

    def call(index: int) -> None:
        try:
            with client(stack, "http") as c:
                x = np.full((1, 3), index, np.float32)
                start.wait()
                result = c.infer("identity", [infer_input("http", "IN_FP32", x, "FP32")])
                np.testing.assert_array_equal(result.as_numpy("OUT_FP32"), x)  # each gets its own answer back
                counts.append(int(result.as_numpy("REQUESTS")[0, 0]))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=call, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert max(counts) > 1, f"every request came alone: {counts}"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_request_error_fails_that_request_only(stack, protocol):
    results = {}

    def call(name: str, fail: bool) -> None:
        parameters = {"fail": "row 7 is bad"} if fail else None
        x = np.ones((1, 2), np.float32)
        try:
            client(stack, protocol).infer(
                "identity", [infer_input(protocol, "IN_FP32", x, "FP32")], parameters=parameters
            )
            results[name] = "ok"
        except InferenceServerException as error:
            results[name] = str(error)

    threads = [threading.Thread(target=call, args=(f"r{i}", i == 1)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results.pop("r1").endswith("failed on request: row 7 is bad")
    assert set(results.values()) == {"ok"}


def _post(stack: Stack, header: dict, body: bytes = b"") -> tuple[int, str]:
    encoded = json.dumps(header).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{stack.http}/v2/models/identity/infer", data=encoded + body, method="POST",
        headers={"Inference-Header-Content-Length": str(len(encoded)), "Content-Type": "application/octet-stream"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def test_poison_requests_get_a_400_naming_the_input_and_the_server_keeps_serving(stack):
    overflow = {
        "inputs": [{"name": "IN_FP32", "shape": [1, 2**62], "datatype": "FP32", "parameters": {"binary_data_size": 0}}]
    }
    status, text = _post(stack, overflow)
    assert status == 400 and "IN_FP32" in text and "2^64" in text, text
    mismatch = {
        "inputs": [{"name": "IN_FP32", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 12}}]
    }
    status, text = _post(stack, mismatch, b"\0" * 12)
    assert status == 400 and "IN_FP32" in text, text
    with grpc.insecure_channel(f"127.0.0.1:{stack.grpc}") as channel:
        request = service_pb2.ModelInferRequest(model_name="identity")
        tensor = request.inputs.add(name="IN_FP32", datatype="FP32")
        tensor.shape.extend([1, 2**62])
        request.raw_input_contents.append(b"")
        with pytest.raises(grpc.RpcError) as raised:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "IN_FP32" in raised.value.details()
    x = np.arange(3, dtype=np.float32).reshape(1, 3)
    result = client(stack, "http").infer("identity", [infer_input("http", "IN_FP32", x, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUT_FP32"), x)
    assert stack.live()


def _stream(stack: Stack, count: int, delay_ms: int = 0):
    responses: queue.Queue = queue.Queue()
    c = client(stack, "grpc")
    c.start_stream(callback=lambda result, error: responses.put((result, error)))
    x = np.array([1.0, 2.0], np.float32)
    inputs = [
        infer_input("grpc", "IN", x, "FP32"),
        infer_input("grpc", "COUNT", np.array([count], np.int32), "INT32"),
        infer_input("grpc", "DELAY_MS", np.array([delay_ms], np.int32), "INT32"),
    ]
    c.async_stream_infer("stream", inputs, enable_empty_final_response=True)
    return c, responses


def test_a_decoupled_model_streams_over_grpc(stack):
    c, responses = _stream(stack, 4)
    outputs = []
    while True:
        result, error = responses.get(timeout=30)
        assert error is None, error
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
        outputs.append(result.as_numpy("OUT").tolist())
    c.stop_stream()
    assert outputs == [[1.0, 2.0], [2.0, 4.0], [3.0, 6.0], [4.0, 8.0]]


def test_a_cancelled_stream_reaches_the_worker(stack):
    c, responses = _stream(stack, 1000, delay_ms=20)
    for _ in range(2):
        result, error = responses.get(timeout=30)
        assert error is None
    c.stop_stream(cancel_requests=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "cancelled" not in (stack.stats.read_text() if stack.stats.exists() else ""):
        time.sleep(0.1)
    assert "cancelled 1" in stack.stats.read_text()
    c, responses = _stream(stack, 1)  # the instance is free again
    result, error = responses.get(timeout=30)
    assert error is None and result.as_numpy("OUT").tolist() == [1.0, 2.0]
    c.stop_stream()


def _metric(text: str, name: str, model: str) -> float:
    """The sum of a metric's samples for ``model`` (whatever other labels, e.g. a failure's reason)."""
    values = re.findall(rf'^{name}{{[^}}]*model="{model}"[^}}]*}} (\S+)$', text, re.M)
    assert values, f"no {name} for {model}"
    return sum(float(value) for value in values)


def _count(stats: dict, kind: str) -> int:
    return int(stats["inference_stats"][kind]["count"])


def test_triton_statistics_and_metrics_count_what_happened(stack):
    with client(stack, "http") as c:
        before = c.get_inference_statistics("identity")["model_stats"][0]
        x = np.ones((1, 4), np.float32)
        for _ in range(3):
            c.infer("identity", [infer_input("http", "IN_FP32", x, "FP32")])
        with pytest.raises(InferenceServerException):
            c.infer("identity", [infer_input("http", "IN_FP32", x, "FP32")], parameters={"fail": "x"})
        # The backend reports a request's statistics after its response went out (as Triton's own backends
        # do), so a client can read them a moment before the last request is counted.
        deadline = time.monotonic() + 10
        while True:
            after = c.get_inference_statistics("identity")["model_stats"][0]
            counts = tuple(_count(after, kind) - _count(before, kind) for kind in ("success", "fail"))
            if counts == (3, 1) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert counts == (3, 1)
    assert int(after["execution_count"]) > int(before["execution_count"])
    assert int(after["inference_stats"]["compute_infer"]["ns"]) > 0
    assert int(after["inference_stats"]["queue"]["ns"]) > 0
    time.sleep(0.5)  # metrics refresh interval
    text = stack.metrics_text()
    assert _metric(text, "nv_inference_request_success", "identity") >= 3
    assert _metric(text, "nv_inference_request_failure", "identity") >= 1
    assert _metric(text, "nv_inference_queue_duration_us", "identity") > 0
    assert _metric(text, "nv_inference_compute_infer_duration_us", "identity") > 0


def test_the_config_endpoint_shows_nothing_internal(stack):
    with client(stack, "http") as c:
        config = c.get_model_config("identity")
    text = json.dumps(config)
    assert stack.token not in text and str(stack.sockets) not in text and "socket" not in text
    assert config["backend"] == "tritonrt"


def test_each_model_loads_its_own_copy_of_the_library(stack):
    log = stack.log()
    assert log.count(f"tritonrt-backend 0.1.0 (wire protocol {wire.VERSION}) on backend API 1.") == 2
    assert (stack.repo / "identity" / "libtriton_tritonrt.so").exists()
    assert (stack.repo / "stream" / "libtriton_tritonrt.so").exists()
