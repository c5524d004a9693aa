"""Held: the reference-count rule that tells whether arrays still view a buffer (tritonrt.proxy.views)."""

from __future__ import annotations

import gc
import mmap

import numpy as np

from tritonrt.proxy.views import Held


def test_a_buffer_nothing_was_built_on_is_not_viewed():
    held_bytes = Held(bytearray(64))
    held_array = Held(np.zeros(64, np.uint8))
    assert not held_bytes.viewed()
    assert not held_array.viewed()


def test_arrays_built_on_a_bytearray_and_their_views_count_until_they_are_gone():
    held = Held(bytearray(64))
    array = np.ndarray((4,), np.float32, held.value, 16)
    assert held.viewed()
    derived = array[1:].reshape(3, 1)  # a view of a view: holds the buffer through its base chain
    del array
    assert held.viewed()
    del derived
    assert not held.viewed()


def test_arrays_built_on_a_region_array_count_and_copies_do_not():
    held = Held(np.frombuffer(mmap.mmap(-1, 4096), np.uint8))
    view = np.ndarray((2, 8), np.int32, held.value, 64)
    copy = view.copy()
    assert held.viewed()
    del view
    assert not held.viewed() and copy.shape == (2, 8)


def test_a_cycle_holding_a_view_counts_until_it_is_collected():
    held = Held(bytearray(64))
    cycle: list[object] = [np.frombuffer(held.value, np.uint8)]
    cycle.append(cycle)
    del cycle
    assert held.viewed()  # (reference counting alone cannot free a cycle)
    gc.collect()
    assert not held.viewed()


def test_a_local_reference_to_the_value_counts_as_a_view():
    held = Held(bytearray(8))
    alias = held.value  # the rule's condition: the holder's code keeps no other reference
    assert held.viewed()
    del alias
    assert not held.viewed()
