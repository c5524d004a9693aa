"""Large numpy arrays of the proxy model's process allocated in its outgoing shared memory region.

Triton's Python backend stub copies every input tensor out of Triton's shared memory into a new numpy array
as it loads a request. :func:`install` makes numpy (through its NEP 49 data allocator, set with ctypes)
place arrays of ``SHM_THRESHOLD`` bytes or more in the region that the proxy model's :class:`Channel`
sends from, so that the channel sends them by reference instead of copying them again. Smaller arrays,
``calloc`` and anything the region has no room for come from the C library, as with numpy's own allocator.

Only the proxy model installs it, in the stub, whose numpy serves nothing but the proxy: never the user's
process. It covers the thread that installs it (numpy keeps the allocator in a context variable), which is
the thread where the stub loads requests and runs ``execute``.
"""

from __future__ import annotations

import ctypes
import logging

import numpy as np

from tritonrt.proxy.transport import SHM_THRESHOLD, Channel

__all__ = ["install"]

LOGGER = logging.getLogger("tritonrt.proxy")
NAME = b"tritonrt_shared_region"
_SET_HANDLER = 304  # PyDataMem_SetHandler's index in numpy's C-API table (numpy >= 1.22)

_MALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_CALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)
_REALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class _Allocator(ctypes.Structure):
    _fields_ = [
        ("ctx", ctypes.c_void_p),
        ("malloc", _MALLOC),
        ("calloc", _CALLOC),
        ("realloc", _REALLOC),
        ("free", _FREE),
    ]


class _Handler(ctypes.Structure):  # numpy's PyDataMem_Handler, version 1
    _fields_ = [("name", ctypes.c_char * 127), ("version", ctypes.c_uint8), ("allocator", _Allocator)]


_libc = ctypes.CDLL(None)
_libc.malloc.restype, _libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
_libc.calloc.restype, _libc.calloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_size_t]
_libc.realloc.restype, _libc.realloc.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]
_libc.free.restype, _libc.free.argtypes = None, [ctypes.c_void_p]
_KEEP: list = []  # what numpy points at: arrays may be freed as late as the interpreter's exit, so it is
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_KEEP))  # never freed, not even when the module is torn down


def install(channel: Channel) -> bool:
    """Allocate this thread's large numpy arrays in ``channel``'s outgoing region; False where numpy cannot."""
    if not hasattr(np.core.multiarray, "get_handler_name"):  # numpy < 1.22: no NEP 49
        return False
    malloc, free, calloc = _libc.malloc, _libc.free, _libc.calloc
    allocate, release = channel.allocate, channel.release

    def on_malloc(_: int | None, size: int) -> int | None:
        if size >= SHM_THRESHOLD:
            address = allocate(size)
            if address:
                return address
        return malloc(size)

    def on_calloc(_: int | None, count: int, size: int) -> int | None:
        return calloc(count, size)

    def on_realloc(_: int | None, address: int, size: int) -> int | None:  # numpy resizes blocks it holds
        held = channel.held_size(address)
        if held is None:
            return _libc.realloc(address, size)
        moved = malloc(size)
        if moved:
            ctypes.memmove(moved, address, min(held, size))
            release(address)
        return moved

    def on_free(_: int | None, address: int | None, size: int) -> None:
        # numpy passes the block's size: a small one never came from the region, so the lock is not needed
        if address and (size < SHM_THRESHOLD or not release(address)):
            free(address)

    callbacks = (_MALLOC(on_malloc), _CALLOC(on_calloc), _REALLOC(on_realloc), _FREE(on_free))
    handler = _Handler(NAME, 1, _Allocator(None, *callbacks))
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype, new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new_capsule(ctypes.addressof(handler), b"mem_handler", None)
    _KEEP.extend((callbacks, handler, capsule))
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    table = ctypes.cast(get_pointer(np.core._multiarray_umath._ARRAY_API, None), ctypes.POINTER(ctypes.c_void_p))
    set_handler = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(table[_SET_HANDLER])
    set_handler(capsule)
    if np.core.multiarray.get_handler_name() != NAME.decode():
        LOGGER.warning("tritonrt: numpy did not take the shared-memory allocator; large inputs are copied")
        return False
    return True
