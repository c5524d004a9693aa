"""Locate a tritonserver distribution, or install one from the ``nvidia-pytriton`` wheel.

Search order: ``$TRITONRT_SERVER_DIR``, ``/opt/tritonserver`` (NGC images), then the user cache
(``$XDG_CACHE_HOME/tritonrt/server/<wheel version>``, one for every Python: the server does not depend on it).
The installer asks pip for the wheel (``pip download --no-deps``) and extracts only the server, laid out like
NGC's ``/opt/tritonserver``::

    bin/tritonserver  lib/*.so  caches/
    backends/python/{libtriton_python.so,triton_python_backend_stub,...}
    backends/python/stubs/<X.Y>/triton_python_backend_stub      (every Python the wheel has a stub for)

tritonrt's models need none of the Python backend (they run in tritonrt's native backend, a library in each
model's folder). It is kept for plain Python-backend models served by the same server (the benchmark's
baseline): the stub of every Python version the wheel carries goes into ``backends/python/stubs/<X.Y>/``, and
the installing interpreter's one also at the backend's default place. A model for another Python takes its
own: Triton's Python backend runs a ``triton_python_backend_stub`` found in the model's folder in preference to
the backend's (see :func:`python_stub`).

Example::

    from tritonrt.server.install import find_or_install_server
    server_dir = find_or_install_server()
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

from tritonrt.constants import PYTRITON_HOME
from tritonrt.exceptions import PyTritonRuntimeError

__all__ = [
    "MARKER",
    "NGC_SERVER_DIR",
    "WHEEL_PACKAGE",
    "WHEEL_VERSION",
    "cache_server_dir",
    "extract_server",
    "find_or_install_server",
    "find_server_dir",
    "install_server",
    "is_server_dir",
    "python_stub",
    "python_version_tag",
]

LOGGER = logging.getLogger("tritonrt.server")

WHEEL_PACKAGE = "nvidia-pytriton"
WHEEL_VERSION = "0.7.0"
NGC_SERVER_DIR = pathlib.Path("/opt/tritonserver")
MARKER = "tritonrt-server.json"

_WHEEL_ROOT = "pytriton/tritonserver/"
_WHEEL_LIBS = "nvidia_pytriton.libs/"
_WHEEL_STUBS = _WHEEL_ROOT + "python_backend_stubs/"
_STUB = "triton_python_backend_stub"
_STUBS_DIR = "backends/python/stubs/"


def python_version_tag(version: tuple[int, int] | None = None) -> str:
    """``"3.11"`` for the running interpreter, or for ``version``."""
    major, minor = version or sys.version_info[:2]
    return f"{major}.{minor}"


def cache_server_dir() -> pathlib.Path:
    """Where ``install-server`` puts the server: one folder per wheel version, shared by every Python."""
    return PYTRITON_HOME / "server" / WHEEL_VERSION


def python_stub(server_dir: pathlib.Path, python_version: str | None = None) -> pathlib.Path:
    """The Python backend stub built for ``python_version`` (default: this interpreter's) in an installed server:
    ``backends/python/stubs/<X.Y>/triton_python_backend_stub``. Copied into a Python-backend model's folder, it
    is the one Triton runs for that model; it may be missing (a server without the Python backend, or not
    installed by tritonrt)."""
    return server_dir / _STUBS_DIR / (python_version or python_version_tag()) / _STUB


def is_server_dir(path: pathlib.Path) -> bool:
    """True when ``path`` holds an executable ``bin/tritonserver``."""
    binary = path / "bin" / "tritonserver"
    return binary.is_file() and os.access(binary, os.X_OK)


def find_server_dir() -> pathlib.Path | None:
    """The first tritonserver found in the documented order, or None."""
    explicit = os.environ.get("TRITONRT_SERVER_DIR")
    if explicit:
        path = pathlib.Path(explicit).expanduser()
        if not is_server_dir(path):
            raise PyTritonRuntimeError(
                f"TRITONRT_SERVER_DIR={explicit} does not hold a tritonserver (expected an executable "
                "bin/tritonserver there). Point it at a server directory, or unset it to use the installed one."
            )
        return path
    for candidate in (NGC_SERVER_DIR, cache_server_dir()):
        if is_server_dir(candidate):
            return candidate
    return None


def find_or_install_server() -> pathlib.Path:
    """Return a server directory, installing one on first use unless ``TRITONRT_NO_DOWNLOAD=1``."""
    found = find_server_dir()
    if found is not None:
        return found
    if os.environ.get("TRITONRT_NO_DOWNLOAD", "").strip().lower() in {"1", "true", "yes"}:
        raise PyTritonRuntimeError(
            "No tritonserver found (looked at $TRITONRT_SERVER_DIR, /opt/tritonserver and "
            f"{cache_server_dir()}) and TRITONRT_NO_DOWNLOAD is set. Run `tritonrt install-server`, "
            "or set TRITONRT_SERVER_DIR to a tritonserver directory."
        )
    LOGGER.warning("tritonserver not found: installing it into %s (once)", cache_server_dir())
    return install_server()


def _download_wheel(into: pathlib.Path, progress: bool) -> pathlib.Path:
    local = os.environ.get("TRITONRT_SERVER_WHEEL")
    if local:
        path = pathlib.Path(local).expanduser()
        if not path.is_file():
            raise PyTritonRuntimeError(f"TRITONRT_SERVER_WHEEL={local} is not a file; point it at the wheel.")
        return path
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--dest", str(into), f"{WHEEL_PACKAGE}=={WHEEL_VERSION}",
    ]  # fmt: skip
    if not progress:
        command.append("--quiet")
    print(
        f"tritonrt: downloading the tritonserver build in {WHEEL_PACKAGE}=={WHEEL_VERSION} ...",
        file=sys.stderr,
    )
    result = subprocess.run(command, stdout=sys.stderr if progress else subprocess.PIPE, stderr=subprocess.STDOUT)
    wheels = sorted(into.glob("nvidia_pytriton-*.whl"))
    if result.returncode != 0 or not wheels:
        raise PyTritonRuntimeError(
            f"`pip download {WHEEL_PACKAGE}=={WHEEL_VERSION}` failed (exit {result.returncode}). Check that "
            "PyPI (or your index) is reachable, or download the wheel elsewhere and set TRITONRT_SERVER_WHEEL "
            "to its path."
        )
    return wheels[0]


def _extract_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, target: pathlib.Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with archive.open(member) as source, open(target, "wb") as sink:
        shutil.copyfileobj(source, sink, 1 << 20)
    target.chmod(0o755)


def _stub_version(name: str) -> str | None:
    """``"3.11"`` for the wheel's ``pytriton/tritonserver/python_backend_stubs/3.11/triton_python_backend_stub``."""
    if not name.startswith(_WHEEL_STUBS):
        return None
    version, _, file = name[len(_WHEEL_STUBS) :].partition("/")
    return version if file == _STUB else None


def _server_targets(name: str, python_backend: bool, default_stub: str | None) -> list[str]:
    """Where a wheel member goes in the NGC layout (none: not part of the server; without the Python backend,
    neither it, its stubs nor the libpython bundled for the 3.13 stub are)."""
    if name.startswith(_WHEEL_LIBS):
        library = name[len(_WHEEL_LIBS) :]
        return [] if not python_backend and library.startswith("libpython3") else ["lib/" + library]
    stub_version = _stub_version(name)
    if stub_version is not None:
        if not python_backend:
            return []
        default = ["backends/python/" + _STUB] if stub_version == default_stub else []
        return [f"{_STUBS_DIR}{stub_version}/{_STUB}", *default]
    if not name.startswith(_WHEEL_ROOT):
        return []
    relative = name[len(_WHEEL_ROOT) :]
    if not python_backend and relative.startswith("backends/python/"):
        return []
    return [relative] if relative.startswith(("bin/", "backends/", "caches/")) else []


def extract_server(
    wheel: pathlib.Path, dest: pathlib.Path, python_version: str | None = None, *, python_backend: bool = True
) -> pathlib.Path:
    """Extract the server from ``wheel`` into ``dest`` (atomically: a temporary folder, then a rename), with the
    Python backend and the stub of every Python version the wheel has one for, in ``backends/python/stubs/<X.Y>/``;
    the stub for ``python_version`` (default: this interpreter's) goes also at the backend's default place, when
    the wheel has it. ``python_backend=False`` leaves the Python backend out (``backends/`` stays, empty but for
    other backends)."""
    default_stub = python_version or python_version_tag()
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.infolist() if not m.is_dir()]
        if not any(m.filename == _WHEEL_ROOT + "bin/tritonserver" for m in members):
            raise PyTritonRuntimeError(
                f"{wheel.name} holds no tritonserver ({_WHEEL_ROOT}bin/tritonserver): is it the {WHEEL_PACKAGE} "
                f"{WHEEL_VERSION} wheel? Point TRITONRT_SERVER_WHEEL at that wheel, or unset it."
            )
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = pathlib.Path(tempfile.mkdtemp(prefix=".tritonrt-server-", dir=dest.parent))
        staging.chmod(0o755)  # mkdtemp makes it 0700: the server must be usable by other (non-root) users
        try:
            for member in members:
                for target in _server_targets(member.filename, python_backend, default_stub):
                    _extract_member(archive, member, staging / target)
            (staging / "backends").mkdir(parents=True, exist_ok=True)  # tritonserver's --backend-directory
            found = {version for member in members if (version := _stub_version(member.filename))}
            stubs = sorted(found, key=lambda version: [int(part) for part in version.split(".") if part.isdigit()])
            stubs = stubs if python_backend else []
            marker = {
                "wheel": wheel.name,
                "version": WHEEL_VERSION,
                "stubs": stubs,
                "default_stub": default_stub if default_stub in stubs else None,
            }
            (staging / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            _move_into(dest, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return dest


def _move_into(dest: pathlib.Path, staging: pathlib.Path) -> None:
    """Move the server extracted in ``staging`` to ``dest``: one rename when ``dest`` is new (or empty); else (a
    reinstall, the cache folder that holds the per-Python servers of earlier tritonrt versions) each of the
    server's entries replaces its namesake, the marker last, and anything else there (old ``py<X.Y>`` folders,
    which a running server may still use) is left alone."""
    try:
        staging.rename(dest)
        return
    except OSError:
        if not dest.is_dir():
            raise
    for entry in sorted(staging.iterdir(), key=lambda path: path.name == MARKER):
        target = dest / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        entry.rename(target)


def install_server(
    dest: pathlib.Path | None = None,
    python_version: str | None = None,
    progress: bool = True,
    *,
    python_backend: bool = True,
) -> pathlib.Path:
    """Download the ``nvidia-pytriton`` wheel and extract its tritonserver into ``dest`` (default: the user cache),
    ``python_version``'s stub (default: this interpreter's) at the Python backend's default place
    (``python_backend=False``: without the Python backend, which tritonrt's models do not use)."""
    dest = pathlib.Path(dest) if dest else cache_server_dir()
    with tempfile.TemporaryDirectory(prefix="tritonrt-wheel-") as tmp:
        wheel = _download_wheel(pathlib.Path(tmp), progress)
        print(f"tritonrt: extracting tritonserver into {dest} ...", file=sys.stderr)
        extract_server(wheel, dest, python_version, python_backend=python_backend)
    print(f"tritonrt: tritonserver ready in {dest}", file=sys.stderr)
    return dest
