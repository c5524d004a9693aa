"""A generated project tests itself from nothing, on the Python it is given.

Bakes the defaults and runs ``make test PYTHON=<Python 3.10>`` in the fresh project: make creates
``.venv`` with that interpreter, installs the runtime, the service and its dev tools from the package
index, then runs the unit tests named in ``PYTEST_ARGS``. A second ``make test`` installs nothing, and
``make install PYTHON=<Python 3.12>`` makes ``.venv`` again with 3.12.

Without cargo: on a PATH that has no cargo, rustc or apt-get (``TRITONRT_NO_APT=1`` too: as root,
``debian_cargo.py ensure`` would install Debian's cargo), ``make install`` says what to run and installs
nothing; ``make runtime-wheel`` with the backend library this checkout built puts the runtime's platform wheel
in ``dist/``, and ``make install`` then installs from it a runtime that finds its backend library.

Slow (pip installs, about a minute each with a warm pip cache) and needs the package index: marked ``bake``.
"""

from __future__ import annotations

import glob
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
from conftest import bake

UNIT_TESTS = "PYTEST_ARGS=tests/test_settings.py tests/test_model.py -p no:cacheprovider"


def find_python(version: str) -> str | None:
    """Python ``version``: pyenv's build, else ``python<version>`` on PATH."""
    found = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python")))
    return found[-1] if found else shutil.which(f"python{version}")


# What make install and make runtime-wheel run besides Python: no cargo, rustc or apt-get among them.
NO_CARGO_TOOLS = ("make", "sh", "bash", "env", "rm", "touch", "ls", "mkdir", "cat", "uname", "apt-cache")


def make(project: pathlib.Path, *arguments: str, **env_changes: str) -> subprocess.CompletedProcess[str]:
    """``make arguments`` in ``project``, outside any venv, with ``env_changes`` over this environment."""
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(env_changes)
    make_program = shutil.which("make", path=env.get("PATH")) or "make"
    return subprocess.run(
        [make_program, *arguments], cwd=project, env=env, capture_output=True, text=True, timeout=1500
    )


def venv_version(project: pathlib.Path) -> str:
    command = [str(project / ".venv" / "bin" / "python"), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.bake
@pytest.mark.timeout(3000)
def test_make_test_installs_first_with_the_python_it_is_given(tmp_path: pathlib.Path) -> None:
    python310, python312 = find_python("3.10"), find_python("3.12")
    if python310 is None or python312 is None:
        pytest.skip("needs Python 3.10 and 3.12 (pyenv install 3.10 3.12, or python3.10/python3.12 on PATH)")
    project = bake(tmp_path)
    assert not (project / ".venv").exists()

    first = make(project, "test", f"PYTHON={python310}", UNIT_TESTS)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert "Installing first" in first.stdout
    assert re.search(r"\b\d+ passed\b", first.stdout), first.stdout[-2000:]
    assert venv_version(project) == "3.10"

    again = make(project, "test", UNIT_TESTS)
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert "Installing first" not in again.stdout and "pip install" not in again.stdout

    other = make(project, "install", f"PYTHON={python312}", "EXTRAS=")
    assert other.returncode == 0, other.stdout[-4000:] + other.stderr[-4000:]
    assert f"is not made with PYTHON={python312}: making it again" in other.stdout
    assert venv_version(project) == "3.12"


def path_without_cargo(directory: pathlib.Path) -> str:
    """A PATH of one folder: links to ``NO_CARGO_TOOLS`` as found on this PATH (never ~/.cargo/bin's)."""
    directory.mkdir()
    cargo_home = pathlib.Path(os.environ.get("CARGO_HOME", pathlib.Path.home() / ".cargo")) / "bin"
    searched = os.pathsep.join(
        folder for folder in os.environ.get("PATH", "").split(os.pathsep) if pathlib.Path(folder) != cargo_home
    )
    for tool in NO_CARGO_TOOLS:
        found = shutil.which(tool, path=searched)
        if found is not None:
            (directory / tool).symlink_to(found)
    for absent in ("cargo", "rustc", "rustup", "apt-get"):
        assert shutil.which(absent, path=str(directory)) is None, f"{absent} is on the PATH without cargo"
    return str(directory)


def backend_library() -> str:
    """The backend library this checkout's runtime uses (built by make venv's editable install)."""
    from tritonrt.proxy import native_files

    try:
        return str(native_files.library_path())
    except FileNotFoundError as missing:
        pytest.skip(f"no backend library to build the runtime's wheel from: {missing}")


@pytest.mark.bake
@pytest.mark.timeout(3000)
def test_make_install_without_cargo_says_what_to_run_then_takes_the_wheel_in_dist(tmp_path: pathlib.Path) -> None:
    library = backend_library()
    project = bake(tmp_path)
    # TRITONRT_NO_APT: as root this machine could get Debian's cargo, which the test must not install.
    no_cargo = {"PATH": path_without_cargo(tmp_path / "bin"), "TRITONRT_NO_APT": "1", "TRITONRT_NATIVE_LIBRARY": ""}
    python = os.path.realpath(sys.executable)  # the interpreter behind this venv: .venv is made from it

    refused = make(project, "install", f"PYTHON={python}", "EXTRAS=", **no_cargo)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output[-4000:]
    said = [line for line in refused.stderr.splitlines() if line.startswith("==> cargo is not installed")]
    assert said, output[-4000:]  # debian_cargo.py ensure: what to run, from apt's packages or rustup
    assert "apt-get install" in said[0] or "sh.rustup.rs" in said[0], said[0]
    assert "make install: cargo (Rust) is not installed" in refused.stderr and "dist/" in refused.stderr
    installed = subprocess.run(
        [str(project / ".venv" / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "tritonrt" not in installed and not (project / ".venv" / ".installed-dev").exists(), installed

    wheel = make(project, "runtime-wheel", f"TRITONRT_NATIVE_LIBRARY={library}", **no_cargo)
    assert wheel.returncode == 0, wheel.stdout[-4000:] + wheel.stderr[-4000:]
    assert [path.name for path in (project / "dist").glob("tritonrt-*manylinux_2_*.whl")], wheel.stdout[-2000:]

    again = make(project, "install", f"PYTHON={python}", "EXTRAS=", **no_cargo)
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert "cargo not found: installing the runtime from dist/tritonrt-" in again.stdout
    probe = "from tritonrt.proxy import native_files; print(native_files.library_path())"
    found = subprocess.run(
        [str(project / ".venv" / "bin" / "python"), "-c", probe],
        capture_output=True,
        text=True,
        env={key: value for key, value in os.environ.items() if key != "TRITONRT_NATIVE_LIBRARY"},
    )
    assert found.returncode == 0, found.stderr
    shipped = pathlib.Path(found.stdout.strip())
    assert shipped.is_relative_to(project.resolve() / ".venv"), f"{shipped}: not the wheel's, in .venv"
    assert shipped.parts[-3:] == ("tritonrt", "_native", "libtriton_tritonrt.so"), shipped
