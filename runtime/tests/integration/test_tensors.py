"""Tensors of every datatype round trip; optional inputs; parameters, headers and requested outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tritonrt.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.integration

NUMERIC_DTYPES = [
    np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64, np.bool_,
]  # fmt: skip
BYTES_VALUES = [b"plain", b"trailing\x00\x00", b"\x00", b"", b"\x00inner\x00nul\x00", "żółw".encode()]


def echo(requests):
    """out_<name> = <name> for every input the request has."""
    return [{f"out_{name}": value for name, value in request.items()} for request in requests]


def describe(requests):
    """What the callable saw: parameters, requested outputs and the inputs present, as JSON."""
    responses = []
    for request in requests:
        seen = {
            "parameters": request.parameters,
            "requested": request.requested_output_names,
            "inputs": sorted(request.keys()),
        }
        batch = next(iter(request.values())).shape[0]
        responses.append(
            {
                "seen": np.array([[json.dumps(seen).encode()]] * batch, dtype=object),
                "other": np.zeros((batch, 1), dtype=np.int32),
            }
        )
    return responses


class Keeper:
    """Keeps every input array it is given (views into the transport's buffers, unless those are copied)."""

    def __init__(self):
        self.kept: list[np.ndarray] = []

    def __call__(self, requests):
        self.kept.extend(request["x"] for request in requests)
        return [{"first": request["x"][:1].copy()} for request in requests]


def dtype_name(dtype) -> str:
    return np.dtype(dtype).name


@pytest.fixture(scope="module")
def keeper():
    return Keeper()


@pytest.fixture(scope="module")
def server(start_triton, keeper):
    server = start_triton(http_header_forward_pattern="x-.*", grpc_header_forward_pattern="x-.*")
    tensors = [Tensor(name=dtype_name(d), dtype=d, shape=(-1, -1), optional=True) for d in NUMERIC_DTYPES]
    tensors.append(Tensor(name="bytes", dtype=np.bytes_, shape=(-1,), optional=True))
    tensors.append(Tensor(name="object", dtype=object, shape=(-1,), optional=True))
    outputs = [Tensor(name=f"out_{t.name}", dtype=t.dtype, shape=t.shape) for t in tensors]
    server.triton.bind("echo", echo, tensors, outputs, config=ModelConfig(max_batch_size=8))
    server.triton.bind(
        "echo_unbatched",
        echo,
        [Tensor(name="float32", dtype=np.float32, shape=(-1, -1)), Tensor(name="bytes", dtype=object, shape=(-1,))],
        [
            Tensor(name="out_float32", dtype=np.float32, shape=(-1, -1)),
            Tensor(name="out_bytes", dtype=object, shape=(-1,)),
        ],
        config=ModelConfig(batching=False),
    )
    server.triton.bind(
        "describe",
        describe,
        [
            Tensor(name="x", dtype=np.float32, shape=(-1,)),
            Tensor(name="flag", dtype=np.bool_, shape=(1,), optional=True),
        ],
        [Tensor(name="seen", dtype=object, shape=(1,)), Tensor(name="other", dtype=np.int32, shape=(1,))],
    )
    server.triton.bind(
        "keeper",
        keeper,
        [Tensor(name="x", dtype=np.int64, shape=(-1,))],
        [Tensor(name="first", dtype=np.int64, shape=(-1,))],
        config=ModelConfig(batching=False),
    )
    return server


def sample_array(dtype) -> np.ndarray:
    if dtype is np.bool_:
        return np.array([[[True, False, True], [False, False, True]]])
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        values = [info.min, 0, info.max, 1, 2, 3]
    else:
        info = np.finfo(dtype)
        values = [info.min, 0, info.max, 0.5, -2, 3]
    return np.array(values, dtype=dtype).reshape(1, 2, 3)


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_name)
def test_numeric_tensor_round_trip(server, protocol, dtype):
    array = sample_array(dtype)
    result = server.infer(protocol, "echo", {dtype_name(dtype): array})
    returned = result[f"out_{dtype_name(dtype)}"]
    assert returned.dtype == array.dtype
    np.testing.assert_array_equal(returned, array)


@pytest.mark.parametrize("name", ["bytes", "object"])
def test_bytes_round_trip_keeps_nul_bytes(server, protocol, name):
    array = np.array([BYTES_VALUES], dtype=object)
    returned = server.infer(protocol, "echo", {name: array})[f"out_{name}"]
    assert returned.shape == array.shape
    assert returned.ravel().tolist() == BYTES_VALUES


def test_several_dtypes_in_one_request(server, protocol):
    inputs = {dtype_name(d): sample_array(d) for d in (np.float16, np.int8, np.uint64, np.bool_)}
    inputs["bytes"] = np.array([[b"a\x00", b"bc"]], dtype=object)
    result = server.infer(protocol, "echo", inputs)
    assert set(result) == {f"out_{name}" for name in inputs}
    for name, array in inputs.items():
        np.testing.assert_array_equal(result[f"out_{name}"], array)


def test_a_batch_of_several_rows(server, protocol):
    array = np.arange(4 * 2 * 5, dtype=np.int32).reshape(4, 2, 5)
    np.testing.assert_array_equal(server.infer(protocol, "echo", {"int32": array})["out_int32"], array)


def test_unbatched_model_round_trip(server, protocol):
    inputs = {
        "float32": np.arange(6, dtype=np.float32).reshape(2, 3),
        "bytes": np.array([b"x\x00", b"", b"yz"], dtype=object),
    }
    result = server.infer(protocol, "echo_unbatched", inputs)
    np.testing.assert_array_equal(result["out_float32"], inputs["float32"])
    assert result["out_bytes"].tolist() == inputs["bytes"].tolist()


@pytest.mark.parametrize("megabytes", [1, 16])
def test_large_tensor_round_trip(server, protocol, megabytes):
    """Large tensors travel through shared memory; 16 MiB ones too (more than a region's usual headroom)."""
    array = np.random.default_rng(megabytes).random((1, megabytes * 256, 1024), dtype=np.float32)
    np.testing.assert_array_equal(server.infer(protocol, "echo", {"float32": array})["out_float32"], array)


def test_growing_and_shrinking_tensors_in_turn(server, protocol):
    for index, rows in enumerate([1, 300, 5000, 20, 70000, 2, 300]):
        array = np.full((1, rows, 4), index, dtype=np.int64)
        np.testing.assert_array_equal(server.infer(protocol, "echo", {"int64": array})["out_int64"], array)


def test_large_bytes_round_trip_keeps_nul_bytes(server, protocol):
    values = [bytes([i % 256]) * 700 + b"\x00" * (i % 5) for i in range(300)]  # about 200 KiB
    returned = server.infer(protocol, "echo", {"bytes": np.array([values], dtype=object)})["out_bytes"]
    assert returned.ravel().tolist() == values


def test_inputs_kept_by_the_callable_are_not_overwritten(server, keeper):
    """A callable may keep its input arrays; later requests must not change them (small and large ones)."""
    keeper.kept.clear()
    sizes = [4, 100_000, 8, 200_000, 100_000, 4, 300_000]
    for fill, size in enumerate(sizes):
        assert server.infer("grpc", "keeper", {"x": np.full(size, fill, dtype=np.int64)})["first"].tolist() == [fill]
    assert [(array.size, set(array.tolist())) for array in keeper.kept] == [
        (size, {fill}) for fill, size in enumerate(sizes)
    ]


def seen(server, protocol, inputs, **kwargs) -> dict:
    return json.loads(server.infer(protocol, "describe", inputs, **kwargs)["seen"][0][0])


def test_optional_input_absent_and_present(server, protocol):
    x = np.ones((1, 2), dtype=np.float32)
    assert seen(server, protocol, {"x": x})["inputs"] == ["x"]
    present = seen(server, protocol, {"x": x, "flag": np.array([[True]])})
    assert present["inputs"] == ["flag", "x"]


def test_parameters_reach_the_callable(server, protocol):
    x = np.ones((1, 2), dtype=np.float32)
    parameters = {"mode": "fast", "count": 3, "strict": True}
    assert seen(server, protocol, {"x": x}, parameters=parameters)["parameters"] == parameters


def test_forwarded_headers_reach_the_callable(server, protocol):
    x = np.ones((1, 2), dtype=np.float32)
    headers = {"x-request-id": "abc-123", "not-forwarded": "no"}
    parameters = seen(server, protocol, {"x": x}, headers=headers)["parameters"]
    assert parameters.get("x-request-id") == "abc-123"
    assert "not-forwarded" not in parameters


def test_requested_output_names_reach_the_callable(server, protocol):
    x = np.ones((1, 2), dtype=np.float32)
    assert seen(server, protocol, {"x": x})["requested"] == ["other", "seen"]  # none asked for: all
    result = server.infer(protocol, "describe", {"x": x}, outputs=["seen"])
    assert set(result) == {"seen"}
    assert json.loads(result["seen"][0][0])["requested"] == ["seen"]
