"""KServe v2 over HTTP: :class:`HttpTransport` (blocking, thread-safe) and :class:`AsyncHttpTransport` (asyncio).

tritonclient.http runs on geventhttpclient, whose connections belong to the thread that made them. The
blocking transport sends requests with the standard library's ``http.client`` instead (a pool of keep-alive
connections, each used by one request at a time) and uses tritonclient.http only to encode and decode
inference bodies, so one client can be shared by many threads. The asyncio transport runs on
tritonclient.http.aio (aiohttp). Every call takes its own timeout, sub-second ones included.

Example::

    transport = HttpTransport(TritonUrl.from_url("localhost:8000"), auth_headers={})
    request = InferRequest("add", None, {"a": np.ones((1, 2), np.float32)}, ["sum"], parameters=None, headers={})
    transport.infer(request, timeout=1.0)
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import threading
import urllib.parse
from collections.abc import AsyncGenerator, Generator, Mapping
from typing import Any

import aiohttp
import numpy as np
import tritonclient.http
import tritonclient.http.aio
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from tritonrt.client._transport import (
    AsyncTransportBase,
    InferRequest,
    Outputs,
    TritonUrl,
    grpc_only_error,
    server_error,
    timeout_error,
    unreachable_error,
)
from tritonrt.client.exceptions import PyTritonClientValueError

__all__ = ["AsyncHttpTransport", "HttpTransport"]

_STALE_CONNECTION_ERRORS = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
_HEADER_LENGTH = "Inference-Header-Content-Length"
_MAX_IDLE_CONNECTIONS = 32


def model_path(model_name: str, model_version: str | None) -> str:
    """``/v2/models/<name>[/versions/<version>]`` with the parts URL-quoted."""
    path = f"/v2/models/{urllib.parse.quote(model_name, safe='')}"
    if model_version:
        path += f"/versions/{urllib.parse.quote(str(model_version), safe='')}"
    return path


def build_http_inputs(named: Mapping[str, np.ndarray]) -> list[tritonclient.http.InferInput]:
    """tritonclient.http inputs carrying ``named`` arrays as binary data."""
    inputs = []
    for name, array in named.items():
        infer_input = tritonclient.http.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        infer_input.set_data_from_numpy(array, binary_data=True)
        inputs.append(infer_input)
    return inputs


def requested_http_outputs(output_names: list[str]) -> list[tritonclient.http.InferRequestedOutput]:
    """tritonclient.http requested outputs, returned as binary data."""
    return [tritonclient.http.InferRequestedOutput(name, binary_data=True) for name in output_names]


def http_outputs(result: Any) -> Outputs:
    """The outputs of a tritonclient.http ``InferResult`` by name."""
    return {output["name"]: result.as_numpy(output["name"]) for output in result.get_response()["outputs"]}


def load_request_body(config: str | None, files: Mapping[str, bytes] | None) -> dict[str, Any]:
    """The JSON body of a repository load request (files base64-encoded, as Triton expects over HTTP)."""
    parameters: dict[str, Any] = {}
    if config is not None:
        parameters["config"] = config
    for path, content in (files or {}).items():
        parameters[path] = base64.b64encode(content).decode("ascii")
    return {"parameters": parameters} if parameters else {}


class HttpTransport:
    """Synchronous KServe v2 HTTP calls; safe to use from many threads at once."""

    def __init__(self, url: TritonUrl, auth_headers: Mapping[str, str]):
        self.url = url
        self._auth_headers = dict(auth_headers)
        self._idle: list[http.client.HTTPConnection] = []  # keep-alive connections free for reuse
        self._lock = threading.Lock()
        self._closed = False
        self._generation = 0  # connections opened before the last reconnect() are not reused
        self._opened_in: dict[int, int] = {}  # id(connection) -> the generation it was opened in

    # -- readiness and metadata ------------------------------------------------------------------

    def is_server_live(self, timeout: float) -> bool:
        """True when the server answers its liveness probe."""
        return self._probe("/v2/health/live", timeout, "Liveness check", "")

    def is_server_ready(self, timeout: float) -> bool:
        """True when the server says it is ready."""
        return self._probe("/v2/health/ready", timeout, "Readiness check", "")

    def is_model_ready(self, model_name: str, model_version: str | None, timeout: float) -> bool:
        """True when the model (version) is loaded and ready."""
        path = model_path(model_name, model_version) + "/ready"
        return self._probe(path, timeout, "Model readiness check", model_name)

    def repository_index(self, timeout: float) -> list[dict[str, Any]]:
        """Entries (name, version, state, reason) of the model repository index."""
        action = "Reading the model repository index"
        entries: list[dict[str, Any]] = self._json("POST", "/v2/repository/index", b"", timeout, action, "")
        return entries

    def model_config(self, model_name: str, model_version: str | None, timeout: float) -> dict[str, Any]:
        """The model's config as JSON."""
        path = model_path(model_name, model_version) + "/config"
        config: dict[str, Any] = self._json("GET", path, None, timeout, "Reading the model config", model_name)
        return config

    def load_model(
        self, model_name: str, config: str | None, files: Mapping[str, bytes] | None, timeout: float
    ) -> None:
        """Ask the server to load (or reload) the model."""
        path = f"/v2/repository/models/{urllib.parse.quote(model_name, safe='')}/load"
        body = json.dumps(load_request_body(config, files)).encode()
        self._json("POST", path, body, timeout, "Loading the model", model_name, expect_body=False)

    def unload_model(self, model_name: str, timeout: float) -> None:
        """Ask the server to unload the model."""
        path = f"/v2/repository/models/{urllib.parse.quote(model_name, safe='')}/unload"
        self._json("POST", path, b"{}", timeout, "Unloading the model", model_name, expect_body=False)

    # -- inference -------------------------------------------------------------------------------

    def infer(self, request: InferRequest, timeout: float) -> Outputs:
        """Run one inference request and return its outputs by name."""
        try:
            body, json_size = tritonclient.http.InferenceServerClient.generate_request_body(
                build_http_inputs(request.inputs),
                requested_http_outputs(request.output_names),
                parameters=request.parameters_dict,
            )
        except InferenceServerException as error:
            raise PyTritonClientValueError(f"Invalid inference request: {error.message()}") from None
        request_headers = dict(request.headers)
        if json_size is not None:
            request_headers[_HEADER_LENGTH] = str(json_size)
        path = model_path(request.model_name, request.model_version) + "/infer"
        status, response_headers, data = self._request(
            "POST", path, body=body, headers=request_headers, timeout=timeout, action="Inference"
        )
        if status != 200:
            message = _error_text(data)
            raise server_error(message, str(status), url=self.url, action="Inference", model=request.model_name)
        header_length = response_headers.get(_HEADER_LENGTH)
        result = tritonclient.http.InferenceServerClient.parse_response_body(
            data,
            header_length=int(header_length) if header_length else None,
            content_encoding=response_headers.get("Content-Encoding"),
        )
        return http_outputs(result)

    def stream_infer(self, request: InferRequest, timeout: float) -> Generator[Outputs, None, None]:
        """Not over HTTP: Triton streams decoupled responses over gRPC only."""
        raise grpc_only_error(self.url, "Streaming the responses of a decoupled model")

    @property
    def generation(self) -> int:
        """How many times :meth:`reconnect` dropped the open connections."""
        return self._generation

    def reconnect(self, generation: int) -> None:
        """Open new connections for the next requests, unless another call did since ``generation``: close the
        idle ones now, the busy ones when their request ends."""
        with self._lock:
            if generation != self._generation:
                return
            self._generation += 1
            idle, self._idle = self._idle, []
        for connection in idle:
            self._forget(connection)

    def close(self) -> None:
        """Close the idle connections now and the busy ones when their request ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            self._forget(connection)

    # -- plumbing --------------------------------------------------------------------------------

    def _probe(self, path: str, timeout: float, action: str, model: str) -> bool:
        """True for 200, False for another answer; a refusal (403: access token needed) raises."""
        status, _, data = self._request("GET", path, timeout=timeout, action=action)
        if status == 403:
            raise server_error(_error_text(data), str(status), url=self.url, action=action, model=model)
        return status == 200

    def _json(
        self,
        method: str,
        path: str,
        body: bytes | None,
        timeout: float,
        action: str,
        model: str,
        expect_body: bool = True,
    ) -> Any:
        status, _, data = self._request(method, path, body=body, timeout=timeout, action=action)
        if status != 200:
            raise server_error(_error_text(data), str(status), url=self.url, action=action, model=model)
        return json.loads(data) if expect_body else None

    def _acquire(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection (reused=True) or a new one; each is used by one request at a time."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
            connection = http.client.HTTPConnection(self.url.hostname, self.url.port)
            self._opened_in[id(connection)] = self._generation
        return connection, False

    def _release(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            current = self._opened_in.get(id(connection)) == self._generation
            if current and not self._closed and len(self._idle) < _MAX_IDLE_CONNECTIONS:
                self._idle.append(connection)
                return
        self._forget(connection)

    def _forget(self, connection: http.client.HTTPConnection) -> None:
        """Close ``connection`` for good."""
        with self._lock:
            self._opened_in.pop(id(connection), None)
        connection.close()

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float,
        action: str,
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        all_headers = {**self._auth_headers, **(headers or {})}
        while True:
            connection, reused = self._acquire()
            connection.timeout = timeout
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
            try:
                connection.request(method, path, body=body, headers=all_headers)
                response = connection.getresponse()
                data = response.read()
            except TimeoutError:
                self._forget(connection)
                raise timeout_error(self.url, action, timeout) from None
            except _STALE_CONNECTION_ERRORS as error:
                self._forget(connection)
                if reused:  # the server closed an idle keep-alive connection: retry on a fresh one
                    continue
                raise unreachable_error(self.url, error) from None
            except (OSError, http.client.HTTPException) as error:
                self._forget(connection)
                raise unreachable_error(self.url, error) from None
            if response.will_close:
                self._forget(connection)
            else:
                self._release(connection)
            return response.status, response.headers, data


def _error_text(data: bytes) -> str:
    try:
        return str(json.loads(data)["error"])
    except (ValueError, KeyError, TypeError):
        return data.decode("utf-8", "replace") or "the server sent an empty error reply"


class AsyncHttpTransport(AsyncTransportBase):
    """KServe v2 over HTTP with aiohttp (tritonclient.http.aio); the asyncio twin of :class:`HttpTransport`."""

    _unreachable = (aiohttp.ClientError, OSError)

    def __init__(self, url: TritonUrl, auth_headers: Mapping[str, str]):
        super().__init__(url, auth_headers)
        self._sync = HttpTransport(url, auth_headers)

    def _make_client(self) -> Any:
        # Timeouts come from asyncio.wait_for; none in aiohttp itself.
        return tritonclient.http.aio.InferenceServerClient(self.url.without_scheme, conn_timeout=None)

    async def repository_index(self, timeout: float) -> list[dict[str, Any]]:
        """Entries (name, version, state, reason) of the model repository index."""
        return await self._call(
            "Reading the model repository index",
            "",
            timeout,
            lambda: self.client.get_model_repository_index(headers=self._headers()),
        )

    async def model_config(self, model_name: str, model_version: str | None, timeout: float) -> dict[str, Any]:
        """The model's config as JSON."""
        return await self._call(
            "Reading the model config",
            model_name,
            timeout,
            lambda: self.client.get_model_config(model_name, model_version or "", headers=self._headers()),
        )

    async def load_model(
        self, model_name: str, config: str | None, files: Mapping[str, bytes] | None, timeout: float
    ) -> None:
        """Ask the server to load the model (in a thread, on the sync transport: rare, and it may be slow)."""
        await asyncio.to_thread(self._sync.load_model, model_name, config, files, timeout)

    async def unload_model(self, model_name: str, timeout: float) -> None:
        """Ask the server to unload the model."""
        await asyncio.to_thread(self._sync.unload_model, model_name, timeout)

    async def infer(self, request: InferRequest, timeout: float) -> Outputs:
        """Run one inference request and return its outputs by name."""
        result = await self._call(
            "Inference",
            request.model_name,
            timeout,
            lambda: self.client.infer(
                request.model_name,
                build_http_inputs(request.inputs),
                model_version=request.version_or_empty,
                outputs=requested_http_outputs(request.output_names),
                headers=self._headers(request.headers),
                parameters=request.parameters_dict,
            ),
        )
        return http_outputs(result)

    def stream_infer(self, request: InferRequest, timeout: float) -> AsyncGenerator[Outputs, None]:
        """Not over HTTP: Triton streams decoupled responses over gRPC only."""
        raise grpc_only_error(self.url, "Streaming the responses of a decoupled model")

    async def close(self) -> None:
        """Close the aiohttp session and the connections of load/unload calls."""
        await super().close()
        self._sync.close()
