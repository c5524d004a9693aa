"""Start a program whose secret arguments stay off its command line (``ps``, ``/proc/<pid>/cmdline``).

tritonserver takes its access token only as an argument (``--http-restricted-api=<apis>:<header>=<token>``),
and any local user can read a process's arguments. So the child starts with a placeholder in the secret
argument's place, and the argument itself in an environment variable (``/proc/<pid>/environ`` is readable by
the process's owner only). Before the program runs its first instruction, the parent repoints ``argv[i]`` at
that variable's value: the program parses the real argument, while ``/proc/<pid>/cmdline``, which shows the
memory the arguments were first copied to, keeps showing the placeholder. The variable is dropped from the
program's ``environ`` too, so its children do not inherit it.

How: the child asks to be traced (``PTRACE_TRACEME``) and execs; the kernel stops it right after ``execve``.
The parent reads where the argument and environment pointers lie from ``/proc/<pid>/stat`` (``startstack``:
``argc``, then ``argv[]``, ``NULL``, ``envp[]``), checks every pointer it changes against what it expects,
writes the new pointers through ``/proc/<pid>/mem`` and detaches. Where tracing is not allowed (Yama
``ptrace_scope`` >= 2, a seccomp profile without ptrace) or anything does not match, the child is killed
before it ran and :class:`HiddenArgumentsError` says why; it never runs with the placeholder.

Example::

    process = spawn_hidden(["tritonserver", "--http-restricted-api=m:h=T"], {1: "--http-restricted-api=m:h=T"},
                           env=os.environ.copy())
"""

from __future__ import annotations

import ctypes
import os
import signal
import struct
import subprocess
from collections.abc import Callable, Mapping
from typing import BinaryIO

__all__ = ["HIDDEN_VARIABLE_PREFIX", "HiddenArgumentsError", "placeholder", "spawn_hidden"]

HIDDEN_VARIABLE_PREFIX = "TRITONRT_HIDDEN_ARG_"
_PTRACE_TRACEME, _PTRACE_DETACH = 0, 17
_POINTER = struct.Struct("P")
# Fields of /proc/<pid>/stat, counted from 1 as proc(5) does; the text after the command's ")" starts at 3.
_STARTSTACK, _ENV_START, _ENV_END = 28, 50, 51


class HiddenArgumentsError(RuntimeError):
    """The arguments could not be hidden; the child was killed before it ran."""


def placeholder(argument: str) -> str:
    """What ``ps`` shows instead of ``argument``: its ``--flag=`` and a note (not a valid value for the flag)."""
    flag, sep, _ = argument.partition("=")
    return f"{flag}{sep}(hidden by tritonrt)" if sep else "(hidden by tritonrt)"


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return libc


def spawn_hidden(
    command: list[str],
    hidden: Mapping[int, str],
    env: Mapping[str, str],
    *,
    preexec: Callable[[], None] | None = None,
    **popen: object,
) -> subprocess.Popen[bytes]:
    """Start ``command`` with ``command[i]`` replaced by ``hidden[i]`` in the program, but not in ``ps``.

    ``preexec`` runs in the child before it execs; ``popen`` goes to :class:`subprocess.Popen`. Raises
    :class:`HiddenArgumentsError` when the arguments cannot be hidden (the child is gone by then).
    """
    shown = list(command)
    child_env = dict(env)
    for index, argument in hidden.items():
        if not 0 < index < len(command):
            raise ValueError(f"hidden argument index {index} is outside the command (1..{len(command) - 1})")
        shown[index] = placeholder(argument)
        child_env[f"{HIDDEN_VARIABLE_PREFIX}{index}"] = argument
    libc = _libc()

    def trace_me() -> None:
        if preexec is not None:
            preexec()
        if libc.ptrace(_PTRACE_TRACEME, 0, None, None) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))

    try:
        process: subprocess.Popen[bytes] = subprocess.Popen(shown, env=child_env, preexec_fn=trace_me, **popen)  # type: ignore[call-overload]
    except subprocess.SubprocessError as error:  # the child could not be traced: it never exec'd
        raise HiddenArgumentsError(f"this system does not let a process be traced by its parent ({error})") from None
    try:
        _, status = os.waitpid(process.pid, 0)
        if not os.WIFSTOPPED(status):
            process.returncode = os.waitstatus_to_exitcode(status)
            raise HiddenArgumentsError(f"the program ended before it could be given its arguments ({status=})")
        _repoint(process.pid, len(shown), hidden)
        if libc.ptrace(_PTRACE_DETACH, process.pid, None, None) != 0:
            raise HiddenArgumentsError(f"could not detach from the program ({os.strerror(ctypes.get_errno())})")
    except BaseException:
        if process.returncode is None:
            process.send_signal(signal.SIGKILL)
            process.wait()
        raise
    return process


def _repoint(pid: int, argc: int, hidden: Mapping[int, str]) -> None:
    """Point ``argv[i]`` at the value of ``TRITONRT_HIDDEN_ARG_<i>``; take those variables out of ``envp``."""
    fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    start, env_start, env_end = (int(fields[number - 3]) for number in (_STARTSTACK, _ENV_START, _ENV_END))
    try:
        mem = open(f"/proc/{pid}/mem", "r+b", buffering=0)
    except OSError as error:
        raise HiddenArgumentsError(f"cannot write the program's memory ({error.strerror})") from None
    with mem:
        memory = _Memory(mem)
        if memory.pointer(start) != argc:
            raise HiddenArgumentsError("the program's stack does not start with its argument count")
        environment = memory.read(env_start, env_end - env_start)
        envp = start + _POINTER.size * (argc + 2)  # after argc, argv[0..argc-1] and argv's NULL
        strings: list[int] = []  # envp's pointers, in order
        while (address := memory.pointer(envp + _POINTER.size * len(strings))) != 0:
            strings.append(address)
        names = {environment[a - env_start : environment.index(b"=", a - env_start)].decode(): a for a in strings}
        for index, argument in hidden.items():
            name = f"{HIDDEN_VARIABLE_PREFIX}{index}"
            if name not in names:
                raise HiddenArgumentsError(f"{name} is missing from the program's environment")
            value = names[name] + len(name) + 1
            encoded = argument.encode() + b"\0"
            if environment[value - env_start : value - env_start + len(encoded)] != encoded:
                raise HiddenArgumentsError(f"{name} does not hold the argument it was given")
            memory.write_pointer(start + _POINTER.size * (1 + index), value)
        # Each hidden variable's slot now points at another variable's string: the list keeps its length, since
        # the dynamic loader finds the auxiliary vector right after envp's NULL; a repeated entry is harmless.
        hidden_strings = {names[f"{HIDDEN_VARIABLE_PREFIX}{index}"] for index in hidden}
        kept = [address for address in strings if address not in hidden_strings]
        if not kept:
            raise HiddenArgumentsError("the program's environment has no other variable to stand in for the hidden")
        for slot, address in enumerate(strings):
            if address in hidden_strings:
                memory.write_pointer(envp + _POINTER.size * slot, kept[0])


class _Memory:
    """Reads and writes a stopped tracee's memory through ``/proc/<pid>/mem``."""

    def __init__(self, file: BinaryIO):
        self._file = file

    def read(self, address: int, size: int) -> bytes:
        self._file.seek(address)
        return self._file.read(size)

    def pointer(self, address: int) -> int:
        return int(_POINTER.unpack(self.read(address, _POINTER.size))[0])

    def write_pointer(self, address: int, value: int) -> None:
        self._file.seek(address)
        self._file.write(_POINTER.pack(value))
        if self.pointer(address) != value:
            raise HiddenArgumentsError(f"the pointer at {address:#x} did not take its new value")
