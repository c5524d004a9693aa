"""Helpers for tritonclient's own clients, under PyTriton 0.7's names (``pytriton.client.utils``).

They take a ``tritonclient.http`` or ``tritonclient.grpc`` ``InferenceServerClient`` and do what tritonrt's
clients do inside: wait for the server or a model (``_readiness``), read a model's config
(``tritonrt.model_config.parser``), parse a URL (``TritonUrl``).

Example::

    client = create_client_from_url("grpc://localhost")
    wait_for_model_ready(client, "add", timeout_s=60)
    config = get_model_config(client, "add")       # a TritonModelConfig
    get_model_state(client, "add")                 # ModelState.READY
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

import tritonclient.grpc
import tritonclient.http
from tritonclient.utils import InferenceServerException

from tritonrt.client._readiness import wait_for_model_ready as _wait_for_model
from tritonrt.client._readiness import wait_for_server_ready as _wait_for_server
from tritonrt.client._transport import TritonUrl, from_tritonclient, unreachable_error
from tritonrt.model_config.parser import parse_model_config
from tritonrt.model_config.triton_model_config import TritonModelConfig

__all__ = [
    "DEFAULT_NETWORK_TIMEOUT_S",
    "DEFAULT_WAIT_FOR_MODEL_TIMEOUT_S",
    "DEFAULT_WAIT_FOR_SERVER_READY_TIMEOUT_S",
    "LATEST_MODEL_VERSION",
    "ModelState",
    "TritonUrl",
    "create_client_from_url",
    "get_model_config",
    "get_model_state",
    "parse_grpc_response",
    "parse_http_response",
    "wait_for_model_ready",
    "wait_for_server_ready",
]

DEFAULT_NETWORK_TIMEOUT_S = 60.0
DEFAULT_WAIT_FOR_SERVER_READY_TIMEOUT_S = 60.0
DEFAULT_WAIT_FOR_MODEL_TIMEOUT_S = 300.0
LATEST_MODEL_VERSION = "<latest>"
"""How messages name the latest version of a model (``model_version=None``)."""

TritonClient = Any  # tritonclient.http.InferenceServerClient or tritonclient.grpc.InferenceServerClient


class ModelState(enum.Enum):
    """A model's state in the server's repository index."""

    LOADING = "LOADING"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"
    READY = "READY"


def create_client_from_url(url: str, network_timeout_s: float | None = None) -> TritonClient:
    """A tritonclient ``InferenceServerClient`` for ``url`` (no scheme: HTTP; no port: the scheme's default).

    ``network_timeout_s`` bounds each HTTP call (tritonclient.grpc takes timeouts per call instead).

    Raises:
        PyTritonClientInvalidUrlError: ``url`` is not a valid server address.
    """
    parsed = TritonUrl.from_url(url)
    if parsed.scheme == "grpc":
        return tritonclient.grpc.InferenceServerClient(parsed.without_scheme)
    timeouts = {} if network_timeout_s is None else {"connection_timeout": network_timeout_s}
    if network_timeout_s is not None:
        timeouts["network_timeout"] = network_timeout_s
    return tritonclient.http.InferenceServerClient(parsed.without_scheme, **timeouts)


def wait_for_server_ready(
    client: TritonClient, timeout_s: float | None = None, headers: Mapping[str, str] | None = None
) -> None:
    """Block until the server is live and ready (default timeout 60 s).

    Raises:
        PyTritonClientTimeoutError: not ready in time.
    """
    timeout = DEFAULT_WAIT_FOR_SERVER_READY_TIMEOUT_S if timeout_s is None else timeout_s
    _wait_for_server(_ClientProbe(client, headers), timeout)


def wait_for_model_ready(
    client: TritonClient,
    model_name: str,
    model_version: str | None = None,
    timeout_s: float | None = None,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Block until the server is live and the model (latest version when ``model_version`` is None) ready
    (default timeout 300 s).

    Raises:
        PyTritonClientTimeoutError: not ready in time.
        PyTritonClientModelUnavailableError: the repository index shows the model missing or failed.
    """
    timeout = DEFAULT_WAIT_FOR_MODEL_TIMEOUT_S if timeout_s is None else timeout_s
    _wait_for_model(_ClientProbe(client, headers), model_name, _version(model_version), timeout)


def get_model_state(
    client: TritonClient,
    model_name: str,
    model_version: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> ModelState:
    """The model's state in the repository index; its latest (numerically greatest) version when
    ``model_version`` is None; UNAVAILABLE when the index has no such model (version)."""
    states = parse_http_response(_ClientProbe(client, headers).repository_index(DEFAULT_NETWORK_TIMEOUT_S))
    mine = {version: state for (name, version), state in states.items() if name == model_name}
    if model_version is not None:
        return mine.get(str(model_version), ModelState.UNAVAILABLE)
    numbered = [version for version in mine if version.isdigit()]
    return mine[max(numbered, key=int)] if numbered else ModelState.UNAVAILABLE


def get_model_config(
    client: TritonClient,
    model_name: str,
    model_version: str | None = None,
    timeout_s: float | None = None,
    headers: Mapping[str, str] | None = None,
) -> TritonModelConfig:
    """The model's config, read once the model is ready (waits up to ``timeout_s``, default 300 s).

    Raises:
        PyTritonClientTimeoutError: the model was not ready in time.
        PyTritonClientModelUnavailableError: the model is not available.
    """
    wait_for_model_ready(client, model_name, model_version, timeout_s, headers)
    version = _version(model_version)
    raw = _ClientProbe(client, headers).model_config(model_name, version, DEFAULT_NETWORK_TIMEOUT_S)
    return parse_model_config(raw, int(version) if version else None)


def parse_http_response(models: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], ModelState]:
    """``{(name, version): state}`` from repository index entries; entries without a version are left out and
    entries without a state count as LOADING."""
    return {
        (str(entry["name"]), str(entry["version"])): ModelState(entry.get("state") or "LOADING")
        for entry in models
        if entry.get("version")
    }


def parse_grpc_response(models: Iterable[Any]) -> dict[tuple[str, str], ModelState]:
    """:func:`parse_http_response` for the entries of a gRPC index (``index.models``: messages)."""
    return parse_http_response(
        [{"name": entry.name, "version": entry.version, "state": entry.state} for entry in models]
    )


def _version(model_version: str | int | None) -> str | None:
    return str(model_version) if model_version not in (None, "") else None


class _ClientProbe:
    """The calls of tritonrt's readiness waits (a subset of ``_transport.Transport``), made through a user's
    tritonclient client; failures become tritonrt's client exceptions."""

    def __init__(self, client: TritonClient, headers: Mapping[str, str] | None):
        self._client = client
        self._headers = dict(headers or {})
        self._grpc = isinstance(client, tritonclient.grpc.InferenceServerClient)
        self.url = _client_url(client, self._grpc)

    def _call(self, action: str, model: str, timeout: float, method: Any, *args: Any, **kwargs: Any) -> Any:
        if self._grpc:
            kwargs["client_timeout"] = timeout
        try:
            return method(*args, headers=self._headers, **kwargs)
        except InferenceServerException as error:
            raise from_tritonclient(error, url=self.url, action=action, model=model) from None
        except OSError as error:  # the HTTP client could not connect
            raise unreachable_error(self.url, error) from None

    def is_server_live(self, timeout: float) -> bool:
        return bool(self._call("Liveness check", "", timeout, self._client.is_server_live))

    def is_server_ready(self, timeout: float) -> bool:
        return bool(self._call("Readiness check", "", timeout, self._client.is_server_ready))

    def is_model_ready(self, model_name: str, model_version: str | None, timeout: float) -> bool:
        method = self._client.is_model_ready
        return bool(self._call("Model readiness check", model_name, timeout, method, model_name, model_version or ""))

    def repository_index(self, timeout: float) -> list[dict[str, Any]]:
        action = "Reading the model repository index"
        if self._grpc:
            index = self._call(action, "", timeout, self._client.get_model_repository_index, as_json=True)
            entries: list[dict[str, Any]] = index.get("models", [])
            return entries
        return list(self._call(action, "", timeout, self._client.get_model_repository_index))

    def model_config(self, model_name: str, model_version: str | None, timeout: float) -> dict[str, Any]:
        method, version, action = self._client.get_model_config, model_version or "", "Reading the model config"
        if self._grpc:
            response = self._call(action, model_name, timeout, method, model_name, version, as_json=True)
            config: dict[str, Any] = response["config"]
        else:
            config = self._call(action, model_name, timeout, method, model_name, version)
        return config


def _client_url(client: TritonClient, grpc: bool) -> TritonUrl:
    """The address a tritonclient client talks to (for messages); a placeholder where it does not say."""
    try:
        if grpc:
            return TritonUrl.from_url(f"grpc://{client._channel._channel.target().decode()}")
        return TritonUrl("http", client._parsed_url.host, int(client._parsed_url.port))
    except Exception:
        return TritonUrl("grpc" if grpc else "http", "the-client's-server", 0)
