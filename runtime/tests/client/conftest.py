"""Fixtures of the client tests: a real tritonserver started by tritonrt's Triton, with test models.

``start_server(*model_names)`` (module scope) starts one Triton on free ports, binds the named models from
``MODELS`` and returns a ``Server`` with the URLs of both protocols and the access token; the server stops
after the test module. ``protocol`` runs a test over HTTP and over gRPC.

Example::

    @pytest.fixture(scope="module")
    def server(start_server):
        return start_server("identity", "nobatch")

    def test_echo(server, protocol):
        with ModelClient(server.url(protocol), "identity") as client:
            ...
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from tritonrt.decorators import batch
from tritonrt.exceptions import PyTritonRuntimeError
from tritonrt.model_config import ModelConfig, Tensor
from tritonrt.server.install import find_or_install_server
from tritonrt.triton import Triton, TritonSecurityConfig

FP32 = np.float32
# Longer than every inference timeout the tests set, by a wide margin.
SLEEP_S = 3.0
HEADER_PATTERN = "x-.*"


@batch
def _identity(x):
    return {"y": x}


def _sleepy(requests):
    """Sleeps ``sleep_s`` (a request parameter) seconds, then echoes ``x``."""
    time.sleep(max(float(request.parameters.get("sleep_s", 0)) for request in requests))
    return [{"y": request["x"]} for request in requests]


def _failing(requests):
    raise ValueError("deliberate failure in the inference callable")


@batch
def _reverse_bytes(text):
    return {"reversed": np.array([[item[::-1] for item in row] for row in text], dtype=np.object_)}


def _echo_parameters(requests):
    """Returns each request's parameters (forwarded headers included) as JSON."""
    return [
        {"parameters": np.array([json.dumps(request.parameters, sort_keys=True).encode()], dtype=np.object_)}
        for request in requests
    ]


def _count(requests):
    """Decoupled: for a request with ``count`` = n, streams n responses with ``index`` 0..n-1."""
    counts = [request["count"] for request in requests]  # shape (batch, 1)
    for index in range(int(max(count.max() for count in counts))):
        yield [{"index": np.full((count.shape[0], 1), index, dtype=np.int32)} for count in counts]


def _slow_stream(requests):
    """Decoupled: one response at once, the next after SLEEP_S seconds."""
    for index in range(2):
        if index:
            time.sleep(SLEEP_S)
        yield [{"index": np.full((request["count"].shape[0], 1), index, dtype=np.int32)} for request in requests]


def _failing_stream(requests):
    yield [{"index": np.zeros((request["count"].shape[0], 1), dtype=np.int32)} for request in requests]
    raise RuntimeError("deliberate failure in the middle of the stream")


@dataclasses.dataclass(frozen=True)
class ModelDefinition:
    infer_func: Callable | list[Callable]  # a list binds one instance per callable
    inputs: list[Tensor]
    outputs: list[Tensor]
    config: ModelConfig


def _batching(max_batch_size: int, **config) -> ModelConfig:
    """A ModelConfig; max_batch_size 0 means a model without batching."""
    if max_batch_size == 0:
        return ModelConfig(batching=False, **config)
    return ModelConfig(max_batch_size=max_batch_size, **config)


def _x_to_y(max_batch_size: int) -> tuple[list[Tensor], list[Tensor], ModelConfig]:
    return (
        [Tensor(name="x", dtype=FP32, shape=(-1,))],
        [Tensor(name="y", dtype=FP32, shape=(-1,))],
        _batching(max_batch_size),
    )


_COUNT_IO = ([Tensor(name="count", dtype=np.int32, shape=(1,))], [Tensor(name="index", dtype=np.int32, shape=(1,))])

MODELS: dict[str, ModelDefinition] = {
    "identity": ModelDefinition(_identity, *_x_to_y(8)),
    "nobatch": ModelDefinition(_identity, *_x_to_y(0)),
    "sleepy": ModelDefinition(_sleepy, *_x_to_y(0)),
    "failing": ModelDefinition(_failing, *_x_to_y(8)),
    "reloadable": ModelDefinition(_identity, *_x_to_y(8)),
    "bytes": ModelDefinition(
        _reverse_bytes,
        [Tensor(name="text", dtype=np.bytes_, shape=(-1,))],
        [Tensor(name="reversed", dtype=np.bytes_, shape=(-1,))],
        ModelConfig(max_batch_size=8),
    ),
    "echo_parameters": ModelDefinition(
        _echo_parameters,
        [Tensor(name="x", dtype=FP32, shape=(-1,))],
        [Tensor(name="parameters", dtype=np.bytes_, shape=(1,))],
        _batching(0),
    ),
    "count": ModelDefinition(_count, *_COUNT_IO, ModelConfig(max_batch_size=8, decoupled=True)),
    # Two instances: a test left sleeping in one does not delay the next test's first response.
    "slow_stream": ModelDefinition(
        [_slow_stream, _slow_stream], *_COUNT_IO, ModelConfig(max_batch_size=8, decoupled=True)
    ),
    "failing_stream": ModelDefinition(_failing_stream, *_COUNT_IO, ModelConfig(max_batch_size=8, decoupled=True)),
}


@dataclasses.dataclass
class Server:
    """A running Triton and how to reach it."""

    triton: Triton
    http_port: int
    grpc_port: int

    def url(self, protocol: str) -> str:
        """``http://127.0.0.1:<port>`` or ``grpc://127.0.0.1:<port>``."""
        port = self.http_port if protocol == "http" else self.grpc_port
        return f"{protocol}://127.0.0.1:{port}"

    @property
    def token(self) -> str:
        return self.triton.get_access_token()


@pytest.fixture(scope="session")
def server_dir():
    """The tritonserver tritonrt uses (installed on first use); skip when none can be had."""
    try:
        return find_or_install_server()
    except PyTritonRuntimeError as error:
        pytest.skip(f"no tritonserver available for the client tests: {error}")


@pytest.fixture(scope="module")
def start_server(server_dir, free_triton_config) -> Iterator[Callable[..., Server]]:
    """Factory: ``start_server(*model_names, security_config=None)`` -> a running Server with those models.

    The servers stop after the test module.
    """
    with contextlib.ExitStack() as stack:

        def start(*model_names: str, security_config: TritonSecurityConfig | None = None) -> Server:
            config = free_triton_config(
                http_header_forward_pattern=HEADER_PATTERN, grpc_header_forward_pattern=HEADER_PATTERN
            )
            triton = stack.enter_context(Triton(config=config, security_config=security_config))
            for name in model_names:
                model = MODELS[name]
                triton.bind(name, model.infer_func, model.inputs, model.outputs, config=model.config)
            triton.run()
            return Server(triton, config.http_port, config.grpc_port)

        yield start


@pytest.fixture
def sleep_s() -> float:
    """How long ``sleepy`` (and ``slow_stream``) sleep when asked to: far more than any test's timeout."""
    return SLEEP_S


@pytest.fixture
def closed_port() -> int:
    """A TCP port nothing listens on (connections to it are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(params=["http", "grpc"])
def protocol(request) -> str:
    """Run the test once over HTTP and once over gRPC."""
    return request.param
