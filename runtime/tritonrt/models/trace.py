"""A model's own trace settings: ``bind(trace_config=[...])`` in TritonConfig's ``trace_config`` syntax, turned
into the settings of Triton's per-model trace API (``POST /v2/models/<name>/trace/setting``).

Entries that Triton applies to a single model: ``level=<LEVEL>`` (repeatable), ``rate=<n>``, ``count=<n>`` and
``log-frequency=<n>``. The trace mode, the trace file (Triton refuses to change it over the network) and
OpenTelemetry's settings (``mode=...``, ``triton,file=...``, ``opentelemetry,...``) apply to the whole server:
set them in ``TritonConfig(trace_config=[...])``; Triton's own tracing needs its file there.

Example::

    model_trace_settings(["level=TIMESTAMPS", "rate=1"])  # {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from tritonrt.exceptions import PyTritonBadParameterError, PyTritonRuntimeError
from tritonrt.server.api import ServerApi

__all__ = ["TracedModel", "apply_trace_config", "model_trace_settings", "validate_trace_config"]

LOGGER = logging.getLogger("tritonrt")

_PER_MODEL = {
    "level": "trace_level",
    "rate": "trace_rate",
    "count": "trace_count",
    "log-frequency": "log_frequency",
    "log_frequency": "log_frequency",
}


def validate_trace_config(model_name: str, trace_config: Any) -> list[str] | None:
    """``trace_config`` as a list of strings (None stays None); anything else raises."""
    if trace_config is None:
        return None
    if isinstance(trace_config, str) or not all(isinstance(entry, str) for entry in trace_config):
        raise PyTritonBadParameterError(
            f"Model {model_name!r}: trace_config must be a list of strings such as ['level=TIMESTAMPS', 'rate=1'], "
            f"got {trace_config!r}."
        )
    return list(trace_config)


def model_trace_settings(trace_config: Sequence[str], model_name: str = "") -> dict[str, Any]:
    """The per-model trace settings that ``trace_config`` sets; server-wide entries are logged and left out.

    Raises:
        PyTritonBadParameterError: an entry is not ``[<mode>,]<setting>=<value>``.
    """
    settings: dict[str, Any] = {}
    server_wide = []
    for entry in trace_config:
        mode, _, setting = entry.partition(",") if "," in entry.partition("=")[0] else ("", "", entry)
        key, separator, value = setting.partition("=")
        if not separator or not key or not value:
            raise PyTritonBadParameterError(
                f"Model {model_name!r}: trace_config entry {entry!r} is not '<setting>=<value>' or "
                "'<mode>,<setting>=<value>' (e.g. 'level=TIMESTAMPS', 'triton,file=/tmp/trace.json')."
            )
        name = _PER_MODEL.get(key.strip())
        if name is None or mode.strip() not in ("", "triton"):
            server_wide.append(entry)
        elif name == "trace_level":
            settings.setdefault(name, []).append(value.strip())
        else:
            settings[name] = value.strip()
    if server_wide:
        LOGGER.info(
            "Model %r: trace_config entries %s apply to the whole server, not to one model; set them in "
            "TritonConfig(trace_config=[...]).",
            model_name,
            ", ".join(map(repr, server_wide)),
        )
    return settings


class TracedModel(Protocol):
    """What :func:`apply_trace_config` reads of a bound model (tritonrt.models.bound.BoundModel has it)."""

    @property
    def name(self) -> str: ...

    @property
    def trace_config(self) -> Sequence[str] | None: ...


def apply_trace_config(api: ServerApi, model: TracedModel) -> None:
    """Give the loaded ``model`` its own trace settings in the server, if its bind set any. The model serves
    either way: a refusal is logged with the server's reason."""
    settings = model_trace_settings(model.trace_config, model.name) if model.trace_config else {}
    if not settings:
        return
    try:
        api.update_trace_settings(model.name, settings)
    except PyTritonRuntimeError as error:
        LOGGER.warning(
            "Model %r serves without its trace settings: %s. Triton's tracing needs a trace file for the whole "
            "server: TritonConfig(trace_config=['triton,file=/path/to/trace.json']).",
            model.name,
            error,
        )
