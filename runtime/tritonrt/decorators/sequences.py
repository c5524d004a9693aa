"""@sequence_inputs: each request's sequence id and start/end flags as inputs, one row per row of the request, so
that a stateful model written with @batch sees them per row (see tritonrt.model_config.SequenceBatcher)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import wrapt

from tritonrt.constants import SEQUENCE_END, SEQUENCE_START
from tritonrt.decorators._common import InferenceRequest, inputs_batch_size, requests_argument

__all__ = ["sequence_inputs"]


def sequence_inputs(
    id_name: str = "sequence_id", start_name: str = "sequence_start", end_name: str = "sequence_end"
) -> Callable[..., Any]:
    """Add three inputs to every request: ``id_name`` (its sequence id: uint64, or object holding str when a
    request of the batch has a string id; 0 without one), ``start_name`` and ``end_name`` (bool), each of shape
    (rows, 1) where rows is the request's batch size. Place it above @batch; the callable gets new mappings, the
    requests themselves are not changed.

    Example::

        @sequence_inputs()
        @batch
        def infer(x, sequence_id, sequence_start, sequence_end):
            ...  # row i belongs to sequence sequence_id[i, 0]
    """
    names = (id_name, start_name, end_name)
    for name in names:
        if not isinstance(name, str) or not name:
            raise TypeError(f"@sequence_inputs: input names must be non-empty strings, got {name!r}.")
    if len(set(names)) != 3:
        raise ValueError(f"@sequence_inputs: the three input names must differ, got {names!r}.")

    @wrapt.decorator
    def add_sequence_inputs(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        requests, rest = requests_argument(args, kwargs, "@sequence_inputs")
        ids = [getattr(request, "sequence_id", None) for request in requests]
        textual = any(isinstance(each, str) for each in ids)
        extended = []
        for index, (request, sequence_id) in enumerate(zip(requests, ids, strict=True)):
            taken = [name for name in names if name in request]
            if taken:
                raise ValueError(
                    f"@sequence_inputs: request {index} has an input named {taken[0]!r} already; choose other "
                    f"names, e.g. @sequence_inputs(id_name='seq_id')."
                )
            extended.append(_extended(request, index, sequence_id, textual, names))
        return wrapped(extended, *rest, **kwargs)

    return add_sequence_inputs


def _extended(
    request: InferenceRequest, index: int, sequence_id: int | str | None, textual: bool, names: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """The request's inputs and the three sequence inputs, in a new mapping (the request itself is left as it is:
    a batch run again request by request gets the same requests)."""
    rows = inputs_batch_size(request, index) if len(request) else 1
    flags = int(getattr(request, "flags", 0))
    id_name, start_name, end_name = names
    extended = dict(request)
    if textual:
        extended[id_name] = np.full((rows, 1), "" if sequence_id is None else str(sequence_id), dtype=object)
    else:
        extended[id_name] = np.full((rows, 1), sequence_id or 0, dtype=np.uint64)
    extended[start_name] = np.full((rows, 1), bool(flags & SEQUENCE_START))
    extended[end_name] = np.full((rows, 1), bool(flags & SEQUENCE_END))
    return extended
