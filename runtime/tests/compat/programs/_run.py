"""Run a PyTriton program as a user would: ``python _run.py [--alias] <program.py> <args...>``.

``--alias`` makes ``import pytriton...`` import ``tritonrt...`` (the only change a migrating user makes,
done here without touching the program) and reports each tritonrt server's shared-memory prefix on stderr
(``TRITONRT_SHM_PREFIX=...``) so that the tests can check none is left behind. Ctrl+C raises
KeyboardInterrupt in the program even when the test runner was started with SIGINT ignored.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import runpy
import signal
import sys


class _PytritonAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``pytriton`` and ``pytriton.<x>`` are ``tritonrt`` and ``tritonrt.<x>``."""

    def find_spec(self, name, path=None, target=None):
        if name == "pytriton" or name.startswith("pytriton."):
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        return importlib.import_module("tritonrt" + spec.name[len("pytriton") :])

    def exec_module(self, module):
        pass


def _report_socket_dirs() -> None:
    from tritonrt.models.host import ModelHost

    original = ModelHost._make_socket_dir

    def reporting(self):
        original(self)
        print(f"TRITONRT_SOCKET_DIR={self._socket_dir}", file=sys.stderr, flush=True)

    ModelHost._make_socket_dir = reporting


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    args = sys.argv[1:]
    if args[0] == "--alias":
        args = args[1:]
        sys.meta_path.insert(0, _PytritonAlias())
        _report_socket_dirs()
    sys.argv = args
    sys.path.insert(0, str(__import__("pathlib").Path(args[0]).parent))
    runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
