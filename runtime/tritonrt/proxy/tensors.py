"""numpy arrays and the wire's tensors: data type codes, BYTES serialization, arrays built on received bytes.

Data crosses as raw little-endian buffers (no numpy ABI involved), so numpy 1.x and 2.x both work. BYTES
tensors use Triton's serialization: each element as a 4-byte little-endian length and its bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

import numpy as np

from tritonrt.proxy.wire import DTYPE_BF16, DTYPE_BYTES, WireError

__all__ = ["SENT_AS_IS", "array_from", "decode_bytes", "encode_bytes", "wire_dtype"]

_CODES: dict[np.dtype, int] = {
    np.dtype(code): index + 1
    for index, code in enumerate(["?", "u1", "<u2", "<u4", "<u8", "i1", "<i2", "<i4", "<i8", "<f2", "<f4", "<f8"])
}
_DTYPES: dict[int, np.dtype] = {code: dtype for dtype, code in _CODES.items()}
# The numpy dtypes whose arrays travel as they are (numeric, little-endian), and their wire codes (read-only by
# its type: a plain dict's lookup is the hot path's, a MappingProxyType's costs half as much again).
SENT_AS_IS: Mapping[np.dtype, int] = _CODES
_OBJECT = np.dtype(object)
_LENGTH = struct.Struct("<I")


def wire_dtype(dtype: np.dtype) -> int:
    """The wire code of a numpy dtype (object, bytes and str arrays travel as BYTES); ValueError otherwise."""
    code = _CODES.get(dtype)
    if code is not None:
        return code
    if dtype.kind in "OSU":
        return DTYPE_BYTES
    if dtype.kind in "biuf" and dtype.newbyteorder("<") in _CODES:
        return _CODES[dtype.newbyteorder("<")]  # a big-endian array: the caller converts it
    raise ValueError(
        f"numpy dtype {dtype} has no Triton data type: use bool, (u)int8..64, float16/32/64, or bytes/str objects"
    )


def encode_bytes(array: np.ndarray) -> bytes:
    """Triton's serialization of an array of bytes / str objects (str as UTF-8)."""
    parts = []
    pack = _LENGTH.pack
    for item in array.reshape(-1).tolist():
        if isinstance(item, str):
            item = item.encode()
        elif not isinstance(item, bytes):
            item = bytes(item)
        parts.append(pack(len(item)))
        parts.append(item)
    return b"".join(parts)


def decode_bytes(view: memoryview, shape: Sequence[int]) -> np.ndarray:
    """An object array of ``bytes`` from Triton's serialization in ``view`` (which it must fill exactly)."""
    count = 1
    for dim in shape:
        count *= dim
    size = len(view)
    if count * 4 > size:
        raise WireError(f"{size} bytes cannot hold {count} BYTES elements")
    items = [b""] * count
    at = 0
    unpack = _LENGTH.unpack_from
    for index in range(count):
        if at + 4 > size:
            raise WireError(f"BYTES element {index} of {count}: its length prefix is past the data's end")
        (length,) = unpack(view, at)
        at += 4
        if length > size - at:
            raise WireError(f"BYTES element {index} of {count}: its length {length} runs past the data's end")
        items[index] = bytes(view[at : at + length])
        at += length
    if at != size:
        raise WireError(f"BYTES data has {size - at} bytes after its {count} elements")
    result = np.empty(count, dtype=_OBJECT)
    result[:] = items
    return result.reshape(shape)


def array_from(
    source: bytearray | np.ndarray, offset: int, dtype: int, shape: tuple[int, ...], byte_length: int
) -> np.ndarray:
    """The tensor at ``source[offset:offset + byte_length]``: a view for numeric types (a copy when it is not
    aligned for its type), a new object array for BYTES. ``source`` is a bytearray or a uint8 array."""
    if dtype == DTYPE_BYTES:
        with memoryview(source.data if isinstance(source, np.ndarray) else source) as whole:
            return decode_bytes(whole[offset : offset + byte_length], shape)
    numpy_dtype = _DTYPES.get(dtype)
    if numpy_dtype is None:
        reason = "numpy has no bfloat16" if dtype == DTYPE_BF16 else f"unknown data type {dtype}"
        raise WireError(f"a tensor of wire data type {dtype} cannot be given to Python ({reason})")
    if not byte_length:
        empty: np.ndarray = np.empty(shape, numpy_dtype)
        return empty
    array: np.ndarray = np.ndarray(shape, numpy_dtype, source, offset)
    if offset % numpy_dtype.alignment:
        aligned: np.ndarray = array.copy()  # libraries such as torch can crash on unaligned data
        return aligned
    return array
