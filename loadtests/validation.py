"""Check one inference response against the model's declared outputs (names, datatypes, shapes).

Example::

    problem = check_outputs(spec, batch=2, reported={"y": ("FP32", [2, 4])}, decode=result.as_numpy)
    if problem:
        ...  # mark the request failed with this message
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from loadtests.model_spec import ModelSpec


def check_outputs(
    spec: ModelSpec,
    batch: int | None,
    reported: Mapping[str, tuple[str, Sequence[int]]],
    decode: Callable[[str], np.ndarray | None],
) -> str | None:
    """Return what is wrong with a response, or None when it matches the spec.

    ``reported`` maps each output name to the (datatype, shape) the response declares; ``batch`` is the
    request's batch size (None for a model without batching); ``decode`` turns an output into an array.
    """
    expected = {t.name: t for t in spec.outputs}
    missing = sorted(set(expected) - set(reported))
    if missing:
        return f"response lacks output(s) {', '.join(missing)}"
    unexpected = sorted(set(reported) - set(expected))
    if unexpected:
        return f"response has undeclared output(s) {', '.join(unexpected)}"
    for name, (datatype, shape) in reported.items():
        tensor = expected[name]
        if datatype != tensor.datatype:
            return f"output '{name}' has datatype {datatype}, expected {tensor.datatype}"
        want = (batch, *tensor.dims) if batch is not None else tensor.dims
        shape = [int(d) for d in shape]
        if len(shape) != len(want) or any(w >= 0 and w != s for w, s in zip(want, shape, strict=True)):
            return f"output '{name}' has shape {shape}, expected {list(want)}"
        try:
            array = decode(name)
        except Exception as error:  # a malformed body can fail in many ways; all of them are failures
            return f"output '{name}' could not be decoded: {error}"
        if array is None or list(array.shape) != shape:
            got = None if array is None else list(array.shape)
            return f"output '{name}' declares shape {shape} but its data decodes to {got}"
    return None
