"""Unit tests of tritonrt.model_config.dtypes: numpy, Triton config and KServe data types, mapped both ways."""

from __future__ import annotations

import numpy as np
import pytest

from tritonrt.exceptions import PyTritonBadParameterError
from tritonrt.model_config.dtypes import (
    from_kserve_datatype,
    from_triton_config_type,
    normalize_dtype,
    to_kserve_datatype,
    to_triton_config_type,
)

NUMERIC = [
    (np.bool_, "TYPE_BOOL", "BOOL"),
    (np.int8, "TYPE_INT8", "INT8"),
    (np.int16, "TYPE_INT16", "INT16"),
    (np.int32, "TYPE_INT32", "INT32"),
    (np.int64, "TYPE_INT64", "INT64"),
    (np.uint8, "TYPE_UINT8", "UINT8"),
    (np.uint16, "TYPE_UINT16", "UINT16"),
    (np.uint32, "TYPE_UINT32", "UINT32"),
    (np.uint64, "TYPE_UINT64", "UINT64"),
    (np.float16, "TYPE_FP16", "FP16"),
    (np.float32, "TYPE_FP32", "FP32"),
    (np.float64, "TYPE_FP64", "FP64"),
]


@pytest.mark.parametrize(("numpy_type", "config_type", "datatype"), NUMERIC)
def test_numeric_dtype_maps_both_ways(numpy_type, config_type, datatype):
    for spelling in (numpy_type, np.dtype(numpy_type), np.dtype(numpy_type).name):
        assert normalize_dtype(spelling) is numpy_type
        assert to_triton_config_type(spelling) == config_type
        assert to_kserve_datatype(spelling) == datatype
    assert from_kserve_datatype(datatype) is numpy_type
    assert from_triton_config_type(config_type) is numpy_type


@pytest.mark.parametrize(
    ("dtype", "canonical"),
    [
        (np.bytes_, np.bytes_),
        (np.dtype("S7"), np.bytes_),
        (bytes, np.bytes_),
        (object, np.object_),
        (np.object_, np.object_),
        (np.dtype(object), np.object_),
    ],
)
def test_bytes_and_object_are_triton_bytes(dtype, canonical):
    assert normalize_dtype(dtype) is canonical
    assert to_triton_config_type(dtype) == "TYPE_STRING"
    assert to_kserve_datatype(dtype) == "BYTES"


def test_bytes_read_back_as_object_which_keeps_trailing_zero_bytes():
    assert from_kserve_datatype("BYTES") is np.object_
    assert from_triton_config_type("TYPE_STRING") is np.object_


@pytest.mark.parametrize(
    ("dtype", "canonical"),
    [(bool, np.bool_), (int, np.int64), (float, np.float64), (np.longlong, np.int64), (np.intc, np.int32)],
)
def test_python_and_platform_aliases_normalise_to_sized_types(dtype, canonical):
    assert normalize_dtype(dtype) is canonical


@pytest.mark.parametrize(
    ("dtype", "shown"),
    [
        (np.complex64, "complex64"),
        (np.dtype("datetime64[s]"), "datetime64[s]"),
        (np.dtype("timedelta64[ms]"), "timedelta64[ms]"),
        (np.str_, "str"),
        (str, "str"),
        (np.void, "void"),
        (None, "None"),
        ("no-such-type", "no-such-type"),
    ],
)
def test_unsupported_dtype_names_tensor_dtype_and_supported_list(dtype, shown):
    with pytest.raises(PyTritonBadParameterError) as info:
        to_triton_config_type(dtype, tensor_name="image")
    message = info.value.message
    assert "'image'" in message
    assert shown in message
    assert "float32" in message and "uint64" in message and "bytes" in message


def test_unicode_dtype_error_suggests_bytes():
    with pytest.raises(PyTritonBadParameterError, match="encode them to bytes"):
        normalize_dtype(np.str_, tensor_name="text")


@pytest.mark.parametrize("datatype", ["BF16", "fp32", "STRING", "", None])
def test_unknown_kserve_datatype_is_rejected_with_supported_list(datatype):
    with pytest.raises(PyTritonBadParameterError) as info:
        from_kserve_datatype(datatype)
    assert repr(datatype) in info.value.message
    assert "FP32" in info.value.message and "BYTES" in info.value.message


@pytest.mark.parametrize("config_type", ["TYPE_BF16", "FP32", "TYPE_INVALID"])
def test_unknown_config_type_is_rejected_with_supported_list(config_type):
    with pytest.raises(PyTritonBadParameterError) as info:
        from_triton_config_type(config_type)
    assert repr(config_type) in info.value.message
    assert "TYPE_STRING" in info.value.message
