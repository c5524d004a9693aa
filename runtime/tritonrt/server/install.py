"""Locate a tritonserver distribution, or install one from the ``nvidia-pytriton`` wheel.

Search order: ``$TRITONRT_SERVER_DIR``, ``/opt/tritonserver`` (NGC images), then the user cache
(``$XDG_CACHE_HOME/tritonrt/server/<wheel version>/py<X.Y>``). The installer asks pip for the wheel
(``pip download --no-deps``) and extracts only the server, laid out like NGC's ``/opt/tritonserver``::

    bin/tritonserver  lib/*.so  backends/python/{libtriton_python.so,triton_python_backend_stub,...}  caches/

tritonrt's models need none of the Python backend (they run in tritonrt's native backend, a library in each
model's folder); its stub for the Python version asked for is extracted when the wheel has one, for plain
Python-backend models served by the same server (the benchmark's baseline).

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
    "python_version_tag",
]

LOGGER = logging.getLogger("tritonrt.server")

WHEEL_PACKAGE = "nvidia-pytriton"
WHEEL_VERSION = "0.7.0"
NGC_SERVER_DIR = pathlib.Path("/opt/tritonserver")
MARKER = "tritonrt-server.json"

_WHEEL_ROOT = "pytriton/tritonserver/"
_WHEEL_LIBS = "nvidia_pytriton.libs/"


def python_version_tag(version: tuple[int, int] | None = None) -> str:
    """``"3.11"`` for the running interpreter, or for ``version``."""
    major, minor = version or sys.version_info[:2]
    return f"{major}.{minor}"


def cache_server_dir(python_version: str | None = None) -> pathlib.Path:
    """Where ``install-server`` puts the server for this Python version."""
    return PYTRITON_HOME / "server" / WHEEL_VERSION / f"py{python_version or python_version_tag()}"


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


def _server_target(name: str, stub_prefix: str | None) -> str | None:
    """Map a wheel member to its place in the NGC layout (None: not part of the server; without a
    ``stub_prefix``, the Python backend and the libpython bundled for its 3.13 stub are not either)."""
    if name.startswith(_WHEEL_LIBS):
        library = name[len(_WHEEL_LIBS) :]
        return None if stub_prefix is None and library.startswith("libpython3") else "lib/" + library
    if not name.startswith(_WHEEL_ROOT):
        return None
    relative = name[len(_WHEEL_ROOT) :]
    if stub_prefix is None and relative.startswith("backends/python/"):
        return None
    if relative.startswith(("bin/", "backends/", "caches/")):
        return relative
    if stub_prefix is not None and relative == stub_prefix + "triton_python_backend_stub":
        return "backends/python/triton_python_backend_stub"
    return None


def extract_server(
    wheel: pathlib.Path, dest: pathlib.Path, python_version: str, *, python_backend: bool = True
) -> pathlib.Path:
    """Extract the server from ``wheel`` into ``dest`` (atomically: a temporary folder, then a rename), with the
    Python backend and its stub for ``python_version`` if the wheel has one; ``python_backend=False`` leaves the
    Python backend out (``backends/`` stays, empty but for other backends)."""
    stub_prefix = f"python_backend_stubs/{python_version}/" if python_backend else None
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
                target = _server_target(member.filename, stub_prefix)
                if target is not None:
                    _extract_member(archive, member, staging / target)
            (staging / "backends").mkdir(parents=True, exist_ok=True)  # tritonserver's --backend-directory
            marker = {
                "wheel": wheel.name,
                "version": WHEEL_VERSION,
                "python": python_version if python_backend else None,
            }
            (staging / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            if dest.exists():
                shutil.rmtree(dest)
            staging.rename(dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return dest


def install_server(
    dest: pathlib.Path | None = None,
    python_version: str | None = None,
    progress: bool = True,
    *,
    python_backend: bool = True,
) -> pathlib.Path:
    """Download the ``nvidia-pytriton`` wheel and extract its tritonserver into ``dest`` (``python_backend=False``:
    without the Python backend, which tritonrt's models do not use)."""
    python_version = python_version or python_version_tag()
    dest = pathlib.Path(dest) if dest else cache_server_dir(python_version)
    with tempfile.TemporaryDirectory(prefix="tritonrt-wheel-") as tmp:
        wheel = _download_wheel(pathlib.Path(tmp), progress)
        print(f"tritonrt: extracting tritonserver into {dest} ...", file=sys.stderr)
        extract_server(wheel, dest, python_version, python_backend=python_backend)
    print(f"tritonrt: tritonserver ready in {dest}", file=sys.stderr)
    return dest
