"""Tensor: one input or output of a bound model."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["Tensor"]


@dataclasses.dataclass(frozen=True)
class Tensor:
    """An input or output definition.

    ``shape`` excludes the batch axis when batching is on; ``-1`` marks a dynamic axis.
    ``dtype`` is a numpy dtype; ``np.bytes_`` or ``object`` give Triton's BYTES.

    Example::

        Tensor(name="image", dtype=np.uint8, shape=(224, 224, 3))
    """

    shape: tuple[int, ...]
    dtype: Any
    name: str | None = None
    optional: bool | None = False

    def __post_init__(self) -> None:
        if isinstance(self.dtype, np.dtype):
            object.__setattr__(self, "dtype", self.dtype.type)
