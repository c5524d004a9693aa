"""TritonConfig and TritonSecurityConfig: the server's options (PyTriton 0.7 compatible)."""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import secrets
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from tritonrt._access import TRITON_ACCESS_HEADER
from tritonrt.exceptions import PyTritonValidationError

__all__ = [
    "DEFAULT_PROTECTED_ENDPOINTS",
    "ENV_PREFIX",
    "VALID_TRITON_ENDPOINTS",
    "TritonConfig",
    "TritonSecurityConfig",
    "merge_with_environment",
]

LOGGER = logging.getLogger("tritonrt")

ENV_PREFIX = "PYTRITON_TRITON_CONFIG_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_COMPRESSION_LEVELS = {"none", "low", "medium", "high"}


@dataclasses.dataclass
class TritonConfig:
    """Options of the Triton Inference Server process; ``None`` leaves Triton's default.

    Example::

        TritonConfig(http_port=8015, grpc_port=8016, metrics_port=8017, log_verbose=1)

    Also read from ``PYTRITON_TRITON_CONFIG_<FIELD>`` variables by :meth:`from_env` (list fields take
    several values separated by ``;``).

    ``exit_timeout_secs`` (default 30) bounds the drain of ``stop()``, as in PyTriton: how long requests in
    flight get to finish. tritonrt drains the models itself (tritonrt.server.drain) and gives tritonserver no
    exit timeout of its own, so connections that clients keep open do not make a stop wait.
    """

    model_repository: pathlib.Path | None = None
    id: str | None = None
    log_verbose: int | None = None
    log_file: pathlib.Path | None = None
    exit_timeout_secs: int | None = None
    exit_on_error: bool | None = None
    strict_readiness: bool | None = None
    allow_http: bool | None = None
    http_address: str | None = None
    http_port: int | None = None
    http_header_forward_pattern: str | None = None
    http_thread_count: int | None = None
    allow_grpc: bool | None = None
    grpc_address: str | None = None
    grpc_port: int | None = None
    grpc_header_forward_pattern: str | None = None
    grpc_infer_allocation_pool_size: int | None = None
    grpc_use_ssl: bool | None = None
    grpc_use_ssl_mutual: bool | None = None
    grpc_server_cert: pathlib.Path | None = None
    grpc_server_key: pathlib.Path | None = None
    grpc_root_cert: pathlib.Path | None = None
    grpc_infer_response_compression_level: str | None = None
    grpc_keepalive_time: int | None = None
    grpc_keepalive_timeout: int | None = None
    grpc_keepalive_permit_without_calls: bool | None = None
    grpc_http2_max_pings_without_data: int | None = None
    grpc_http2_min_recv_ping_interval_without_data: int | None = None
    grpc_http2_max_ping_strikes: int | None = None
    grpc_restricted_protocol: str | None = None
    http_restricted_api: str | None = None
    allow_metrics: bool | None = None
    allow_gpu_metrics: bool | None = None
    allow_cpu_metrics: bool | None = None
    metrics_interval_ms: int | None = None
    metrics_port: int | None = None
    metrics_address: str | None = None
    allow_sagemaker: bool | None = None
    sagemaker_port: int | None = None
    sagemaker_safe_port_range: str | None = None
    sagemaker_thread_count: int | None = None
    allow_vertex_ai: bool | None = None
    vertex_ai_port: int | None = None
    vertex_ai_thread_count: int | None = None
    vertex_ai_default_model: str | None = None
    metrics_config: list[str] | None = None
    trace_config: list[str] | None = None
    cache_config: list[str] | None = None
    cache_directory: str | None = None
    buffer_manager_thread_count: int | None = None

    def __post_init__(self) -> None:
        if self.allow_http not in (True, None) and self.allow_grpc not in (True, None):
            raise PyTritonValidationError(
                "The `http` or `grpc` endpoint has to be allowed: set allow_http or allow_grpc to True (or leave "
                "them unset)."
            )
        for name in ("http_port", "grpc_port", "metrics_port", "sagemaker_port", "vertex_ai_port"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and 0 < value < 65536):
                raise PyTritonValidationError(f"TritonConfig.{name}={value!r} is not a port: use 1..65535.")
        for name in ("log_verbose", "exit_timeout_secs", "http_thread_count", "metrics_interval_ms"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise PyTritonValidationError(f"TritonConfig.{name}={value!r} must be an integer >= 0.")
        level = self.grpc_infer_response_compression_level
        if level is not None and level not in _COMPRESSION_LEVELS:
            raise PyTritonValidationError(
                f"TritonConfig.grpc_infer_response_compression_level={level!r}: use one of "
                f"{', '.join(sorted(_COMPRESSION_LEVELS))}."
            )

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> TritonConfig:
        """A config from a dict of field names to values; strings are converted to the fields' types.

        Unknown names are logged and ignored. Strings convert as in :meth:`from_env`: ``"true"``/``"false"``
        for flags, integers, paths, and ``;``-separated entries for list fields.

        Example::

            TritonConfig.from_dict({"http_port": "8015", "log_verbose": 1, "allow_grpc": "false"})
        """
        hints = typing.get_type_hints(cls)
        unknown = sorted(name for name in config if name not in hints)
        if unknown:
            LOGGER.warning(
                "Ignoring %s: TritonConfig has no such field (fields: %s).", ", ".join(unknown), ", ".join(hints)
            )
        values = {}
        for name, value in config.items():
            if name in hints:
                values[name] = _convert(f"TritonConfig.from_dict: {name}", hints[name], value)
        return cls(**values)

    @classmethod
    def from_env(cls) -> TritonConfig:
        """A config from ``PYTRITON_TRITON_CONFIG_*`` variables, e.g. ``PYTRITON_TRITON_CONFIG_GRPC_PORT=45436``.

        A list field takes its entries from ``<NAME>_0``, ``<NAME>_1``, ... (PyTriton 0.7's form, in index
        order) or from one ``<NAME>`` variable with entries separated by ``;``.
        """
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        indexed: dict[str, dict[int, str]] = {}
        for key, raw in os.environ.items():
            if not key.startswith(ENV_PREFIX):
                continue
            name = key[len(ENV_PREFIX) :].lower()
            base, _, index = name.rpartition("_")
            if name not in hints and index.isdigit() and base in hints and _is_list(hints[base]):
                indexed.setdefault(base, {})[int(index)] = raw
            elif name in hints:
                values[name] = _cast(key, hints[name], raw)
            else:
                LOGGER.warning("Ignoring %s: TritonConfig has no field %r.", key, name)
        for name, entries in indexed.items():
            values[name] = [*(values.get(name) or []), *(entries[index] for index in sorted(entries))]
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (``None`` for unset ones)."""
        return dataclasses.asdict(self)


def merge_with_environment(config: TritonConfig | None) -> TritonConfig:
    """Explicit values over ``PYTRITON_TRITON_CONFIG_*`` variables over defaults (PyTriton's precedence)."""
    merged = {k: v for k, v in TritonConfig.from_env().to_dict().items() if v is not None}
    if config is not None:
        merged.update({k: v for k, v in config.to_dict().items() if v is not None})
    return TritonConfig(**merged)


def _is_list(hint: Any) -> bool:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return typing.get_origin(args[0] if args else hint) in (list, Sequence)


def _convert(source: str, hint: Any, value: Any) -> Any:
    """A value for a field of type ``hint``: strings parsed (see ``_cast``), other list values made lists."""
    if isinstance(value, str):
        return _cast(source, hint, value)
    if _is_list(hint) and isinstance(value, (list, tuple)):
        return [str(item) for item in value]
    return value


def _cast(source: str, hint: typing.Any, raw: str) -> typing.Any:
    """Parse ``raw`` (named by ``source`` in errors) as a value of type ``hint``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    target = args[0] if args else hint
    if _is_list(hint):
        return [item.strip() for item in raw.split(";") if item.strip()]
    if target is bool:
        lowered = raw.strip().lower()
        if lowered in _TRUE | _FALSE:
            return lowered in _TRUE
        raise PyTritonValidationError(f"{source}={raw!r}: use true or false.")
    if target is int:
        try:
            return int(raw)
        except ValueError:
            raise PyTritonValidationError(f"{source}={raw!r}: use an integer.") from None
    if target is pathlib.Path:
        return pathlib.Path(raw)
    if isinstance(target, types.UnionType):
        return raw
    return target(raw) if callable(target) else raw


VALID_TRITON_ENDPOINTS = {
    "health", "metadata", "inference", "shared-memory", "model-config", "model-repository", "statistics",
    "trace", "logging",
}  # fmt: skip
"""Endpoint names that ``TritonSecurityConfig.restricted_endpoints`` accepts (a set, as in PyTriton 0.7)."""
DEFAULT_PROTECTED_ENDPOINTS = ["shared-memory", "model-repository", "statistics", "trace", "logging"]
"""What the access token protects by default (a list, as in PyTriton 0.7; copied into each config)."""


@dataclasses.dataclass
class TritonSecurityConfig:
    """Which endpoints need the access token, and the token (random per start when not given).

    Example::

        TritonSecurityConfig()                                   # default: admin endpoints protected
        TritonSecurityConfig(restricted_endpoints=[*DEFAULT_PROTECTED_ENDPOINTS, "inference"])
        TritonSecurityConfig(restricted_endpoints=[])            # nothing protected, and no token

    Clients send the token in the ``triton-access-token`` header (HTTP) or
    ``triton-grpc-protocol-triton-access-token`` metadata (gRPC).
    """

    access_token: str | None = None
    restricted_endpoints: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.restricted_endpoints is None:
            self.restricted_endpoints = list(DEFAULT_PROTECTED_ENDPOINTS)
        unknown = [e for e in self.restricted_endpoints if e not in VALID_TRITON_ENDPOINTS]
        if unknown:
            raise PyTritonValidationError(
                f"TritonSecurityConfig.restricted_endpoints has unknown endpoint(s) {', '.join(map(repr, unknown))}; "
                f"valid: {', '.join(sorted(VALID_TRITON_ENDPOINTS))}."
            )
        self.restricted_endpoints = list(dict.fromkeys(self.restricted_endpoints))
        if self.access_token is None and self.restricted_endpoints:  # nothing to protect: no token
            self.access_token = secrets.token_urlsafe(32)
        if self.access_token is None:
            return
        if not isinstance(self.access_token, str) or not self.access_token.strip():
            raise PyTritonValidationError("TritonSecurityConfig.access_token must be a non-empty string.")
        if any(c in self.access_token for c in ",=: \n"):
            raise PyTritonValidationError(
                "TritonSecurityConfig.access_token must not contain ',', '=', ':' or whitespace (Triton's flag "
                "syntax uses them); secrets.token_urlsafe() makes a valid one."
            )

    def restriction_flag_value(self) -> str | None:
        """``<endpoints>:<header>=<token>`` for --http-restricted-api / --grpc-restricted-protocol; None when
        nothing is restricted."""
        if not self.restricted_endpoints or self.access_token is None:
            return None
        return f"{','.join(self.restricted_endpoints)}:{TRITON_ACCESS_HEADER}={self.access_token}"
