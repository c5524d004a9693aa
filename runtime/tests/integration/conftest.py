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

Faults: the ``recoveries`` fixture records tritonrt's recovery reports (:class:`Recoveries`); ``probes(server,
model, inputs)`` polls readiness and inference side by side from two threads (:class:`Probes`, a context
manager)::

    with probes(server, "double", inputs) as probe:
        kill_something()
        recoveries.wait_recovered()
    assert probe.ready_between(recoveries.wait_fault("lost"), recoveries.wait_recovered()) == []
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import threading
import time
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
def worker_mode(request) -> Iterator[str | None]:
    """Where the module's models run: TRITONRT_WORKERS while its servers run. A module that sets
    ``WORKER_MODES = ("thread", "process")`` runs its tests once per mode; others leave the environment as is."""
    mode = getattr(request, "param", None)
    with pytest.MonkeyPatch.context() as patch:
        if mode is not None:
            patch.setenv("TRITONRT_WORKERS", mode)
        yield mode


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    modes = getattr(metafunc.module, "WORKER_MODES", None)
    if modes and "worker_mode" in metafunc.fixturenames:
        metafunc.parametrize("worker_mode", modes, indirect=True, scope="module")


@pytest.fixture(scope="module")
def start_triton(server_dir, free_triton_config, worker_mode) -> Iterator[Callable[..., RunningServer]]:
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


# -- faults: tritonrt's recovery reports and probes through an outage -------------------------------------

RECOVERY_WAIT_S = 120  # a guard against hanging, not a measurement
_RECOVERED = ("reloaded and ready again", "restarted; its models are ready", "restarted and ready again")


class Recoveries(logging.Handler):
    """Records tritonrt's recovery reports (logger ``tritonrt.server``) with their times: a fault is reported
    as an error as its recovery starts, a recovery when it is done."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.faults: list[tuple[float, str]] = []
        self.recovered: list[tuple[float, str]] = []
        self._changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        if record.name != "tritonrt.server":  # not tritonserver's own log lines (tritonrt.server.tritonserver)
            return
        message = record.getMessage()
        with self._changed:
            if record.levelno >= logging.ERROR:
                self.faults.append((time.monotonic(), message))
            elif any(text in message for text in _RECOVERED):
                self.recovered.append((time.monotonic(), message))
            self._changed.notify_all()

    def __enter__(self) -> Recoveries:
        logger = logging.getLogger("tritonrt.server")
        self._level = logger.level
        logger.setLevel(logging.INFO)
        logger.addHandler(self)
        return self

    def __exit__(self, *_: object) -> None:
        logger = logging.getLogger("tritonrt.server")
        logger.removeHandler(self)
        logger.setLevel(self._level)

    def wait_recovered(self, count: int = 1) -> float:
        """Wait for the ``count``-th recovery report; return its time."""
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.recovered) >= count, RECOVERY_WAIT_S), self.faults
            return self.recovered[count - 1][0]

    def wait_fault(self, text: str) -> float:
        """Wait for a fault report containing ``text``; return its time."""

        def found() -> list[float]:
            return [when for when, message in self.faults if text in message]

        with self._changed:
            assert self._changed.wait_for(found, RECOVERY_WAIT_S), self.faults
            return found()[0]


class Probes:
    """Readiness (``/v2/health/ready``, what Docker's HEALTHCHECK and Kubernetes' probes ask) and inference probes
    against ``http_url`` (``host:port``), each from its own thread; answers stamped (sent, answered, status)."""

    def __init__(self, http_url: str, model: str, inputs: Mapping[str, np.ndarray]):
        self._host, _, port = http_url.rpartition(":")
        self._port = int(port)
        self._model = model
        self._body = json.dumps(
            {
                "inputs": [
                    {"name": name, "shape": list(array.shape), "datatype": "FP32", "data": array.ravel().tolist()}
                    for name, array in inputs.items()
                ]
            }
        ).encode()
        self.ready: list[tuple[float, float, int | None]] = []  # (sent, answered, HTTP status or None)
        self.inferences: list[tuple[float, float, int | None]] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._poll, args=("GET", "/v2/health/ready", None, self.ready), daemon=True),
            threading.Thread(
                target=self._poll,
                args=("POST", f"/v2/models/{model}/infer", self._body, self.inferences),
                daemon=True,
            ),
        ]

    def _status(self, method: str, path: str, body: bytes | None) -> int | None:
        connection = http.client.HTTPConnection(self._host, self._port, timeout=30)
        try:
            connection.request(method, path, body=body)
            response = connection.getresponse()
            response.read()
            return response.status
        except OSError:
            return None
        finally:
            connection.close()

    def _poll(self, method: str, path: str, body: bytes | None, log: list) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            status = self._status(method, path, body)
            log.append((sent, time.monotonic(), status))
            time.sleep(0.005)

    def __enter__(self) -> Probes:
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + RECOVERY_WAIT_S
        while not (self.ready and self.inferences):  # both answered once before the fault
            assert time.monotonic() < deadline, "the probes got no answer"
            time.sleep(0.01)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def ready_between(self, start: float, end: float) -> list[tuple[float, float, int | None]]:
        """Readiness probes sent after ``start`` and answered before ``end`` that said ready (200)."""
        return [probe for probe in self.ready if probe[0] >= start and probe[1] <= end and probe[2] == 200]

    def not_ready_between(self, start: float, end: float) -> int:
        """How many readiness probes sent after ``start`` and answered before ``end`` said not ready."""
        return sum(1 for sent, answered, status in self.ready if sent >= start and answered <= end and status != 200)

    def failed_inferences_after(self, start: float) -> list[tuple[float, float, int | None]]:
        return [probe for probe in self.inferences if probe[0] >= start and probe[2] != 200]

    def wait_for_inferences_after(self, start: float, count: int = 5) -> None:
        """Wait until ``count`` inference probes sent after ``start`` were answered."""
        deadline = time.monotonic() + RECOVERY_WAIT_S
        while sum(1 for probe in self.inferences if probe[0] >= start) < count:
            assert time.monotonic() < deadline, "the inference probes stopped"
            time.sleep(0.01)


@pytest.fixture
def recoveries() -> Iterator[Recoveries]:
    """tritonrt's recovery reports during the test."""
    with Recoveries() as recorded:
        yield recorded


@pytest.fixture
def probes() -> Callable[[RunningServer, str, Mapping[str, np.ndarray]], Probes]:
    """Factory: ``probes(server, model, inputs)``, a :class:`Probes` context manager."""
    return lambda server, model, inputs: Probes(server.http_url, model, inputs)
