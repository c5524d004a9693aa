"""A rolling replacement behind a *connection* balancer (a Kubernetes Service) loses no request of tritonrt's
clients. A real tritonserver, two of them.

kube-proxy pins each TCP connection to one pod: taking a pod out of the endpoints sends new connections
elsewhere, but the connections already open stay on it. While the stopping server drains
(``tritonrt.server.drain``), every request on those connections is refused (its models are unloaded), and then
the server closes them. The clients retry a request refused that way once, on a fresh connection, which the
balancer sends to a ready server. :class:`PinningProxy` plays kube-proxy: a TCP proxy that pins each
connection to the backend that was ready when it opened.

Example of what a test does::

    with PinningProxy(old_port) as proxy, ModelClient(f"http://127.0.0.1:{proxy.port}", "echo") as client:
        client.infer_sample(X)  # pinned to the old server
        proxy.route_to(new_port)  # the old server leaves the endpoints...
        old.triton.stop()  # ...and drains: the client's next requests are retried on the new one
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import socket
import threading
import time

import numpy as np
import pytest

from tritonrt.client import AsyncioDecoupledModelClient, AsyncioModelClient, DecoupledModelClient, ModelClient
from tritonrt.client.exceptions import (
    PyTritonClientError,
    PyTritonClientInferenceServerError,
)
from tritonrt.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.integration

WAIT_S = 60.0  # a guard against hanging, not a measurement
THREADS = 4  # requests sent at once, each thread in a loop
AFTER_STOP_REQUESTS = 20  # each thread's requests answered by the new server before the load stops
STREAMS = 200  # sequential streams: 200 showed the stuck request in each try, one stream did not
X = np.array([1.5], np.float32)
TENSORS = (
    [Tensor(name="x", dtype=np.float32, shape=(1,))],
    [Tensor(name="y", dtype=np.float32, shape=(1,)), Tensor(name="server", dtype=np.int32, shape=(1,))],
)


class PinningProxy:
    """A TCP proxy on a free local port that pins each accepted connection to the backend port that
    :meth:`route_to` last named (as kube-proxy pins a connection to a pod); a backend that closes its side
    closes the client's side too. A context manager: leaving it closes every connection."""

    def __init__(self, backend_port: int):
        self._backend = backend_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self.connections: dict[int, int] = {}  # backend port -> connections pinned to it

    def route_to(self, backend_port: int) -> None:
        """Send the connections accepted from now on to ``backend_port``; open ones stay where they are."""
        with self._lock:
            self._backend = backend_port

    def __enter__(self) -> PinningProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        self._listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                backend_port = self._backend
                self.connections[backend_port] = self.connections.get(backend_port, 0) + 1
            try:
                backend = socket.create_connection(("127.0.0.1", backend_port), timeout=WAIT_S)
            except OSError:
                client.close()  # nothing listens there: the client sees its connection closed
                continue
            backend.settimeout(None)
            for sock in (client, backend):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    client.close()
                    backend.close()
                    return
                self._sockets += [client, backend]
            threading.Thread(target=self._pump, args=(client, backend), daemon=True).start()
            threading.Thread(target=self._pump, args=(backend, client), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):  # one side closed: close both, as a proxy whose backend went away does
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _serving(new_triton, number: int, held: threading.Event | None = None):
    """A started server whose model ``echo`` answers ``y = x`` and its ``server`` number (an error for x < 0;
    for x = 2, once ``held`` is set, only when it is cleared), and whose decoupled model ``stream`` streams that
    answer twice."""
    release = threading.Event()

    def answer(requests):
        time.sleep(0.002)  # requests are in flight when the drain begins
        if any(float(request["x"][0]) < 0 for request in requests):
            raise ValueError("x must not be negative")
        if held is not None and float(requests[0]["x"][0]) == 2:
            held.set()
            release.wait(WAIT_S)
        return [{"y": request["x"], "server": np.array([number], np.int32)} for request in requests]

    def stream(requests):
        yield answer(requests)
        yield answer(requests)

    server = new_triton(exit_timeout_secs=int(WAIT_S))
    server.triton.bind("echo", answer, *TENSORS, config=ModelConfig(batching=False))
    server.triton.bind("stream", stream, *TENSORS, config=ModelConfig(batching=False, decoupled=True))
    server.triton.run()
    server.release = release
    return server


def _port(server, protocol: str) -> int:
    config = server.triton.config
    return config.http_port if protocol == "http" else config.grpc_port


class Load:
    """A thread per function of ``infers`` sending requests through it in a loop until stopped; each answer is
    recorded with the server that answered, each failure with its error."""

    def __init__(self, infers):
        self._infers = infers
        self._stop = threading.Event()
        self.answered: list[int] = []  # the server number of each answer
        self.failures: list[str] = []
        self.retried = 0  # requests the clients sent again
        self._pool = concurrent.futures.ThreadPoolExecutor(THREADS)
        self._threads: list[concurrent.futures.Future[None]] = []

    def _loop(self, infer) -> None:
        while not self._stop.is_set():
            try:
                outputs = infer()
            except PyTritonClientError as error:
                self.failures.append(f"{type(error).__name__}: {error}")
                continue
            assert outputs["y"].tolist() == X.tolist()
            self.answered.append(int(outputs["server"][0]))

    def __enter__(self) -> Load:
        self._threads = [self._pool.submit(self._loop, infer) for infer in self._infers]
        return self

    def wait_answers_from(self, number: int, count: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while self.answered.count(number) < count:
            assert time.monotonic() < deadline, f"server {number} answered {self.answered.count(number)} requests"
            assert all(not thread.done() for thread in self._threads), [t.exception() for t in self._threads]
            time.sleep(0.01)

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.result(WAIT_S)
        self._pool.shutdown()


def _replace(new_triton, protocol: str, make_infer, caplog) -> Load:
    """Serve through a pinning proxy from server 1, replace it by server 2 under load; return the load."""
    caplog.set_level(logging.DEBUG, logger="tritonrt.client")
    old, new = _serving(new_triton, 1), _serving(new_triton, 2)
    with PinningProxy(_port(old, protocol)) as proxy:
        url = f"{protocol}://127.0.0.1:{proxy.port}"
        with make_infer(url) as (infers, retried), Load(infers) as load:
            load.wait_answers_from(1, 10 * THREADS)  # connected, pinned to the old server
            proxy.route_to(_port(new, protocol))  # the old server leaves the endpoints...
            stop_started = time.monotonic()
            assert old.triton.stop()  # ...and drains, then stops: its connections close
            stop_took = time.monotonic() - stop_started
            load.wait_answers_from(2, AFTER_STOP_REQUESTS * THREADS)
            load.retried = retried()
        print(
            f"{protocol} {make_infer.__name__}: {len(load.answered)} answered ({load.answered.count(1)} by the old "
            f"server, {load.answered.count(2)} by the new), {len(load.failures)} failed, {load.retried} retried; "
            f"connections per backend port {proxy.connections}; the stop took {stop_took:.1f} s; "
            f"failures: {load.failures}"
        )
    return load


def _last_of_two(responses):
    responses = list(responses)
    assert len(responses) == 2, responses
    return responses[-1]


@contextlib.contextmanager
def _sync_clients(url: str):
    """A ModelClient per thread (each with its own connection); yields their infer functions and a function
    that sums their retries."""
    with contextlib.ExitStack() as stack:
        clients = [stack.enter_context(ModelClient(url, "echo", inference_timeout_s=WAIT_S)) for _ in range(THREADS)]
        yield (
            [functools.partial(client.infer_sample, X) for client in clients],
            lambda: sum(client.retried_requests for client in clients),
        )


@contextlib.contextmanager
def _sync_streams(url: str):
    """A DecoupledModelClient per thread, each request's two responses collected; as :func:`_sync_clients`."""
    with contextlib.ExitStack() as stack:
        clients = [
            stack.enter_context(DecoupledModelClient(url, "stream", inference_timeout_s=WAIT_S)) for _ in range(THREADS)
        ]
        yield (
            [lambda client=client: _last_of_two(client.infer_sample(X)) for client in clients],
            lambda: sum(client.retried_requests for client in clients),
        )


async def _collect(responses):
    return [outputs async for outputs in responses]


@contextlib.contextmanager
def _asyncio_client(url: str, stream: bool = False):
    """One AsyncioModelClient (with ``stream``: AsyncioDecoupledModelClient) on its own event loop thread,
    called from every thread (each call blocks for its answer); yields the infer functions and a function that
    returns its retries."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    if stream:
        client = AsyncioDecoupledModelClient(url, "stream", inference_timeout_s=WAIT_S)
        call = lambda: _collect(client.infer_sample(X))  # noqa: E731
    else:
        client = AsyncioModelClient(url, "echo", inference_timeout_s=WAIT_S)
        call = lambda: client.infer_sample(X)  # noqa: E731
    try:
        if stream:
            infer = lambda: _last_of_two(asyncio.run_coroutine_threadsafe(call(), loop).result(WAIT_S))  # noqa: E731
        else:
            infer = lambda: asyncio.run_coroutine_threadsafe(call(), loop).result(WAIT_S)  # noqa: E731
        yield [infer] * THREADS, lambda: client.retried_requests
    finally:
        asyncio.run_coroutine_threadsafe(client.close(), loop).result(WAIT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_S)
        loop.close()


def _asyncio_streams(url: str):
    return _asyncio_client(url, stream=True)


def _assert_nothing_lost(load: Load, caplog) -> None:
    assert load.failures == []
    retried = [r.getMessage() for r in caplog.records if r.name == "tritonrt.client" and "retried" in r.getMessage()]
    assert load.retried >= 1, "no request was refused by the stopping server: the test did not test the retry"
    assert len(retried) == load.retried, retried  # each retry logged


@pytest.mark.parametrize("make_infer", [_sync_clients, _asyncio_client], ids=["sync", "asyncio"])
def test_a_rolling_replacement_behind_a_connection_balancer_loses_no_request(new_triton, protocol, make_infer, caplog):
    _assert_nothing_lost(_replace(new_triton, protocol, make_infer, caplog), caplog)


@pytest.mark.parametrize("make_infer", [_sync_streams, _asyncio_streams], ids=["sync", "asyncio"])
def test_a_rolling_replacement_loses_no_stream(new_triton, make_infer, caplog):
    _assert_nothing_lost(_replace(new_triton, "grpc", make_infer, caplog), caplog)


def test_a_request_refused_by_the_draining_server_is_answered_by_the_ready_one(new_triton, protocol):
    # A request held in the old server's model keeps its drain going: the refusal is the drain's, not a closed
    # connection's.
    held = threading.Event()
    old, new = _serving(new_triton, 1, held), _serving(new_triton, 2)
    with (
        PinningProxy(_port(old, protocol)) as proxy,
        ModelClient(f"{protocol}://127.0.0.1:{proxy.port}", "echo", inference_timeout_s=WAIT_S) as client,
        ModelClient(f"{protocol}://127.0.0.1:{proxy.port}", "echo", inference_timeout_s=WAIT_S) as holder,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        try:
            client.infer_sample(X)  # connected, pinned to the old server
            in_flight = pool.submit(holder.infer_sample, np.array([2.0], np.float32))
            assert held.wait(WAIT_S)
            proxy.route_to(_port(new, protocol))
            stopping = pool.submit(old.triton.stop)
            probe = old.grpc_client()
            deadline = time.monotonic() + WAIT_S
            while probe.is_model_ready("echo"):  # the drain began: the model is being unloaded
                assert time.monotonic() < deadline, "the model stayed ready after stop()"
                time.sleep(0.02)
            probe.close()
            assert client.infer_sample(X)["server"].tolist() == [2]  # refused by the old server, sent to the new
            assert client.retried_requests == 1
            assert client.infer_sample(X)["server"].tolist() == [2]  # over the new connection at once
            assert client.retried_requests == 1
        finally:
            old.release.set()
        assert in_flight.result(WAIT_S)["server"].tolist() == [1]
        assert stopping.result(WAIT_S)


def test_a_bad_request_fails_at_once_with_its_message(new_triton, protocol, caplog):
    caplog.set_level(logging.DEBUG, logger="tritonrt.client")
    server = _serving(new_triton, 1)
    with PinningProxy(_port(server, protocol)) as proxy:
        with ModelClient(f"{protocol}://127.0.0.1:{proxy.port}", "echo", inference_timeout_s=WAIT_S) as client:
            client.infer_sample(X)
            with pytest.raises(PyTritonClientInferenceServerError) as caught:
                client.infer_sample(-X)
        assert proxy.connections == {_port(server, protocol): 1}  # sent once, on the one connection
    assert "x must not be negative" in str(caught.value)
    assert not [record for record in caplog.records if "retried" in record.getMessage()]


def test_answered_streams_do_not_hold_the_stop(new_triton, caplog):
    # DecoupledModelClient cancelled each stream when it ended, answered or not; the server then counted one of
    # the answered requests in flight for good: its drain waited exit_timeout_secs for the model to unload.
    caplog.set_level(logging.INFO, logger="tritonrt.server")
    server = _serving(new_triton, 1)
    with DecoupledModelClient(f"grpc://{server.grpc_url}", "stream", inference_timeout_s=WAIT_S) as client:
        for _ in range(STREAMS):
            assert _last_of_two(client.infer_sample(X))["server"].tolist() == [1]
    started = time.monotonic()
    assert server.triton.stop()
    took = time.monotonic() - started
    print(f"stop() after {STREAMS} answered streams took {took:.1f} s")
    assert "still had requests in flight" not in caplog.text  # the drain waited for none of them
