"""The environment Python-backend models run in on a tritonserver that tritonrt installed (not NGC's).

Triton's Python backend runs each ``model.py`` in a stub process that embeds the Python its
``triton_python_backend_stub`` was built for, and imports numpy there. The stub of the ``nvidia-pytriton`` wheel,
which ``tritonrt install-server`` extracts, reads numpy 1.x arrays (with numpy 2 a model's outputs fail with
"output tensor shape does not match size of output"), and without help it embeds the system's Python, which
often has no numpy at all. The stub ignores ``PYTHONPATH``; it takes the first ``python3`` on ``PATH`` as its
interpreter, so a virtual environment first on ``PATH`` is the one it runs in.

So for such a server, tritonrt makes one environment for the stub's Python (once, in
``~/.cache/tritonrt/python-backend/<X.Y>``: a virtual environment with ``numpy<2``) and starts tritonserver with
it first on ``PATH``. A model that sets the Python backend's ``EXECUTION_ENV_PATH`` runs in its own instead.
NGC images need none of this: their Python backend runs in the image's own Python, which has numpy.

A model.py that imports more than numpy finds its packages when they are installed into that environment::

    python -m pip install --target ~/.cache/tritonrt/python-backend/3.11/lib/python3.11/site-packages <package>
"""

from __future__ import annotations

import glob
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

from tritonrt.constants import PYTRITON_HOME
from tritonrt.exceptions import PyTritonRuntimeError

__all__ = ["NUMPY_REQUIREMENT", "environment_dir", "python_backend_env", "stub_environment", "stub_python_version"]

NUMPY_REQUIREMENT = "numpy<2"
_STUB = pathlib.Path("backends") / "python" / "triton_python_backend_stub"
_STUBS = pathlib.Path("backends") / "python" / "stubs"
_READY = ".tritonrt-ready"
_LIBPYTHON = re.compile(rb"libpython(3\.\d+)\.so")


def stub_python_version(server_dir: pathlib.Path) -> str | None:
    """The Python (``"3.11"``) the server's default Python backend stub embeds; None without a stub."""
    stub = server_dir / _STUB
    if not stub.is_file():
        return None
    found = _LIBPYTHON.search(stub.read_bytes())
    return found.group(1).decode() if found else None


def environment_dir(version: str) -> pathlib.Path:
    """Where the environment for Python ``version``'s stub is kept."""
    return PYTRITON_HOME / "python-backend" / version


def _find_python(version: str) -> str | None:
    """An interpreter of Python ``version``: this one, ``python<X.Y>`` on PATH, or a pyenv build."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    found = shutil.which(f"python{version}")
    if found:
        return found
    builds = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python")))
    return builds[-1] if builds else None


def _run(command: list[str], what: str, fix: str) -> None:
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise PyTritonRuntimeError(f"{what} failed (exit {result.returncode}): {result.stdout[-2000:]}\n{fix}")


def python_backend_env(version: str) -> pathlib.Path:
    """The environment for Python-backend models of a stub built for Python ``version``, made on first use (a
    virtual environment with numpy<2; a few seconds, needs PyPI or a pip cache); its folder."""
    dest = environment_dir(version)
    if (dest / _READY).exists():
        return dest
    python = _find_python(version)
    if python is None:
        raise PyTritonRuntimeError(
            f"Python-backend models on this tritonserver run in Python {version} (its Python backend stub's), "
            f"and no python{version} was found. Install Python {version} (on PATH as python{version}), or give "
            "the models an EXECUTION_ENV_PATH of their own (Triton's Python backend docs), or serve them in an "
            "NGC tritonserver image."
        )
    print(f"tritonrt: making {dest} for Python-backend models: Python {version} with {NUMPY_REQUIREMENT} (once)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{version}-", dir=dest.parent))
    try:
        _run(
            [python, "-m", "venv", "--without-pip", str(staging)],
            f"`{python} -m venv`",
            "Check that Python's venv module works.",
        )
        site = staging / "lib" / f"python{version}" / "site-packages"
        pip = [
            sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
            "--only-binary=:all:", "--python-version", version, "--target", str(site), NUMPY_REQUIREMENT,
        ]  # fmt: skip
        _run(
            pip,
            f"`pip install {NUMPY_REQUIREMENT}` for Python {version}",
            "Check that PyPI (or your index) is reachable.",
        )
        (staging / _READY).touch()
        try:
            staging.rename(dest)
        except OSError:  # another process made it meanwhile
            if not (dest / _READY).exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


def stub_environment(env: dict[str, str], server_dir: pathlib.Path) -> dict[str, str]:
    """``env`` with the Python-backend environment first on ``PATH``, for a server that tritonrt installed (it has
    the wheel's stubs); ``env`` unchanged for any other server (an NGC image's runs the image's Python)."""
    version = stub_python_version(server_dir)
    if version is None or not (server_dir / _STUBS).is_dir():
        return env
    bin_dir = python_backend_env(version) / "bin"
    return dict(env, PATH=os.pathsep.join(filter(None, [str(bin_dir), env.get("PATH", "")])))
