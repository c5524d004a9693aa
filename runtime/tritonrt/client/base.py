"""What every client shares: validated settings, access-token headers, and request preparation.

Example::

    settings = ClientSettings.create("grpc://localhost", "add", None, None, None, access_token="s3cret")
    settings.auth_headers  # {"triton-grpc-protocol-triton-access-token": "s3cret"}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from tritonrt.client.arguments import (
    add_batch_axis,
    headers_as_strings,
    map_inputs,
    remove_batch_axis,
    require_batching,
    verify_inputs_args,
    verify_parameters,
)
from tritonrt.client.exceptions import PyTritonClientClosedError, PyTritonClientValueError
from tritonrt.client.url import TritonUrl
from tritonrt.models.spec import TritonModelConfig

DEFAULT_INIT_TIMEOUT_S = 300.0
DEFAULT_INFERENCE_TIMEOUT_S = 60.0
TRITON_ACCESS_HEADER = "triton-access-token"
# Triton's gRPC frontend expects restricted-protocol headers under this prefix.
_GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


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

    @classmethod
    def create(
        cls,
        url: str,
        model_name: str,
        model_version: str | int | None,
        init_timeout_s: float | None,
        inference_timeout_s: float | None,
        access_token: str | None,
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
        )

    @property
    def auth_headers(self) -> dict[str, str]:
        """The access-token header in the form the URL's protocol needs (none without a token)."""
        if self.access_token is None:
            return {}
        prefix = _GRPC_HEADER_PREFIX if self.url.scheme == "grpc" else ""
        return {f"{prefix}{TRITON_ACCESS_HEADER}": self.access_token}

    @property
    def version_number(self) -> int | None:
        """``model_version`` as an int, None for the latest."""
        return int(self.model_version) if self.model_version is not None else None


class ClientBase:
    """Settings, model-config cache and request preparation shared by all client classes."""

    _settings: ClientSettings
    _model_config: TritonModelConfig | None
    _closed: bool
    _decoupled: bool = False  # streaming clients set True

    @classmethod
    def from_existing_client(cls, existing_client: Any, **kwargs: Any) -> Any:
        """A new client of this class for the same server, model, timeouts and access token.

        A model config the existing client already read is reused, so the new client skips the wait
        for readiness. Keyword arguments override constructor arguments.

        Example::

            async_client = AsyncioModelClient.from_existing_client(sync_client)
        """
        settings: ClientSettings = existing_client._settings
        arguments: dict[str, Any] = {
            "init_timeout_s": settings.init_timeout_s,
            "inference_timeout_s": settings.inference_timeout_s,
            "access_token": settings.access_token,
        }
        known_config = getattr(existing_client, "_model_config", None)
        if known_config is not None:
            arguments.update(model_config=known_config, ensure_model_is_ready=False)
        arguments.update(kwargs)
        return cls(settings.url.with_scheme, settings.model_name, settings.model_version, **arguments)

    def _check_open(self) -> None:
        if self._closed:
            raise PyTritonClientClosedError(
                f"{type(self).__name__} for model {self._settings.model_name!r} is closed: create a new "
                "client (e.g. in a with block) to send more requests."
            )

    @staticmethod
    def _verify_call(inputs: tuple, named_inputs: Mapping[str, Any], parameters: Any, headers: Any) -> None:
        verify_inputs_args(inputs, named_inputs)
        verify_parameters(parameters, "parameters")
        verify_parameters(headers, "headers")

    def _prepare(
        self,
        config: TritonModelConfig,
        inputs: tuple,
        named_inputs: Mapping[str, Any],
        headers: Mapping[str, Any] | None,
        *,
        sample: bool,
    ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
        """Check the model fits this client and call, and return (inputs by name, headers as strings)."""
        if config.decoupled and not self._decoupled:
            raise PyTritonClientValueError(
                f"Model {config.model_name!r} is decoupled (it streams its responses): use "
                "DecoupledModelClient or AsyncioDecoupledModelClient with a grpc:// URL."
            )
        if self._decoupled and not config.decoupled:
            raise PyTritonClientValueError(
                f"Model {config.model_name!r} is not decoupled: use ModelClient or AsyncioModelClient for it."
            )
        if not sample:
            require_batching(config)
        named = map_inputs(inputs, named_inputs, config)
        if sample and config.batching:
            named = add_batch_axis(named)
        return named, headers_as_strings(headers)

    @staticmethod
    def _finish(config: TritonModelConfig, outputs: dict[str, np.ndarray], *, sample: bool) -> dict[str, np.ndarray]:
        return remove_batch_axis(outputs) if sample and config.batching else outputs

    @staticmethod
    def _output_names(config: TritonModelConfig) -> list[str]:
        return [spec.name for spec in config.outputs]


def require_grpc(settings: ClientSettings, class_name: str) -> None:
    """Streaming needs gRPC: raise PyTritonClientValueError for an HTTP URL."""
    if settings.url.scheme != "grpc":
        raise PyTritonClientValueError(
            f"{class_name} needs gRPC (Triton streams decoupled responses over gRPC only): use a grpc:// "
            f"URL, e.g. grpc://{settings.url.hostname}:8001, instead of {settings.url.with_scheme}."
        )
