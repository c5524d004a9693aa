"""The data of warm-up requests: arrays made as a ``WarmupInput`` says (``ModelConfig.model_warmup``).

Example::

    requests = generate_warmup_requests([ModelWarmup("w", 2, {"x": WarmupInput(np.float32, (3,), zero_data=True)}, 1)])
    requests[0]["x"].shape  # (2, 3)
"""

from __future__ import annotations

import string
from collections.abc import Sequence

import numpy as np

from tritonrt.exceptions import PyTritonBadParameterError
from tritonrt.model_config.common import ModelWarmup, WarmupInput

__all__ = ["generate_warmup_data", "generate_warmup_requests"]

_TEXT = np.array(list(string.ascii_lowercase + string.digits))


def generate_warmup_data(warmup_input: WarmupInput, batch_size: int) -> np.ndarray:
    """An array of ``batch_size`` rows for one warm-up input.

    From ``input_data_file`` (a ``.npy`` file): used as is when it has the full shape, repeated as every row
    when it has one row's shape, and repeated or cut to ``batch_size`` rows when only its row count differs.

    Raises:
        PyTritonBadParameterError: none of ``input_data_file``, ``zero_data``, ``random_data`` is set, or the
            file's array fits neither shape.
    """
    row_shape = tuple(int(dim) for dim in warmup_input.shape)
    shape = (batch_size, *row_shape)
    dtype = warmup_input.dtype
    if warmup_input.input_data_file:
        return _from_file(warmup_input.input_data_file, shape).astype(dtype)
    if warmup_input.zero_data:
        return np.zeros(shape, dtype=dtype)
    if warmup_input.random_data:
        return _random(shape, np.dtype(dtype))
    raise PyTritonBadParameterError(
        "A WarmupInput needs its data: set zero_data=True, random_data=True or input_data_file='<file>.npy'."
    )


def generate_warmup_requests(model_warmup: Sequence[ModelWarmup] | None) -> list[dict[str, np.ndarray]]:
    """``count`` requests (input name -> array) per ``ModelWarmup``, in order; fresh data for each request."""
    return [
        {name: generate_warmup_data(spec, warmup.batch_size) for name, spec in warmup.inputs.items()}
        for warmup in model_warmup or []
        for _ in range(warmup.count)
    ]


def _from_file(path: str, shape: tuple[int, ...]) -> np.ndarray:
    data: np.ndarray = np.load(path)
    row_shape = shape[1:]
    if data.shape == shape:
        return data
    if data.shape == row_shape:
        return np.repeat(data[np.newaxis], shape[0], axis=0)
    if data.ndim == len(shape) and data.shape[1:] == row_shape and data.shape[0] > 0:
        repeats = -(-shape[0] // data.shape[0])
        return np.concatenate([data] * repeats)[: shape[0]]
    raise PyTritonBadParameterError(
        f"Warm-up data file {path} holds an array of shape {data.shape}; give one of shape {shape} (the batch) "
        f"or {row_shape} (one row, repeated)."
    )


def _random(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    rng = np.random.default_rng()
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        low = 0 if dtype.kind == "u" else max(int(np.iinfo(dtype).min), -100)
        return rng.integers(low, min(int(np.iinfo(dtype).max), 100), size=shape, endpoint=True).astype(dtype)
    if dtype.kind == "f":
        return rng.random(size=shape).astype(dtype)
    if dtype.kind in "OS":
        count = int(np.prod(shape))
        words = ["".join(rng.choice(_TEXT, size=int(rng.integers(8, 33)))).encode() for _ in range(count)]
        return np.array(words, dtype=dtype).reshape(shape)
    return np.zeros(shape, dtype=dtype)
