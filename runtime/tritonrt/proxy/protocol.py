"""Message kinds and the BYTES tensor codec shared by both ends of the proxy transport.

A request message (``infer``) carries one group per request: ``extra = (parameters, requested_outputs)``
and the request's input tensors. A reply is ``ok`` (one group of outputs per request), a stream of
``partial`` replies closed by ``final`` (decoupled models), or ``error`` with the message as its note.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

BYTES = "BYTES"
INFER, OK, PARTIAL, FINAL, ERROR = "infer", "ok", "partial", "final", "error"

_LENGTH = struct.Struct("<I")


def encode_bytes_array(array: np.ndarray) -> bytes:
    """Serialize an array of bytes/str objects as Triton does: a 4-byte length before each element."""
    parts = []
    for item in array.reshape(-1):
        data = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        parts.append(_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def decode_bytes_array(buffer: memoryview | bytes, shape: Sequence[int]) -> np.ndarray:
    """Inverse of :func:`encode_bytes_array`: an object array of ``bytes`` (trailing NULs kept)."""
    view = memoryview(buffer)
    count = int(np.prod(shape)) if len(shape) else 1
    result = np.empty(count, dtype=object)
    offset = 0
    for index in range(count):
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        result[index] = bytes(view[offset : offset + length])
        offset += length
    return result.reshape(shape)
