"""What every client shares: validated settings, access-token headers, ``from_existing_client``.

Example::

    settings = ClientSettings.create("grpc://localhost", "add", None, None, None, access_token="s3cret")
    settings.auth_headers  # {"triton-grpc-protocol-triton-access-token": "s3cret"}
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tritonrt.client.exceptions import PyTritonClientClosedError, PyTritonClientValueError
from tritonrt.client.url import TritonUrl
from tritonrt.model_config.triton_model_config import TritonModelConfig

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
    """Settings, model-config cache and the closed check shared by all client classes."""

    _settings: ClientSettings
    _model_config: TritonModelConfig | None
    _closed: bool

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
