"""Integration fixtures: real tritonserver processes started through tritonrt, driven with tritonclient.

``start_triton(**config_overrides)`` (module scope) starts a Triton on free ports and returns a
:class:`RunningServer`; models bound to ``server.triton`` after that load into the running server. Each test
module shares its servers between its tests (a start costs about 1.5 s plus about 1 s per model).

Example::

    @pytest.fixture(scope="module")
    def server(start_triton):
        server = start_triton()
        server.triton.bind("double", double, inputs=[...], outputs=[...])
        return server

    def test_double(server, protocol):  # runs over HTTP and gRPC
        assert server.infer(protocol, "double", {"x": ...})["y"] ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from tritonrt.exceptions import PyTritonRuntimeError
from tritonrt.server.install import find_or_install_server
from tritonrt.triton import RecoveryPolicy, Triton, TritonConfig, TritonSecurityConfig

CLIENT_TIMEOUT_S = 60.0


@pytest.fixture(scope="session")
def server_dir():
    """The tritonserver tritonrt uses (installed on first use); skip when none can be had."""
    try:
        return find_or_install_server()
    except PyTritonRuntimeError as error:
        pytest.skip(f"no tritonserver available for the integration tests: {error}")


def datatype(array: np.ndarray) -> str:
    """KServe datatype of a numpy array (object/bytes arrays are BYTES)."""
    return "BYTES" if array.dtype.kind in "OSU" else np_to_triton_dtype(array.dtype)


def http_inputs(inputs: Mapping[str, np.ndarray]) -> list[httpclient.InferInput]:
    result = []
    for name, array in inputs.items():
        tensor = httpclient.InferInput(name, list(array.shape), datatype(array))
        tensor.set_data_from_numpy(array)
        result.append(tensor)
    return result


def grpc_inputs(inputs: Mapping[str, np.ndarray]) -> list[grpcclient.InferInput]:
    result = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), datatype(array))
        tensor.set_data_from_numpy(array)
        result.append(tensor)
    return result


class RunningServer:
    """A started Triton plus the addresses and clients to talk to it."""

    def __init__(self, triton: Triton):
        self.triton = triton
        config = triton.config
        self.http_url = f"127.0.0.1:{config.http_port}"
        self.grpc_url = f"127.0.0.1:{config.grpc_port}"
        self.metrics_url = f"127.0.0.1:{config.metrics_port}"
        self._http: httpclient.InferenceServerClient | None = None
        self._grpc: grpcclient.InferenceServerClient | None = None

    @property
    def token(self) -> str:
        return self.triton.get_access_token()

    @property
    def http(self) -> httpclient.InferenceServerClient:
        """A shared HTTP client (not for use from several threads: open your own with :meth:`http_client`)."""
        if self._http is None:
            self._http = self.http_client()
        return self._http

    @property
    def grpc(self) -> grpcclient.InferenceServerClient:
        if self._grpc is None:
            self._grpc = self.grpc_client()
        return self._grpc

    def http_client(self) -> httpclient.InferenceServerClient:
        return httpclient.InferenceServerClient(
            self.http_url, connection_timeout=CLIENT_TIMEOUT_S, network_timeout=CLIENT_TIMEOUT_S
        )

    def grpc_client(self) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(self.grpc_url)

    def close_clients(self) -> None:
        for client in (self._http, self._grpc):
            if client is not None:
                client.close()
        self._http = self._grpc = None

    def model_config(self, model: str) -> dict:
        """``GET /v2/models/<model>/config``."""
        return self.http.get_model_config(model)

    def infer(
        self,
        protocol: str,
        model: str,
        inputs: Mapping[str, np.ndarray],
        *,
        outputs: list[str] | None = None,
        parameters: dict | None = None,
        headers: dict | None = None,
        client=None,
    ) -> dict[str, np.ndarray]:
        """Infer over ``"http"`` or ``"grpc"``; return every output the server sent, as numpy arrays."""
        if protocol == "http":
            client = client or self.http
            requested = [httpclient.InferRequestedOutput(name) for name in outputs] if outputs else None
            result = client.infer(model, http_inputs(inputs), outputs=requested, parameters=parameters, headers=headers)
            names = [output["name"] for output in result.get_response()["outputs"]]
        else:
            client = client or self.grpc
            requested = [grpcclient.InferRequestedOutput(name) for name in outputs] if outputs else None
            result = client.infer(
                model,
                grpc_inputs(inputs),
                outputs=requested,
                parameters=parameters,
                headers=headers,
                client_timeout=CLIENT_TIMEOUT_S,
            )
            names = [output.name for output in result.get_response().outputs]
        return {name: result.as_numpy(name) for name in names}

    def infer_error(self, protocol: str, model: str, inputs: Mapping[str, np.ndarray], **kwargs) -> str:
        """Infer, expecting the request to fail; return the server's error message."""
        with pytest.raises(InferenceServerException) as caught:
            self.infer(protocol, model, inputs, **kwargs)
        return caught.value.message()


@contextlib.contextmanager
def triton_server(
    config: TritonConfig,
    security_config: TritonSecurityConfig | None = None,
    run: bool = True,
    recovery: RecoveryPolicy | None = None,
) -> Iterator[RunningServer]:
    """A Triton (no models yet), started when ``run``; stopped, its clients closed, on exit."""
    triton = Triton(config=config, security_config=security_config, recovery=recovery)
    server = RunningServer(triton)
    try:
        if run:
            triton.run()
        yield server
    finally:
        server.close_clients()
        triton.stop()


@pytest.fixture(scope="module")
def start_triton(server_dir, free_triton_config) -> Iterator[Callable[..., RunningServer]]:
    """Factory: ``start_triton(security_config=None, **config_overrides)``; servers stop after the module."""
    with contextlib.ExitStack() as stack:

        def start(security_config: TritonSecurityConfig | None = None, **overrides) -> RunningServer:
            return stack.enter_context(triton_server(free_triton_config(**overrides), security_config))

        yield start


@pytest.fixture
def new_triton(server_dir, free_triton_config) -> Iterator[Callable[..., RunningServer]]:
    """Factory: ``new_triton(security_config=None, recovery=None, **config_overrides)``, a Triton on free ports
    that is *not* started yet (the test runs it); stopped after the test."""
    with contextlib.ExitStack() as stack:

        def new(
            security_config: TritonSecurityConfig | None = None, recovery: RecoveryPolicy | None = None, **overrides
        ) -> RunningServer:
            config = free_triton_config(**overrides)
            return stack.enter_context(triton_server(config, security_config, run=False, recovery=recovery))

        yield new


@pytest.fixture(params=["http", "grpc"])
def protocol(request) -> str:
    """Run the test once over HTTP and once over gRPC."""
    return request.param
