"""A generated project tests itself from nothing, on the Python it is given: what its README tells a user.

Bakes the defaults and runs ``make test PYTHON=<Python 3.10>`` in the fresh project: make creates
``.venv`` with that interpreter, installs the runtime, the service and its dev tools from the package
index (within the lock), then runs every test but the container tests (the image's: tests/test_container.py
runs them on the stand-in bases), in that ``.venv`` alone: unit, integration against tritonserver, k8s with
the tools ``make deploy-tools`` installs. A second ``make test`` installs nothing, and
``make install PYTHON=<Python 3.12>`` makes ``.venv`` again with 3.12. The newest Python, 3.14, does the
same ``make test`` from nothing: the host's python3.14, or Debian forky's in ``.ci/forky``'s chroot (the one
``make test-setup`` builds for the runtime's tests), where the k8s tests' tools are not: they ran on 3.10.

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
from conftest import REPO_ROOT, bake

UNIT_TESTS = "PYTEST_ARGS=tests/test_settings.py tests/test_model.py -p no:cacheprovider"
# `make test` as the README runs it, but for the container tests (they build the image on the NGC base).
ALL_BUT_CONTAINERS = 'PYTEST_ARGS=-m "not container" -p no:cacheprovider'
# checkov for the k8s tests, from `make deploy-tools` (the generated tests read CHECKOV).
CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"
# Where .ci/forky keeps its chroot (make test-setup builds it as root when the host has no python3.14).
FORKY_ROOT = pathlib.Path(os.environ.get("FORKY_ROOT") or REPO_ROOT / "build" / "forky")


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

    checkov = {"CHECKOV": str(CHECKOV)} if CHECKOV.exists() else {}
    first = make(project, "test", f"PYTHON={python310}", ALL_BUT_CONTAINERS, **checkov)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-4000:]
    assert "Installing first" in first.stdout
    passed = re.search(r"\b(\d+) passed\b", first.stdout)
    assert passed and int(passed.group(1)) >= 100, first.stdout[-2000:]
    assert venv_version(project) == "3.10"

    again = make(project, "test", UNIT_TESTS)
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert "Installing first" not in again.stdout and "pip install" not in again.stdout

    other = make(project, "install", f"PYTHON={python312}", "EXTRAS=")
    assert other.returncode == 0, other.stdout[-4000:] + other.stderr[-4000:]
    assert f"is not made with PYTHON={python312}: making it again" in other.stdout
    assert venv_version(project) == "3.12"


@pytest.mark.bake
@pytest.mark.timeout(3000)
def test_make_test_from_nothing_on_the_newest_python() -> None:
    python, runner = find_python("3.14"), []
    if python is None:  # as make test runs the runtime's tests on 3.14: in forky's chroot
        if os.geteuid() != 0 or not (FORKY_ROOT / ".installed").is_file():
            pytest.skip("needs Python 3.14: python3.14 on PATH (or pyenv's), or as root the chroot of .ci/forky "
                        "--build (make test-setup builds it)")  # fmt: skip
        python, runner = "python3.14", [str(REPO_ROOT / ".ci" / "forky")]
    # The chroot sees the repository (and ~/.cache, ~/.cargo), not /tmp: the project is baked under build/.
    work = REPO_ROOT / "build" / "from-nothing-3.14"
    shutil.rmtree(work, ignore_errors=True)
    try:
        project = bake(work)
        env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
        env |= {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "FORKY_ROOT": str(FORKY_ROOT)}
        # The k8s tests need kubectl, promtool, prometheus and checkov, which the chroot lacks; they ran on 3.10. So
        # does the Python-backend model of models/: Triton's Python backend stub loads libpython3.11, not in forky.
        tests = 'PYTEST_ARGS=-m "not container and not k8s" -k "not python_backend_model" -p no:cacheprovider'
        result = subprocess.run([*runner, "make", "test", f"PYTHON={python}", tests], cwd=project, env=env,
                                capture_output=True, text=True, timeout=2700)  # fmt: skip
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-4000:]
        assert "Installing first" in result.stdout
        passed = re.search(r"\b(\d+) passed\b", result.stdout)
        assert passed and int(passed.group(1)) >= 100, result.stdout[-2000:]
        version = subprocess.run([*runner, ".venv/bin/python", "-c", "import sys; print(sys.version_info[:2])"],
                                 cwd=project, env=env, capture_output=True, text=True, check=True)  # fmt: skip
        assert version.stdout.strip() == "(3, 14)", version.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)


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
