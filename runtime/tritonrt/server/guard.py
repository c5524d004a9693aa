"""The guard: a small parent for tritonserver that cleans up whatever way the owner goes.

``python -m tritonrt.server.guard --shm-prefix P --cleanup DIR -- tritonserver ...``

It starts tritonserver as its child, becomes the subreaper of the server's stub processes, forwards
SIGINT/SIGTERM, and when tritonserver exits or the owning process dies (even by SIGKILL) it kills what is
left (server, stubs), removes ``/dev/shm/<P>*`` and ``DIR``, then exits with the server's exit code.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

__all__ = ["main", "remove_shm"]

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
    """SIGKILL and reap every process left under the guard (orphaned stubs reparent to it)."""
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


def remove_shm(prefix: str) -> None:
    """Remove the shared memory segments whose names start with ``prefix``."""
    shm = pathlib.Path("/dev/shm")
    if prefix and shm.is_dir():
        for segment in shm.glob(prefix + "*"):
            segment.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tritonrt-guard")
    parser.add_argument("--shm-prefix", default="")
    parser.add_argument("--cleanup", action="append", default=[], type=pathlib.Path)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    owner = os.getppid()
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    server = subprocess.Popen(command, preexec_fn=_die_with_parent)

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
    remove_shm(args.shm_prefix)
    for path in args.cleanup:
        shutil.rmtree(path, ignore_errors=True)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
