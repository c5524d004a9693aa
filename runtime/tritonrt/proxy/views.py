"""Whether arrays still view a buffer, told by its reference count (the rule the hot path relies on, stated once).

numpy keeps a reference to the object an array is built on (``np.ndarray(shape, dtype, buffer)``,
``np.frombuffer``): every array built on a buffer, and every view derived from such an array, holds the buffer (or
an array that holds it) alive. So a buffer held in one place, :class:`Held`, and referenced nowhere else by the
code that holds it, has more references than that exactly while some array views it. The worker uses this to
decide whether the receive buffer can be overwritten (:mod:`tritonrt.proxy.link`) and whether the callable kept
views of the backend's region (:mod:`tritonrt.proxy.connection`).

The rule binds the holder's code: no local variable, attribute or container may keep another reference to
``held.value`` past the point where :meth:`Held.viewed` is asked (each would count as a view).

Example::

    held = Held(bytearray(64))
    held.viewed()  # False
    array = np.frombuffer(held.value, np.uint8)[8:]
    held.viewed()  # True, until ``array`` (and every view of it) is gone
"""

from __future__ import annotations

import sys
from typing import Generic, TypeVar

__all__ = ["Held"]

_T = TypeVar("_T")


class Held(Generic[_T]):
    """``value``, held here as its one owner: :meth:`viewed` tells whether anything else still refers to it."""

    __slots__ = ("value",)

    def __init__(self, value: _T) -> None:
        self.value = value

    def viewed(self) -> bool:
        """True while another reference to ``value`` exists (in practice: an array or a view built on it)."""
        # With nothing viewing it there are two: this holder's slot, and getrefcount's own argument.
        return sys.getrefcount(self.value) > 2
