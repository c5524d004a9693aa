"""``InferRequest``: one inference request as every transport (sync, asyncio, HTTP, gRPC) takes it.

Example::

    request = InferRequest("add", None, {"a": a, "b": b}, ["sum"], parameters=None, headers={})
    outputs = transport.infer(request, timeout=1.0)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class InferRequest:
    """What to send: the model, its inputs by name, the outputs to return, parameters and headers."""

    model_name: str
    model_version: str | None
    inputs: Mapping[str, np.ndarray]
    output_names: list[str]
    parameters: Mapping[str, Any] | None
    headers: Mapping[str, str]

    @property
    def version_or_empty(self) -> str:
        """The model version as tritonclient takes it: "" for the latest."""
        return self.model_version or ""

    @property
    def parameters_dict(self) -> dict[str, Any] | None:
        """The request parameters as a new dict, None when there are none."""
        return dict(self.parameters) if self.parameters else None
