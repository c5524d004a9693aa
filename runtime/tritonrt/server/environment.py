"""Make Triton's Python backend stub run on *this* interpreter, or say why it cannot.

The stub links ``libpython3.X.so.1.0`` by soname and ignores ``PYTHONPATH``. So tritonserver gets the
interpreter's library dir first on ``LD_LIBRARY_PATH`` (the server's ``lib/`` after it), and the proxy
model adds this environment's import paths itself (see :func:`import_paths`).
"""

from __future__ import annotations

import os
import pathlib
import re
import site
import sys
import sysconfig

from tritonrt.exceptions import PyTritonRuntimeError

__all__ = [
    "MALLOC_SETTINGS",
    "check_stub",
    "import_paths",
    "python_library_dir",
    "server_environment",
    "stub_python_version",
]

_LIBPYTHON_SONAME = re.compile(rb"libpython(3\.\d+)\.so")


def python_library_dir() -> pathlib.Path:
    """The directory holding this interpreter's shared libpython; raise if it has none."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    libdir = pathlib.Path(sysconfig.get_config_var("LIBDIR") or "")
    soname = f"libpython{version}.so.1.0"
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not (libdir / soname).exists():
        raise PyTritonRuntimeError(
            f"The Python running tritonrt ({sys.executable}, {version}) has no shared libpython "
            f"({libdir / soname} is missing): Triton's Python backend stub needs one. Use a Python built "
            "with --enable-shared (Debian/Ubuntu python3, NGC images, conda, or pyenv with "
            "PYTHON_CONFIGURE_OPTS=--enable-shared)."
        )
    return libdir


def stub_python_version(stub: pathlib.Path) -> str | None:
    """The Python version the stub binary links against, read from its dynamic section strings."""
    match = _LIBPYTHON_SONAME.search(stub.read_bytes())
    return match.group(1).decode() if match else None


def check_stub(server_dir: pathlib.Path) -> None:
    """Fail before start when the server's stub is missing or built for another Python."""
    stub = server_dir / "backends" / "python" / "triton_python_backend_stub"
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not stub.is_file():
        raise PyTritonRuntimeError(
            f"{stub} is missing, so Python models cannot load. Reinstall the server with "
            "`tritonrt install-server --force`."
        )
    built_for = stub_python_version(stub)
    if built_for is not None and built_for != running:
        raise PyTritonRuntimeError(
            f"The Python backend stub in {server_dir} is built for Python {built_for}, but tritonrt runs on "
            f"Python {running}. Run with Python {built_for}, or install a matching server with "
            "`tritonrt install-server` and point TRITONRT_SERVER_DIR at it."
        )


# The Python backend stub copies each input tensor into a new numpy array on its heap. With glibc's dynamic
# thresholds, a batch of large tensors grows the heap and freeing it trims the heap again, so every batch
# faults in fresh pages (measured: 1 MiB tensors at 16 connections, 0.73 -> 0.90 of a plain model's
# throughput with these set). Large blocks stay on the heap, and up to 256 MiB of free heap is kept for
# reuse. Set either variable yourself to override.
MALLOC_SETTINGS = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}


def server_environment(server_dir: pathlib.Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for tritonserver: libpython dir, then the server's lib/, then what was there; and
    glibc malloc settings for the stubs (see MALLOC_SETTINGS) unless already set."""
    env = {**MALLOC_SETTINGS, **(os.environ if base is None else base)}
    paths = [str(python_library_dir()), str(server_dir / "lib")]
    if env.get("LD_LIBRARY_PATH"):
        paths.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(paths)
    return env


def import_paths() -> tuple[list[str], list[str]]:
    """(sys.path entries, site dirs whose .pth files must run) for the proxy model inside the stub."""
    tritonrt_root = str(pathlib.Path(__file__).resolve().parents[2])
    entries = [tritonrt_root] + [p for p in sys.path if p and os.path.isdir(p)]
    site_dirs = [p for p in site.getsitepackages() + [site.getusersitepackages()] if os.path.isdir(p)]
    return list(dict.fromkeys(entries)), site_dirs
