{%- set inputs = cookiecutter.inputs | tensors("inputs") -%}
{%- set outputs = cookiecutter.outputs | tensors("outputs") -%}
"""What the model takes and returns: its name, tensors and batching, in one place.

The service binds the model with these definitions, the client checks its arguments against them and
the load tests build their requests from them.

Example::

    from {{ cookiecutter.package }} import spec

    spec.MODEL_NAME  # "{{ cookiecutter.model_name }}"
    spec.INPUTS[0].name  # "{{ inputs[0].name }}"
    sample = spec.example_inputs()  # one example value per input, by name
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from tritonrt.model_config import Tensor

from {{ cookiecutter.package }} import tuning

# The tuned batching settings (tuning.json, written by `make tune APPLY=1`); absent: the generated ones.
TUNING = tuning.load()

MODEL_NAME = "{{ cookiecutter.model_name }}"
{%- if cookiecutter.streaming == "yes" %}
# The same model, decoupled: it streams several responses per request (gRPC only).
STREAM_MODEL_NAME = "{{ cookiecutter.model_name }}_stream"
{%- endif %}
# The largest batch Triton's dynamic batcher forms; 0: batching off, tensors carry no batch axis.
{%- if cookiecutter.max_batch_size | int > 0 %}
MAX_BATCH_SIZE = TUNING.max_batch_size or {{ cookiecutter.max_batch_size | int }}
{%- else %}
MAX_BATCH_SIZE = 0  # the model takes one sample per request: `make tune` varies the instances only
{%- endif %}
BATCHING = MAX_BATCH_SIZE > 0
# Batch sizes the batcher sends as soon as it has them (empty: it forms the largest it can).
PREFERRED_BATCH_SIZES = list(TUNING.preferred_batch_sizes)

# Shapes are per sample{{ " (the batch axis is not part of them)" if cookiecutter.max_batch_size | int > 0 }}; -1 is a dimension of any size.
INPUTS = [
{%- for tensor in inputs %}
    Tensor(name="{{ tensor.name }}", dtype={{ tensor.numpy_type }}, shape={{ tensor.shape_literal }}),
{%- endfor %}
]
OUTPUTS = [
{%- for tensor in outputs %}
    Tensor(name="{{ tensor.name }}", dtype={{ tensor.numpy_type }}, shape={{ tensor.shape_literal }}),
{%- endfor %}
]
EXAMPLE_DIM = 4  # the size of every -1 dimension in example requests


def example(tensor: Tensor, batch_size: int | None = None) -> np.ndarray:
    """Deterministic example values for ``tensor``: one sample, or ``batch_size`` samples stacked.

    Numbers count 0..7 over and over; bytes are ``b"example"``.

    Example::

        example(Tensor(name="x", dtype=np.float32, shape=(-1,)))  # array([0., 1., 2., 3.], dtype=float32)
    """
    shape = tuple(EXAMPLE_DIM if dim == -1 else dim for dim in tensor.shape)
    if batch_size is not None:
        shape = (batch_size, *shape)
    if tensor.dtype is np.bytes_:
        return np.full(shape, b"example")
    return (np.arange(math.prod(shape)) % 8).reshape(shape).astype(tensor.dtype)


def name_of(tensor: Tensor) -> str:
    """The tensor's name: every tensor here has one (``Tensor.name`` may be None for PyTriton's sake)."""
    if tensor.name is None:
        raise ValueError(f"a tensor of the spec has no name: {tensor}; give every tensor a name")
    return tensor.name


def example_inputs(batch_size: int | None = None) -> dict[str, np.ndarray]:
    """Example values for every input, keyed by input name (see ``example``)."""
    return {name_of(tensor): example(tensor, batch_size) for tensor in INPUTS}


def as_input(tensor: Tensor, value: Any, *, batched: bool) -> np.ndarray:
    """``value`` as an array for ``tensor``: its dtype, and its shape checked.

    ``batched``: ``value`` holds several samples along a leading batch axis. Integers convert to any
    integer dtype they fit in, str values of a bytes tensor are encoded as UTF-8. Raises ValueError
    naming the tensor and what it expects.

    Example::

        as_input(INPUTS[0], [[1, 2, 3]], batched=True).shape  # (1, 3)
    """
    array = np.asarray(value)
    if tensor.dtype is np.bytes_:
        if array.dtype.kind == "U":
            array = np.char.encode(array, "utf-8")
        elif array.dtype.kind not in "SO":
            raise ValueError(f"{tensor.name}: expected bytes or str values, got {array.dtype} values.")
    elif array.dtype.kind in "biu" and np.issubdtype(tensor.dtype, np.integer):
        limits = np.iinfo(tensor.dtype)
        if array.size and (array.min() < limits.min or array.max() > limits.max):
            raise ValueError(f"{tensor.name}: {limits.dtype} values lie in [{limits.min}, {limits.max}].")
        array = array.astype(tensor.dtype)
    elif np.can_cast(array.dtype, tensor.dtype, casting="same_kind"):
        array = array.astype(tensor.dtype, copy=False)
    else:
        raise ValueError(
            f"{tensor.name}: expected {np.dtype(tensor.dtype).name} values; {array.dtype} values do not "
            "convert without loss, convert them first."
        )
    expected = ((-1,) if batched else ()) + tuple(tensor.shape)
    sizes_match = all(want in (-1, got) for want, got in zip(expected, array.shape, strict=False))
    if array.ndim != len(expected) or not sizes_match:
        raise ValueError(
            f"{tensor.name}: expected shape {describe_shape(tensor, batched)}, got {array.shape}."
        )
    return array


def describe_shape(tensor: Tensor, batched: bool = False) -> str:
    """A readable shape: ``(batch, any, 3)`` for shape ``(-1, 3)`` with a batch axis."""
    dims = (["batch"] if batched else []) + ["any" if dim == -1 else str(dim) for dim in tensor.shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
