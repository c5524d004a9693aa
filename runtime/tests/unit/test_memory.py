"""data_address: the fast path agrees with numpy's own report for every kind of array."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from tritonrt import memory
from tritonrt.memory import data_address


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@pytest.mark.parametrize(
    "array",
    [
        np.arange(10, dtype=np.float32),
        np.arange(10, dtype=np.float32)[3:],
        np.frombuffer(mmap.mmap(-1, 4096), np.uint8)[100:],
        np.ndarray((4, 2), np.float32, np.frombuffer(mmap.mmap(-1, 4096, prot=mmap.PROT_READ), np.uint8), 64)[1:],
        np.ndarray((2, 3), np.int16, bytearray(64), 6),
        _read_only(np.arange(6)),
        np.frombuffer(b"abcdef", np.uint8),
        np.arange(12.0).reshape(3, 4)[:, ::2],
        np.zeros(0),
        np.array([b"a", b"bc"], dtype=object),
    ],
    ids=["owned", "slice", "mmap", "read-only mmap", "bytearray", "read-only", "bytes", "strided", "empty", "object"],
)
def test_data_address_is_numpys_data_pointer(array, monkeypatch):
    assert data_address(array) == array.__array_interface__["data"][0]
    monkeypatch.setattr(memory, "_fast", False)  # where numpy's struct differs: numpy's own report
    assert data_address(array) == array.__array_interface__["data"][0]


def test_this_numpy_lays_out_its_arrays_as_the_fast_path_reads_them():
    assert memory._struct_agrees() and memory._fast
