"""The placeholder model's computation: DELETE this module once ``model.py`` computes your model.

It sets every output to the mean of all input values of its sample (the lengths of bytes values count),
times the scale in ``weights/placeholder.json``, so the service works end to end before your model is in.
``tests/test_placeholder.py`` checks it; delete that test with this module.

Example::

    outputs = placeholder.outputs(placeholder.level(inputs, scale=1.0))
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tritonrt.model_config import Tensor

from {{ cookiecutter.package }} import spec

__all__ = ["WEIGHTS_FILE", "load_scale", "rows", "level", "outputs"]

WEIGHTS_FILE = "placeholder.json"  # in the packaged weights/ folder (model_files.py)


def load_scale(path: Path) -> float:
    """The placeholder's one weight, read from its weights file."""
    return float(json.loads(path.read_text())["scale"])


def rows(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Each input's batch as float64 rows of values, one row per sample; bytes values count by length."""
    return [_rows(inputs[str(tensor.name)]) for tensor in spec.INPUTS]


def level(inputs: dict[str, np.ndarray], scale: float) -> np.ndarray:
    """Each sample's mean input value, times ``scale``: one float64 per sample."""
    means = [row.sum(axis=1) / max(row.shape[1], 1) for row in rows(inputs)]
    return np.asarray(scale * np.mean(means, axis=0), dtype=np.float64)


def outputs(levels: np.ndarray) -> dict[str, np.ndarray]:
    """Every output filled with each sample's level, in its declared dtype and shape."""
    return {str(tensor.name): _filled(levels, tensor) for tensor in spec.OUTPUTS}


def _rows(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind in "SOU":
        array = np.vectorize(len, otypes=[np.float64])(array)
    return array.reshape(len(array), -1).astype(np.float64)


def _filled(levels: np.ndarray, tensor: Tensor) -> np.ndarray:
    """An array for output ``tensor`` holding each sample's level (its -1 dimensions have size 1)."""
    shape = tuple(1 if dim == -1 else dim for dim in tensor.shape)
    values = np.broadcast_to(levels.reshape(-1, *(1 for _ in shape)), (len(levels), *shape))
    if tensor.dtype is np.bytes_:
        return np.char.mod("%g", values).astype(np.bytes_)
    if np.issubdtype(tensor.dtype, np.integer):
        limits = np.iinfo(tensor.dtype)
        values = np.clip(np.rint(values), limits.min, limits.max)
    return values.astype(tensor.dtype)
