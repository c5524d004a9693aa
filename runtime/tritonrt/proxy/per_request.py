"""The proxy model that Triton's Python backend stub loads: :mod:`tritonrt.proxy.model`'s, answering each
request of a batch with its own outcome.

The worker answers a batch with one reply; since it runs the requests of a failed batch one by one
(:mod:`tritonrt.proxy.isolation`), some may succeed and others fail. A failed request's group in the reply
has no tensors and its error message as the group's extra; this model turns it into an error response for
that request alone. (The native backend's wire protocol carries a status per response instead; this module
goes away with the Python stub.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tritonrt.proxy import model, protocol

__all__ = ["TritonPythonModel"]


class _Failed(dict):
    """Stands in for a failed request's outputs: no tensors, and the message its client gets."""

    def __init__(self, message: str):
        super().__init__()
        self.message = message


class TritonPythonModel(model.TritonPythonModel):
    """Triton's Python-backend model interface; per-request errors on top of the proxy model."""

    def _receive(self) -> tuple[str, list[Any], list[dict[str, np.ndarray]], Any]:
        kind, extras, outputs, note = super()._receive()
        if kind == protocol.OK and extras:
            for index, extra in enumerate(extras):
                if isinstance(extra, str):
                    outputs[index] = _Failed(extra)
        return kind, extras, outputs, note

    def _response(self, outputs: Mapping[str, np.ndarray]) -> Any:  # type: ignore[override]
        if type(outputs) is _Failed:
            return self._error_response(outputs.message)
        return super()._response(outputs)
