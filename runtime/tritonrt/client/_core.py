"""The clients' core: validated settings, the base every client shares (``from_existing_client``, the closed
check), and the request building of the sync and asyncio clients (``TransportClient``), which differ only in
how they talk to the server (a :class:`~tritonrt.client._transport.Transport` or an ``AsyncTransport``).

Example::

    settings = ClientSettings.create("grpc://localhost", "add", None, None, None, access_token="s3cret")
    settings.auth_headers  # {"triton-grpc-protocol-triton-access-token": "s3cret"}
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from tritonrt._access import access_headers
from tritonrt.client._arguments import (
    InferCall,
    add_batch_axis,
    headers_as_strings,
    map_inputs,
    remove_batch_axis,
    require_batching,
)
from tritonrt.client._retry import RetryCount
from tritonrt.client._tracing import add_trace_headers
from tritonrt.client._transport import InferRequest, TritonUrl, grpc_only_error
from tritonrt.client.exceptions import PyTritonClientClosedError, PyTritonClientValueError
from tritonrt.model_config.triton_model_config import TritonModelConfig

__all__ = [
    "DEFAULT_INFERENCE_TIMEOUT_S",
    "DEFAULT_INIT_TIMEOUT_S",
    "ClientBase",
    "ClientSettings",
    "TransportClient",
    "config_as_json",
    "require_grpc",
]

DEFAULT_INIT_TIMEOUT_S = 300.0
DEFAULT_INFERENCE_TIMEOUT_S = 60.0
_Client = TypeVar("_Client", bound="ClientBase")


def _timeout(value: float | None, default: float, name: str) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise PyTritonClientValueError(f"{name} must be a positive number of seconds, got {value!r}.")
    return float(value)


@dataclasses.dataclass(frozen=True)
class ClientSettings:
    """Where and what a client talks to, and its timeouts; shared by ``from_existing_client``."""

    url: TritonUrl
    model_name: str
    model_version: str | None
    init_timeout_s: float
    inference_timeout_s: float
    access_token: str | None
    unreachable_timeout_s: float | None = None

    @classmethod
    def create(
        cls,
        url: str,
        model_name: str,
        model_version: str | int | None,
        init_timeout_s: float | None,
        inference_timeout_s: float | None,
        access_token: str | None,
        unreachable_timeout_s: float | None = None,
    ) -> ClientSettings:
        """Validate the constructor arguments of a client."""
        parsed = TritonUrl.from_url(url)
        if not isinstance(model_name, str) or not model_name:
            raise PyTritonClientValueError(f"model_name must be a non-empty string, got {model_name!r}.")
        if model_version is not None and not str(model_version).isdigit():
            raise PyTritonClientValueError(
                f"model_version must be a version number like 1 or '2' (or None for the latest), got {model_version!r}."
            )
        if access_token is not None and (not isinstance(access_token, str) or not access_token):
            raise PyTritonClientValueError("access_token must be a non-empty string (or None).")
        return cls(
            url=parsed,
            model_name=model_name,
            model_version=str(model_version) if model_version is not None else None,
            init_timeout_s=_timeout(init_timeout_s, DEFAULT_INIT_TIMEOUT_S, "init_timeout_s"),
            inference_timeout_s=_timeout(inference_timeout_s, DEFAULT_INFERENCE_TIMEOUT_S, "inference_timeout_s"),
            access_token=access_token,
            unreachable_timeout_s=(
                None if unreachable_timeout_s is None else _timeout(unreachable_timeout_s, 0.0, "unreachable_timeout_s")
            ),
        )

    @property
    def auth_headers(self) -> dict[str, str]:
        """The access-token header in the form the URL's protocol needs (none without a token)."""
        return access_headers(self.url.scheme, self.access_token)

    @property
    def version_number(self) -> int | None:
        """``model_version`` as an int, None for the latest."""
        return int(self.model_version) if self.model_version is not None else None


class ClientBase:
    """Settings and the closed check shared by all client classes, and ``from_existing_client``."""

    _settings: ClientSettings
    _closed: bool

    def _known_model_config(self) -> TritonModelConfig | None:
        """The model config this client already read, if any."""
        raise NotImplementedError

    @classmethod
    def from_existing_client(cls: type[_Client], existing_client: ClientBase, **kwargs: Any) -> _Client:
        """A new client of this class for the same server, model, timeouts and access token.

        A model config the existing client already read is reused, so the new client skips the wait
        for readiness. Keyword arguments override constructor arguments.

        Example::

            async_client = AsyncioModelClient.from_existing_client(sync_client)
        """
        settings = existing_client._settings
        arguments: dict[str, Any] = {
            "init_timeout_s": settings.init_timeout_s,
            "inference_timeout_s": settings.inference_timeout_s,
            "access_token": settings.access_token,
            "unreachable_timeout_s": settings.unreachable_timeout_s,
        }
        known_config = existing_client._known_model_config()
        if known_config is not None:
            arguments.update(model_config=known_config, ensure_model_is_ready=False)
        arguments.update(kwargs)
        create: Callable[..., _Client] = cls
        return create(settings.url.with_scheme, settings.model_name, settings.model_version, **arguments)

    def _check_open(self) -> None:
        if self._closed:
            raise PyTritonClientClosedError(
                f"{type(self).__name__} for model {self._settings.model_name!r} is closed: create a new "
                "client (e.g. in a with block) to send more requests."
            )


class TransportClient(ClientBase):
    """A client of one model that owns a transport; see ``ModelClient`` for the constructor arguments."""

    _decoupled: bool = False  # streaming clients set True: they need gRPC and a decoupled model

    def __init__(
        self,
        url: str,
        model_name: str,
        model_version: str | None = None,
        *,
        lazy_init: bool = True,
        init_timeout_s: float | None = None,
        inference_timeout_s: float | None = None,
        model_config: TritonModelConfig | None = None,
        ensure_model_is_ready: bool = True,
        access_token: str | None = None,
        unreachable_timeout_s: float | None = None,
    ):
        self._closed = True  # until the transport exists: close() is then a no-op
        self._settings = ClientSettings.create(
            url, model_name, model_version, init_timeout_s, inference_timeout_s, access_token, unreachable_timeout_s
        )
        if self._decoupled:
            require_grpc(self._settings, type(self).__name__)
        self._lazy_init = lazy_init
        self._model_config = model_config
        self._model_ready = model_config is not None and not ensure_model_is_ready
        self._generation = 0  # counts _forget_model calls: a wait that began before one does not store its result
        self._retries = RetryCount()
        self._open()
        self._closed = False
        self._opened()

    def _known_model_config(self) -> TritonModelConfig | None:
        return self._model_config

    @property
    def retried_requests(self) -> int:
        """(tritonrt's own) How many requests this client sent a second time, on a new connection, because a
        server refused them without running them (a server that is stopping: its model unloaded, the connection
        closed or reset, gRPC UNAVAILABLE); see "Requests refused by a stopping server" in the runtime README."""
        return self._retries.value

    def _open(self) -> None:
        """Make ``self._transport`` and ``self._first_wait`` (the shared wait for readiness and the config)."""
        raise NotImplementedError

    def _forget_model(self) -> None:
        """Wait for readiness and read the config again before the next request (the model was reloaded)."""
        self._generation += 1
        self._model_ready = False
        self._model_config = None

    def _remember_model(self, config: TritonModelConfig, generation: int) -> None:
        """Keep the config a wait read, unless the model was forgotten since that wait began."""
        if generation == self._generation:
            self._model_config = config
            self._model_ready = True

    def _opened(self) -> None:
        """Runs once the client is open; the sync client waits for the model here unless lazy."""

    def _request(self, config: TritonModelConfig, call: InferCall) -> InferRequest:
        """Check the model fits this client and call, and return the request to send."""
        if config.decoupled and not self._decoupled:
            raise PyTritonClientValueError(
                f"Model {config.model_name!r} is decoupled (it streams its responses): use "
                "DecoupledModelClient or AsyncioDecoupledModelClient with a grpc:// URL."
            )
        if self._decoupled and not config.decoupled:
            raise PyTritonClientValueError(
                f"Model {config.model_name!r} is not decoupled: use ModelClient or AsyncioModelClient for it."
            )
        if not call.sample:
            require_batching(config)
        named = map_inputs(call.inputs, call.named_inputs, config)
        if call.sample and config.batching:
            named = add_batch_axis(named)
        return InferRequest(
            model_name=self._settings.model_name,
            model_version=self._settings.model_version,
            inputs=named,
            output_names=[spec.name for spec in config.outputs],
            parameters=call.parameters,
            headers=add_trace_headers(headers_as_strings(call.headers)),
        )

    @staticmethod
    def _finish(config: TritonModelConfig, outputs: dict[str, np.ndarray], *, sample: bool) -> dict[str, np.ndarray]:
        return remove_batch_axis(outputs) if sample and config.batching else outputs


def require_grpc(settings: ClientSettings, class_name: str) -> None:
    """Streaming needs gRPC: raise PyTritonClientValueError for an HTTP URL."""
    if settings.url.scheme != "grpc":
        raise grpc_only_error(settings.url, class_name)


def config_as_json(config: str | Mapping[str, Any] | None) -> str | None:
    """A load request's model config as the JSON string Triton expects."""
    if config is None or isinstance(config, str):
        return config
    if isinstance(config, Mapping):
        return json.dumps(config)
    raise PyTritonClientValueError(
        f"config must be a JSON string or a dict of a Triton model config, got {type(config).__name__}."
    )
