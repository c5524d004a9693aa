"""The model loading API of the Python backend: :func:`is_model_ready`, :func:`load_model`, :func:`unload_model`
(the server must be in explicit model control mode). See :mod:`tritonrt.bls`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonrt.bls.backend_api import naming
from tritonrt.proxy import wire
from tritonrt.proxy.calls import Closed, TritonModelException, current

__all__ = ["is_model_ready", "load_model", "unload_model"]


def _control(op: int, model_name: str, version: int = -1, config: str = "", files: Any = ()) -> wire.ControlResult:
    scope = current()
    answer = scope.site.control(scope.seq, op, model_name, version, config, files)
    if isinstance(answer, wire.ControlResult) and answer.status == wire.STATUS_OUTPUTS:
        return answer
    message = answer.message if isinstance(answer, (wire.ControlResult, Closed)) else "an unexpected answer"
    raise TritonModelException(naming(model_name, message))


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether ``model_name`` (its version ``model_version``; "": the server's choice) is ready."""
    text = str(model_version).strip()
    if text and not text.isdigit():
        raise TritonModelException(f"model_version {model_version!r}: a version number, or '' for the latest")
    return bool(_control(wire.CONTROL_IS_READY, model_name, int(text) if text else -1).ready)


def load_model(model_name: str, config: str = "", files: Mapping[str, bytes] | None = None) -> None:
    """Load (or reload) ``model_name`` from the repository, or with ``config`` (JSON) overriding its
    configuration, or from ``files`` (``{"file:1/model.onnx": bytes}``, with ``config``); waits until loaded."""
    items = []
    for path, content in (files or {}).items():
        items.append((path.removeprefix("file:"), bytes(content)))
    if items and not config:
        raise TritonModelException(f"loading {model_name!r} from files needs its configuration (config=...)")
    _control(wire.CONTROL_LOAD, model_name, config=config, files=items)


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload ``model_name`` (and the models that depend on it, with ``unload_dependents``)."""
    _control(wire.CONTROL_UNLOAD_DEPENDENTS if unload_dependents else wire.CONTROL_UNLOAD, model_name)
