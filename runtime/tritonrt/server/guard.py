"""The guard: a small parent for tritonserver that cleans up whatever way the owner goes.

``python -m tritonrt.server.guard`` reads what to run from its standard input, one JSON object (see
:func:`guard_spec`), so that neither the server's command line nor the access token in it shows in the
guard's arguments: ``{"command": [...], "hidden": {"<i>": "<argument i>"}, "cleanup": [PATH]}``.

It starts tritonserver as its child with the ``hidden`` arguments kept off the server's command line too
(:mod:`tritonrt.server.hidden_args`; where the system does not allow that, it says so on its output and
passes them as plain arguments), becomes the subreaper of whatever the server starts, forwards SIGINT/SIGTERM,
and when tritonserver exits or the owning process dies (even by SIGKILL) it kills what is left, removes
each ``PATH`` (a folder, or the files a pattern with ``*`` matches), then exits with the server's exit code.
(tritonrt's shared memory is memfds: nothing to remove; the pattern is for Triton's Python backend, whose
regions in /dev/shm a server that died leaves behind.)
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from tritonrt.server.hidden_args import HiddenArgumentsError, spawn_hidden

__all__ = ["guard_spec", "main"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_POLL_S = 0.2


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _die_with_parent() -> None:
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _kill_descendants() -> None:
    """SIGKILL and reap every process left under the guard (orphans of the server reparent to it)."""
    for _ in range(50):
        pids = _children(os.getpid())
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _remove(path: str) -> None:
    """Remove a folder, or every file that a pattern with ``*`` matches; what is not there is no error."""
    if "*" not in path:
        shutil.rmtree(path, ignore_errors=True)
        return
    for found in glob.glob(path):
        with contextlib.suppress(OSError):
            os.unlink(found)


def guard_spec(command: Sequence[str], hidden: Mapping[int, str], cleanup: Sequence[pathlib.Path]) -> bytes:
    """What the owner writes to the guard's standard input: the command (``hidden`` arguments in it are
    replaced before it runs) and what to remove (folders, and patterns of files)."""
    spec = {
        "command": list(command),
        "hidden": {str(index): argument for index, argument in hidden.items()},
        "cleanup": [str(path) for path in cleanup],
    }
    return json.dumps(spec).encode()


def _start(command: list[str], hidden: dict[int, str]) -> subprocess.Popen[bytes]:
    """Start the server with its hidden arguments off its command line, or, where that cannot be done, as
    plain arguments, saying so (the owner logs lines starting with W as warnings)."""
    if hidden:
        try:
            return spawn_hidden(command, hidden, os.environ, preexec=_die_with_parent, stdin=subprocess.DEVNULL)
        except HiddenArgumentsError as error:
            print(
                f"W tritonrt: the access token could not be kept off tritonserver's command line ({error}): "
                "local users can read it with ps. Allow a process to trace its children (Yama ptrace_scope <= 1, "
                "ptrace in the seccomp profile) to hide it.",
                flush=True,
            )
    visible = [hidden.get(index, argument) for index, argument in enumerate(command)]
    return subprocess.Popen(visible, preexec_fn=_die_with_parent, stdin=subprocess.DEVNULL)


def main() -> int:
    if os.getpgrp() != os.getpid():  # started by Python 3.10, which cannot ask for it (server/process.py)
        os.setpgid(0, 0)  # a process group of its own, in its owner's session
    spec = json.loads(sys.stdin.buffer.read())
    command = [str(argument) for argument in spec["command"]]
    hidden = {int(index): str(argument) for index, argument in spec.get("hidden", {}).items()}
    owner = os.getppid()
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    server = _start(command, hidden)

    def forward(signum: int, _frame: object) -> None:
        if server.poll() is None:
            server.send_signal(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    while server.poll() is None:
        if os.getppid() != owner:
            server.kill()
            break
        time.sleep(_POLL_S)
    code = server.wait()
    _kill_descendants()
    for path in spec.get("cleanup", []):
        _remove(path)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
