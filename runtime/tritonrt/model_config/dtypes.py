"""Mapping between numpy dtypes, Triton config types (``TYPE_FP32``) and KServe datatypes (``"FP32"``).

Example::

    >>> to_triton_config_type(np.float32)
    'TYPE_FP32'
    >>> to_kserve_datatype(object)
    'BYTES'
    >>> from_kserve_datatype("BYTES")
    <class 'numpy.object_'>
    >>> is_bytes_dtype(np.dtype("U5"))
    True
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from tritonrt.exceptions import PyTritonBadParameterError

__all__ = [
    "BYTES_KINDS",
    "SUPPORTED_DTYPES",
    "from_kserve_datatype",
    "from_triton_config_type",
    "is_bytes_dtype",
    "normalize_dtype",
    "to_kserve_datatype",
    "to_triton_config_type",
]


class _TypeNames(NamedTuple):
    numpy_type: type
    config_type: str
    kserve_datatype: str


# Keyed by (dtype.kind, dtype.itemsize); itemsize is None where any size maps (bytes, objects).
_BY_KIND_AND_SIZE: dict[tuple[str, int | None], _TypeNames] = {
    ("b", 1): _TypeNames(np.bool_, "TYPE_BOOL", "BOOL"),
    ("u", 1): _TypeNames(np.uint8, "TYPE_UINT8", "UINT8"),
    ("u", 2): _TypeNames(np.uint16, "TYPE_UINT16", "UINT16"),
    ("u", 4): _TypeNames(np.uint32, "TYPE_UINT32", "UINT32"),
    ("u", 8): _TypeNames(np.uint64, "TYPE_UINT64", "UINT64"),
    ("i", 1): _TypeNames(np.int8, "TYPE_INT8", "INT8"),
    ("i", 2): _TypeNames(np.int16, "TYPE_INT16", "INT16"),
    ("i", 4): _TypeNames(np.int32, "TYPE_INT32", "INT32"),
    ("i", 8): _TypeNames(np.int64, "TYPE_INT64", "INT64"),
    ("f", 2): _TypeNames(np.float16, "TYPE_FP16", "FP16"),
    ("f", 4): _TypeNames(np.float32, "TYPE_FP32", "FP32"),
    ("f", 8): _TypeNames(np.float64, "TYPE_FP64", "FP64"),
    ("S", None): _TypeNames(np.bytes_, "TYPE_STRING", "BYTES"),
    ("O", None): _TypeNames(np.object_, "TYPE_STRING", "BYTES"),
}

# Reverse lookups; BYTES reads back as object, the numpy type that keeps trailing zero bytes.
_FROM_KSERVE = {names.kserve_datatype: names.numpy_type for names in _BY_KIND_AND_SIZE.values()}
_FROM_KSERVE["BYTES"] = np.object_
_FROM_CONFIG_TYPE = {names.config_type: names.numpy_type for names in _BY_KIND_AND_SIZE.values()}
_FROM_CONFIG_TYPE["TYPE_STRING"] = np.object_

SUPPORTED_DTYPES = (
    "bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64, "
    "bytes (np.bytes_) and object (np.object_, for arbitrary bytes)"
)


# The one rule for Triton BYTES: arrays of these numpy kinds (object, bytes_, str_) carry a BYTES tensor; str
# items travel UTF-8 encoded. A tensor is *declared* BYTES with np.bytes_ or object only (see normalize_dtype).
BYTES_KINDS = "OSU"


def is_bytes_dtype(dtype: np.dtype) -> bool:
    """True for the dtypes of arrays that carry a Triton BYTES tensor: object, bytes_ and str_ arrays.

    Example::

        >>> is_bytes_dtype(np.dtype(object)), is_bytes_dtype(np.dtype(np.uint8))
        (True, False)
    """
    return dtype.kind in BYTES_KINDS


def _lookup(dtype: Any, tensor_name: str | None) -> _TypeNames:
    where = f" of tensor {tensor_name!r}" if tensor_name else ""
    try:
        if dtype is None:  # np.dtype(None) would silently mean float64
            raise TypeError("None is not a dtype")
        np_dtype = np.dtype(dtype)
    except TypeError as error:
        raise PyTritonBadParameterError(
            f"dtype {dtype!r}{where} is not a numpy dtype ({error}). Supported: {SUPPORTED_DTYPES}."
        ) from error
    size = None if np_dtype.kind in ("S", "O") else np_dtype.itemsize
    names = _BY_KIND_AND_SIZE.get((np_dtype.kind, size))
    if names is None:
        hint = " Use np.bytes_ or object for strings (encode them to bytes)." if np_dtype.kind == "U" else ""
        raise PyTritonBadParameterError(
            f"dtype {np_dtype.name!r}{where} is not supported by Triton. Supported: {SUPPORTED_DTYPES}.{hint}"
        )
    return names


def normalize_dtype(dtype: Any, tensor_name: str | None = None) -> type:
    """Return the canonical numpy scalar type of ``dtype`` (a np.dtype, a type, or a name like "float32").

    ``object`` stays ``np.object_`` and any ``S`` dtype becomes ``np.bytes_``: both are Triton BYTES.
    Raises PyTritonBadParameterError, naming ``tensor_name``, for dtypes Triton cannot carry.

    Example::

        >>> normalize_dtype(np.dtype("int32"))
        <class 'numpy.int32'>
    """
    return _lookup(dtype, tensor_name).numpy_type


def to_triton_config_type(dtype: Any, tensor_name: str | None = None) -> str:
    """Return the config.pbtxt ``data_type`` of ``dtype``, e.g. ``"TYPE_FP32"``; bytes give ``"TYPE_STRING"``.

    Example::

        >>> to_triton_config_type(np.bytes_)
        'TYPE_STRING'
    """
    return _lookup(dtype, tensor_name).config_type


def to_kserve_datatype(dtype: Any, tensor_name: str | None = None) -> str:
    """Return the KServe v2 ``datatype`` of ``dtype``, e.g. ``"FP32"``; bytes give ``"BYTES"``.

    Example::

        >>> to_kserve_datatype(np.uint8)
        'UINT8'
    """
    return _lookup(dtype, tensor_name).kserve_datatype


def from_kserve_datatype(datatype: str) -> type:
    """Return the numpy type of a KServe v2 ``datatype``; ``"BYTES"`` gives ``np.object_``.

    Example::

        >>> from_kserve_datatype("INT64")
        <class 'numpy.int64'>
    """
    try:
        return _FROM_KSERVE[datatype]
    except (KeyError, TypeError):
        raise PyTritonBadParameterError(
            f"KServe datatype {datatype!r} is not supported. Supported: {', '.join(_FROM_KSERVE)}."
        ) from None


def from_triton_config_type(config_type: str) -> type:
    """Return the numpy type of a config ``data_type`` like ``"TYPE_FP32"``; TYPE_STRING gives ``np.object_``.

    Example::

        >>> from_triton_config_type("TYPE_BOOL")
        <class 'numpy.bool'>
    """
    try:
        return _FROM_CONFIG_TYPE[config_type]
    except (KeyError, TypeError):
        raise PyTritonBadParameterError(
            f"Triton data type {config_type!r} is not supported. Supported: {', '.join(_FROM_CONFIG_TYPE)}."
        ) from None
