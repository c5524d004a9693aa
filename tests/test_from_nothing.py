"""A generated project tests itself from nothing, on the Python it is given.

Bakes the defaults and runs ``make test PYTHON=<Python 3.10>`` in the fresh project: make creates
``.venv`` with that interpreter, installs the runtime, the service and its dev tools from the package
index, then runs the unit tests named in ``PYTEST_ARGS``. A second ``make test`` installs nothing, and
``make install PYTHON=<Python 3.12>`` makes ``.venv`` again with 3.12. Slow (pip installs, about a minute
each with a warm pip cache) and needs the package index: marked ``bake``.
"""

from __future__ import annotations

import glob
import os
import pathlib
import re
import shutil
import subprocess

import pytest
from conftest import bake

UNIT_TESTS = "PYTEST_ARGS=tests/test_settings.py tests/test_model.py -p no:cacheprovider"


def find_python(version: str) -> str | None:
    """Python ``version``: pyenv's build, else ``python<version>`` on PATH."""
    found = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python")))
    return found[-1] if found else shutil.which(f"python{version}")


def make(project: pathlib.Path, *arguments: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run(["make", *arguments], cwd=project, env=env, capture_output=True, text=True, timeout=1500)


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
