"""``TransportClient``: the constructor and request handling that the sync and asyncio clients share.

``ModelClient`` and ``AsyncioModelClient`` (and their decoupled subclasses) differ only in how they
talk to the server (blocking or awaiting); both build on this class. It is not public API.

Example::

    class MyClient(TransportClient):
        def _open(self) -> None:
            self._init_lock = threading.Lock()
            self._transport = HttpTransport(self._settings.url, self._settings.auth_headers)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tritonrt.client.arguments import (
    InferCall,
    add_batch_axis,
    headers_as_strings,
    map_inputs,
    remove_batch_axis,
    require_batching,
)
from tritonrt.client.base import ClientBase, ClientSettings
from tritonrt.client.exceptions import PyTritonClientValueError
from tritonrt.client.request import InferRequest
from tritonrt.model_config.triton_model_config import TritonModelConfig


class TransportClient(ClientBase):
    """A client of one model that owns a transport; see ``ModelClient`` for the constructor arguments."""

    _decoupled: bool = False  # streaming clients set True: they need gRPC and a decoupled model
    _transport: Any

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
    ):
        self._closed = True  # until the transport exists: close() is then a no-op
        self._settings = ClientSettings.create(
            url, model_name, model_version, init_timeout_s, inference_timeout_s, access_token
        )
        if self._decoupled:
            require_grpc(self._settings, type(self).__name__)
        self._lazy_init = lazy_init
        self._model_config = model_config
        self._model_ready = model_config is not None and not ensure_model_is_ready
        self._open()
        self._closed = False
        self._opened()

    def _open(self) -> None:
        """Make ``self._transport`` and ``self._init_lock`` (which guards reading the model config)."""
        raise NotImplementedError

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
            headers=headers_as_strings(call.headers),
        )

    @staticmethod
    def _finish(config: TritonModelConfig, outputs: dict[str, np.ndarray], *, sample: bool) -> dict[str, np.ndarray]:
        return remove_batch_axis(outputs) if sample and config.batching else outputs


def require_grpc(settings: ClientSettings, class_name: str) -> None:
    """Streaming needs gRPC: raise PyTritonClientValueError for an HTTP URL."""
    if settings.url.scheme != "grpc":
        raise PyTritonClientValueError(
            f"{class_name} needs gRPC (Triton streams decoupled responses over gRPC only): use a grpc:// "
            f"URL, e.g. grpc://{settings.url.hostname}:8001, instead of {settings.url.with_scheme}."
        )
