"""The transport layer's common ground: the server's URL, the request a transport sends, the typed Protocols
that the clients call (:class:`Transport`, blocking; :class:`AsyncTransport`, asyncio), and how what the
server or the network reports becomes a client exception with an actionable message.

The transports themselves live in ``_http`` (HttpTransport, AsyncHttpTransport) and ``_grpc`` (GrpcTransport,
AsyncGrpcTransport): the sync and async halves of each protocol side by side.

Example::

    url = TritonUrl.from_url("grpc://localhost")
    request = InferRequest("add", None, {"a": a, "b": b}, ["sum"], parameters=None, headers={})
    transport: Transport = GrpcTransport(url, auth_headers={})
    outputs = transport.infer(request, timeout=1.0)
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import http.client
import urllib.parse
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Mapping
from typing import Any, Protocol, TypeVar

import numpy as np
from tritonclient.utils import InferenceServerException

from tritonrt.client._slots import AsyncClientSlot
from tritonrt.client.exceptions import (
    PyTritonClientError,
    PyTritonClientInferenceServerError,
    PyTritonClientInvalidUrlError,
    PyTritonClientModelUnavailableError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)
from tritonrt.constants import DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT

__all__ = [
    "DEFAULT_GRPC_PORT",
    "DEFAULT_HTTP_PORT",
    "AsyncTransport",
    "AsyncTransportBase",
    "InferRequest",
    "Outputs",
    "ServerUnreachableError",
    "Transport",
    "TritonUrl",
    "call_error",
    "from_tritonclient",
    "grpc_only_error",
    "server_error",
    "timeout_error",
    "unreachable_error",
]

Outputs = dict[str, np.ndarray]
"""A response's output tensors by name."""
_T = TypeVar("_T")

# -- the server's address --------------------------------------------------------------------------------------

_DEFAULT_PORTS = {"http": DEFAULT_HTTP_PORT, "grpc": DEFAULT_GRPC_PORT}
_EXAMPLES = "e.g. 'localhost', 'http://localhost:8000' or 'grpc://localhost:8001'"


@dataclasses.dataclass(frozen=True)
class TritonUrl:
    """A parsed server address.

    Example::

        >>> TritonUrl.from_url("grpc://localhost")
        TritonUrl(scheme='grpc', hostname='localhost', port=8001)
        >>> TritonUrl.from_url("10.0.0.5:9000").with_scheme
        'http://10.0.0.5:9000'
    """

    scheme: str
    hostname: str
    port: int

    @classmethod
    def from_url(cls, url: str) -> TritonUrl:
        """Parse ``url``; a missing scheme means HTTP and a missing port the scheme's default port.

        Raises:
            PyTritonClientInvalidUrlError: if ``url`` is not a string, has another scheme than
                http or grpc, has no host, a path, or a bad port.
        """
        if not isinstance(url, str):
            raise PyTritonClientInvalidUrlError(f"Invalid url {url!r}: the url must be a string, {_EXAMPLES}.")
        text = url.strip()
        if "://" in text:
            scheme = text.split("://", 1)[0].lower()
            if scheme not in _DEFAULT_PORTS:
                raise PyTritonClientInvalidUrlError(
                    f"Invalid url {url!r}: scheme {scheme!r} is not supported; use http:// or grpc://, {_EXAMPLES}."
                )
        else:
            scheme = "http"
            text = f"http://{text}"
        parts = urllib.parse.urlsplit(text)
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise PyTritonClientInvalidUrlError(
                f"Invalid url {url!r}: give only the scheme, host and port of the server, without a path, {_EXAMPLES}."
            )
        if not parts.hostname:
            raise PyTritonClientInvalidUrlError(f"Invalid url {url!r}: it names no host, {_EXAMPLES}.")
        try:
            port = parts.port
        except ValueError as error:
            raise PyTritonClientInvalidUrlError(
                f"Invalid url {url!r}: the port must be a number from 0 to 65535, {_EXAMPLES}."
            ) from error
        return cls(scheme=scheme, hostname=parts.hostname, port=port or _DEFAULT_PORTS[scheme])

    @property
    def without_scheme(self) -> str:
        """``host:port`` (IPv6 hosts in brackets), the form tritonclient expects."""
        host = f"[{self.hostname}]" if ":" in self.hostname else self.hostname
        return f"{host}:{self.port}"

    @property
    def with_scheme(self) -> str:
        """``scheme://host:port``."""
        return f"{self.scheme}://{self.without_scheme}"


# -- what a transport sends ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class InferRequest:
    """What to send: the model, its inputs by name, the outputs to return, parameters and headers."""

    model_name: str
    model_version: str | None
    inputs: Mapping[str, np.ndarray]
    output_names: list[str]
    parameters: Mapping[str, Any] | None
    headers: Mapping[str, str]

    @property
    def version_or_empty(self) -> str:
        """The model version as tritonclient takes it: "" for the latest."""
        return self.model_version or ""

    @property
    def parameters_dict(self) -> dict[str, Any] | None:
        """The request parameters as a new dict, None when there are none."""
        return dict(self.parameters) if self.parameters else None


# -- what the clients call -------------------------------------------------------------------------------------


class Transport(Protocol):
    """Blocking KServe v2 calls to one server (HTTP or gRPC); implementations are safe to share between threads.

    Every call takes its own timeout in seconds; failures raise client exceptions (see ``server_error``).
    """

    url: TritonUrl

    def is_server_live(self, timeout: float) -> bool:
        """True when the server answers its liveness probe."""
        ...

    def is_server_ready(self, timeout: float) -> bool:
        """True when the server says it is ready (with strict readiness: and all its loaded models)."""
        ...

    def is_model_ready(self, model_name: str, model_version: str | None, timeout: float) -> bool:
        """True when the model (version) is loaded and ready."""
        ...

    def repository_index(self, timeout: float) -> list[dict[str, Any]]:
        """Entries (name, version, state, reason) of the model repository index."""
        ...

    def model_config(self, model_name: str, model_version: str | None, timeout: float) -> dict[str, Any]:
        """The model's config as JSON (see ``tritonrt.model_config.parser``)."""
        ...

    def load_model(
        self, model_name: str, config: str | None, files: Mapping[str, bytes] | None, timeout: float
    ) -> None:
        """Ask the server to load (or reload) the model."""
        ...

    def unload_model(self, model_name: str, timeout: float) -> None:
        """Ask the server to unload the model."""
        ...

    def infer(self, request: InferRequest, timeout: float) -> Outputs:
        """Run one inference request and return its outputs by name."""
        ...

    def stream_infer(self, request: InferRequest, timeout: float) -> Generator[Outputs, None, None]:
        """Send one request to a decoupled model and yield each response; ``timeout`` bounds each wait.

        gRPC only: over HTTP it raises PyTritonClientValueError (see ``grpc_only_error``).
        """
        ...

    @property
    def generation(self) -> int:
        """How many times :meth:`reconnect` opened new connections."""
        ...

    def reconnect(self, generation: int) -> None:
        """Send the next requests over new connections (a balancer places each anew), unless another call
        did so since ``generation``; the open ones close once their requests are answered."""
        ...

    def close(self) -> None:
        """Release the connections."""
        ...


class AsyncTransport(Protocol):
    """The asyncio twin of :class:`Transport`: the same calls, awaited."""

    url: TritonUrl

    async def is_server_live(self, timeout: float) -> bool:
        """True when the server answers its liveness probe."""
        ...

    async def is_server_ready(self, timeout: float) -> bool:
        """True when the server says it is ready."""
        ...

    async def is_model_ready(self, model_name: str, model_version: str | None, timeout: float) -> bool:
        """True when the model (version) is loaded and ready."""
        ...

    async def repository_index(self, timeout: float) -> list[dict[str, Any]]:
        """Entries (name, version, state, reason) of the model repository index."""
        ...

    async def model_config(self, model_name: str, model_version: str | None, timeout: float) -> dict[str, Any]:
        """The model's config as JSON."""
        ...

    async def load_model(
        self, model_name: str, config: str | None, files: Mapping[str, bytes] | None, timeout: float
    ) -> None:
        """Ask the server to load (or reload) the model."""
        ...

    async def unload_model(self, model_name: str, timeout: float) -> None:
        """Ask the server to unload the model."""
        ...

    async def infer(self, request: InferRequest, timeout: float) -> Outputs:
        """Run one inference request and return its outputs by name."""
        ...

    def stream_infer(self, request: InferRequest, timeout: float) -> AsyncGenerator[Outputs, None]:
        """Send one request to a decoupled model; ``async for`` over its responses (gRPC only)."""
        ...

    @property
    def generation(self) -> int:
        """How many times :meth:`reconnect` opened new connections."""
        ...

    async def reconnect(self, generation: int) -> None:
        """Send the next requests over new connections, unless another call did so since ``generation``."""
        ...

    async def close(self) -> None:
        """Release the connections."""
        ...


class AsyncTransportBase:
    """What the asyncio transports share: the tritonclient client, made on first use (inside the running event
    loop); the auth headers; liveness and readiness probes; and calls bounded by ``asyncio.wait_for`` (so that
    every timeout, sub-second ones included, holds for both protocols) whose failures become client exceptions.
    """

    # Exceptions that mean the server could not be reached (the HTTP transport adds aiohttp's).
    _unreachable: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self, url: TritonUrl, auth_headers: Mapping[str, str]):
        self.url = url
        self._auth_headers = dict(auth_headers)
        self._slot: AsyncClientSlot[Any] = AsyncClientSlot(self._make_client, lambda client: client.close())

    def _make_client(self) -> Any:
        raise NotImplementedError

    @property
    def client(self) -> Any:
        """The protocol's tritonclient asyncio client (made on first use; a new one after :meth:`reconnect`)."""
        return self._slot.current

    @property
    def generation(self) -> int:
        """How many times :meth:`reconnect` made a new client."""
        return self._slot.generation

    async def reconnect(self, generation: int) -> None:
        """Make a new client (new connections) for the next calls, unless another call did since ``generation``;
        the old one is closed once its calls in flight ended."""
        await self._slot.replace(generation)

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**self._auth_headers, **(extra or {})}

    def _deadline(self, timeout: float) -> dict[str, float]:
        """Keyword arguments that give a call its own deadline, where the protocol has one."""
        return {}

    async def _call(self, action: str, model: str, timeout: float, make: Callable[[], Awaitable[_T]]) -> _T:
        try:
            async with self._slot.use():  # the client make() calls: closed after this call if replaced meanwhile
                return await asyncio.wait_for(make(), timeout)
        except (TimeoutError, asyncio.TimeoutError):  # distinct classes before Python 3.11
            raise timeout_error(self.url, action, timeout) from None
        except InferenceServerException as error:
            raise call_error(error, url=self.url, action=action, model=model, timeout_s=timeout) from None
        except self._unreachable as error:
            raise unreachable_error(self.url, error) from None

    async def is_server_live(self, timeout: float) -> bool:
        """True when the server answers its liveness probe."""
        return await self._call(
            "Liveness check",
            "",
            timeout,
            lambda: self.client.is_server_live(headers=self._headers(), **self._deadline(timeout)),
        )

    async def is_server_ready(self, timeout: float) -> bool:
        """True when the server says it is ready."""
        return await self._call(
            "Readiness check",
            "",
            timeout,
            lambda: self.client.is_server_ready(headers=self._headers(), **self._deadline(timeout)),
        )

    async def is_model_ready(self, model_name: str, model_version: str | None, timeout: float) -> bool:
        """True when the model (version) is loaded and ready."""
        return await self._call(
            "Model readiness check",
            model_name,
            timeout,
            lambda: self.client.is_model_ready(
                model_name, model_version or "", headers=self._headers(), **self._deadline(timeout)
            ),
        )

    async def close(self) -> None:
        """Close the underlying clients, if any were made."""
        await self._slot.close()


# -- what the server or the network reports, as client exceptions ----------------------------------------------

_UNREACHABLE_MARKERS = ("failed to connect", "connection refused", "socket closed", "connection reset")


class ServerUnreachableError(PyTritonClientInferenceServerError):
    """No connection to the server could be made (it is down, or the URL names the wrong host or port), or the
    server dropped one without an answer. ``refused``: no connection was made at all (nothing listens)."""

    def __init__(self, message: str, *, refused: bool = False):
        super().__init__(message)
        self.refused = refused


def unreachable_error(url: TritonUrl, cause: object) -> ServerUnreachableError:
    """The error for a refused or broken connection."""
    if _dropped(cause):
        return ServerUnreachableError(
            f"The Triton server at {url.with_scheme} closed the connection without an answer ({cause}). A Triton "
            "server that is stopping does this to new HTTP connections while it finishes its requests; or it "
            "crashed or is restarting. Retry once it is back, or send the request to another replica."
        )
    return ServerUnreachableError(
        f"Cannot reach the Triton server at {url.with_scheme} ({cause}). Check that the server runs and that "
        f"the URL names its {url.scheme.upper()} port (defaults: HTTP 8000, gRPC 8001).",
        refused=True,
    )


def _dropped(cause: object) -> bool:
    """Whether ``cause`` says the server closed or reset a connection it had accepted (not refused it)."""
    if isinstance(cause, (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)):
        return True
    if isinstance(cause, OSError) and cause.errno in (errno.ECONNRESET, errno.EPIPE):
        return True  # e.g. aiohttp's ClientOSError
    text = str(cause).lower()
    return "connection reset" in text or "server disconnected" in text


def timeout_error(
    url: TritonUrl, action: str, timeout_s: float, setting: str | None = None
) -> PyTritonClientTimeoutError:
    """The error for a request not answered within ``timeout_s``; ``setting`` names the knob to raise.

    Without ``setting``: inference_timeout_s for ``Inference``, init_timeout_s for any other action.
    """
    if setting is None:
        setting = "inference_timeout_s" if action == "Inference" else "init_timeout_s"
    return PyTritonClientTimeoutError(
        f"{action} on the server at {url.with_scheme} did not finish within {timeout_s:g} s. "
        f"Raise {setting} if it legitimately takes longer."
    )


def server_error(message: str, status: str | None, *, url: TritonUrl, action: str, model: str) -> PyTritonClientError:
    """Map a server's error reply (status: HTTP code or gRPC ``StatusCode.X``) to a client exception."""
    status = status or ""
    lowered = message.lower()
    if "restricted" in lowered and "expecting header" in lowered:
        return PyTritonClientInferenceServerError(
            f"The server at {url.with_scheme} refused {action}: {message}. This endpoint is protected by an "
            "access token: pass access_token=<token> to the client (the token of the server's "
            "TritonSecurityConfig, printed by the server at start-up)."
        )
    if "DEADLINE_EXCEEDED" in status:
        return PyTritonClientTimeoutError(
            f"{action} on the server at {url.with_scheme} exceeded its deadline ({message}). "
            "Raise inference_timeout_s if it legitimately takes longer."
        )
    if "unknown model" in lowered or status in ("404", "StatusCode.NOT_FOUND"):
        return PyTritonClientModelUnavailableError(
            f"Model {model!r} is not available on the server at {url.with_scheme}: {message}. Check the "
            "model name and version, and that the model loaded (see the server log). A tritonrt server that is "
            "stopping unloads its models first: then send the request to another replica, or again once the "
            "service has restarted."
        )
    if "UNAVAILABLE" in status and any(marker in lowered for marker in _UNREACHABLE_MARKERS):
        return unreachable_error(url, message)
    if "server is stopping" in lowered:
        error = PyTritonClientInferenceServerError(
            f"The Triton server at {url.with_scheme} is stopping: it finishes the requests it has and takes no "
            f"new ones, so {action.lower()} was refused ({message}). Send it to another replica, or again once the "
            "service has restarted."
        )
    else:
        subject = f"{action} of model {model!r}" if model else action
        error = PyTritonClientInferenceServerError(
            f"{subject} failed on the server at {url.with_scheme}: {message}. The error comes from the inference "
            "callable or from Triton; see the server log for details."
        )
    # Not run: the server (or the way to it) refused it; tritonrt.client._retry sends such requests again.
    error.unavailable = "UNAVAILABLE" in status or "server is stopping" in lowered
    return error


def from_tritonclient(
    error: InferenceServerException, *, url: TritonUrl, action: str, model: str
) -> PyTritonClientError:
    """Map a tritonclient ``InferenceServerException``."""
    return server_error(error.message() or str(error), error.status(), url=url, action=action, model=model)


def call_error(
    error: InferenceServerException, *, url: TritonUrl, action: str, model: str, timeout_s: float
) -> PyTritonClientError:
    """Map an ``InferenceServerException`` of a tritonclient call that ran under a ``timeout_s`` deadline.

    A passed gRPC deadline becomes a timeout error, an error tritonclient raised before sending (no
    status) a value error, and anything else the server's error (see ``server_error``).
    """
    if "DEADLINE_EXCEEDED" in (error.status() or ""):
        return timeout_error(url, action, timeout_s)
    if error.status() is None:  # raised by tritonclient itself, before sending
        return PyTritonClientValueError(f"Invalid request: {error.message()}")
    return from_tritonclient(error, url=url, action=action, model=model)


def grpc_only_error(url: TritonUrl, what: str) -> PyTritonClientValueError:
    """The error for streaming over HTTP: Triton streams decoupled responses over gRPC only."""
    return PyTritonClientValueError(
        f"{what} needs gRPC (Triton streams decoupled responses over gRPC only): use a grpc:// "
        f"URL, e.g. grpc://{url.hostname}:8001, instead of {url.with_scheme}."
    )
