"""W3C trace context for the requests the clients send: when the caller runs inside an OpenTelemetry span, each
request carries its ``traceparent`` (and ``tracestate``) header, so that Triton's trace (OpenTelemetry mode) and
the callable's span join the caller's trace. Nothing is added without OpenTelemetry or without an active span."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping

__all__ = ["add_trace_headers"]


def _load_inject() -> Callable[[MutableMapping[str, str]], None] | None:
    try:
        from opentelemetry.propagate import inject
    except ImportError:
        return None
    return inject


_inject = _load_inject()


def add_trace_headers(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` with the current span's trace headers added (headers the caller set win)."""
    if _inject is None or "traceparent" in headers:
        return headers
    carrier: dict[str, str] = {}
    _inject(carrier)
    if not carrier:
        return headers
    return {**{key.lower(): value for key, value in carrier.items()}, **headers}
