"""Wire format between the proxy model (in Triton's stub) and the inference callable's process.

One zmq multipart message per batch of requests, and one (or a stream of them, for decoupled models) per
reply. Frame 0 is a small pickled header of plain Python values; the other frames are tensor buffers,
sent without copying from numpy and read back with ``np.frombuffer`` (no copy either).

Header of a request message:  ``("infer", [(parameters, requested_output_names, tensors), ...])``
Header of a reply message:    ``("ok" | "partial", [tensors, ...])``, ``("final", None)`` or
``("error", message)``; ``tensors`` is a list of ``(name, dtype, shape)``, one buffer frame each.
``dtype`` is numpy's ``dtype.str``, or ``"BYTES"`` for variable-length bytes (length-prefixed elements).
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

BYTES = "BYTES"
INFER, OK, PARTIAL, FINAL, ERROR = "infer", "ok", "partial", "final", "error"

_LENGTH = struct.Struct("<I")

TensorMeta = tuple[str, str, tuple[int, ...]]


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


def is_bytes_dtype(dtype: np.dtype) -> bool:
    """True for dtypes that travel as Triton BYTES (object, bytes_, str_)."""
    return dtype.kind in "OSU"


def pack_tensors(tensors: Mapping[str, Any], frames: list) -> list[TensorMeta]:
    """Append one frame per tensor to ``frames``; return their metadata."""
    metas = []
    for name, value in tensors.items():
        array = value if isinstance(value, np.ndarray) else np.asarray(value)
        if is_bytes_dtype(array.dtype):
            frames.append(encode_bytes_array(array))
            metas.append((name, BYTES, array.shape))
        else:
            if not array.flags.c_contiguous:
                array = np.ascontiguousarray(array)
            frames.append(array.data if array.size else b"")
            metas.append((name, array.dtype.str, array.shape))
    return metas


def unpack_tensors(metas: Sequence[TensorMeta], frames: Sequence, start: int) -> tuple[dict[str, np.ndarray], int]:
    """Read ``len(metas)`` tensors from ``frames[start:]``; return them and the next frame index."""
    tensors = {}
    for offset, (name, dtype, shape) in enumerate(metas):
        buffer = frames[start + offset]
        buffer = buffer.buffer if hasattr(buffer, "buffer") else buffer
        if dtype == BYTES:
            tensors[name] = decode_bytes_array(buffer, shape)
        else:
            tensors[name] = np.frombuffer(buffer, dtype=np.dtype(dtype)).reshape(shape)
    return tensors, start + len(metas)


def encode_header(header: Any) -> bytes:
    """Serialize a header (plain Python values only)."""
    return pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)


def decode_header(frame) -> Any:
    """Inverse of :func:`encode_header`; accepts bytes or a zmq Frame."""
    return pickle.loads(frame.buffer if hasattr(frame, "buffer") else frame)


def encode_requests(requests: Sequence[tuple[dict, list[str] | None, Mapping[str, Any]]]) -> list:
    """Frames of an ``infer`` message for ``(parameters, requested_output_names, inputs)`` triples."""
    frames: list = [b""]
    entries = [(parameters, requested, pack_tensors(inputs, frames)) for parameters, requested, inputs in requests]
    frames[0] = encode_header((INFER, entries))
    return frames


def decode_requests(frames: Sequence) -> list[tuple[dict, list[str] | None, dict[str, np.ndarray]]]:
    """Inverse of :func:`encode_requests`."""
    kind, entries = decode_header(frames[0])
    if kind != INFER:
        raise ValueError(f"expected an {INFER!r} message, got {kind!r}")
    decoded, position = [], 1
    for parameters, requested, metas in entries:
        inputs, position = unpack_tensors(metas, frames, position)
        decoded.append((parameters, requested, inputs))
    return decoded


def encode_responses(kind: str, responses: Sequence[Mapping[str, Any]]) -> list:
    """Frames of an ``ok`` or ``partial`` reply holding one output dict per request."""
    frames: list = [b""]
    metas = [pack_tensors(response, frames) for response in responses]
    frames[0] = encode_header((kind, metas))
    return frames


def decode_reply(frames: Sequence) -> tuple[str, Any]:
    """``(kind, payload)``: a list of output dicts for ok/partial, a message for error, None for final."""
    kind, payload = decode_header(frames[0])
    if kind not in (OK, PARTIAL):
        return kind, payload
    responses, position = [], 1
    for metas in payload:
        outputs, position = unpack_tensors(metas, frames, position)
        responses.append(outputs)
    return kind, responses


def encode_error(message: str) -> list:
    """Frames of an ``error`` reply."""
    return [encode_header((ERROR, message))]


def encode_final() -> list:
    """Frames of the ``final`` reply that ends a decoupled stream."""
    return [encode_header((FINAL, None))]
