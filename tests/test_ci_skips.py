"""Under CI a skipped test fails, naming the reason (.ci/strict_skips.py); outside CI it stays a skip. A skip at
collection (a module's ``pytest.importorskip``) fails too: the template's hook and the generated project's conftest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, bake

SUITE = """
import pytest

def test_needs_a_tool():
    pytest.skip("frobnicate not found: apt-get install frobnicate")

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_known_bug():
    assert False

def test_passes():
    pass
"""
# A module that skips as it is collected, as tests needing an optional package do.
COLLECTION_SKIP = """
import pytest

pytest.importorskip("tritonrt_no_such_module", reason="needs tritonrt_no_such_module: pip install it")

def test_uses_it():
    pass
"""
CONFTEST = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT / ".ci")!r})
from strict_skips import pytest_make_collect_report, pytest_runtest_makereport
"""


def run_suite(tmp_path: Path, ci: str, suite: str = SUITE) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(suite)
    return run_pytest(tmp_path, ci, str(tmp_path))


def run_pytest(cwd: Path, ci: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q", *args]
    environ = {**os.environ, "CI": ci, **env}
    return subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_skip_fails_under_ci_with_its_reason(tmp_path: Path, ci: str) -> None:
    result = run_suite(tmp_path, ci)
    assert result.returncode == 1, result.stdout
    assert "1 failed, 1 passed, 1 xfailed" in result.stdout
    assert f"skipped under CI={ci}: frobnicate not found: apt-get install frobnicate" in result.stdout


def test_a_skip_stays_a_skip_outside_ci(tmp_path: Path) -> None:
    result = run_suite(tmp_path, "")
    assert result.returncode == 0, result.stdout
    assert "1 passed, 1 skipped, 1 xfailed" in result.stdout
    assert "SKIPPED [1] test_suite.py:5: frobnicate not found: apt-get install frobnicate" in result.stdout


def test_a_skip_at_collection_fails_under_ci_with_its_reason(tmp_path: Path) -> None:
    result = run_suite(tmp_path, "true", COLLECTION_SKIP)
    assert result.returncode != 0, result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("1 error in"), result.stdout  # nothing skipped
    assert "skipped under CI=true: needs tritonrt_no_such_module: pip install it" in result.stdout


def test_a_skip_at_collection_stays_a_skip_outside_ci(tmp_path: Path) -> None:
    result = run_suite(tmp_path, "", COLLECTION_SKIP)
    assert result.returncode == 5, result.stdout  # no test ran: pytest's "no tests collected"
    assert "1 skipped" in result.stdout and "needs tritonrt_no_such_module: pip install it" in result.stdout


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project of the defaults with a test module that skips at collection beside its own tests."""
    project = bake(tmp_path_factory.mktemp("baked"))
    (project / "tests" / "test_needs_a_module.py").write_text(COLLECTION_SKIP)
    return project


@pytest.mark.parametrize("ci", ["true", ""])
def test_the_generated_suite_fails_a_skip_at_collection_under_ci_only(baked: Path, ci: str) -> None:
    """The generated project's tests/conftest.py does what .ci/strict_skips.py does for collection skips (its tool
    skips fail under CI through skip_or_fail_under_ci)."""
    path = os.pathsep.join([str(baked / "src"), str(baked / "runtime")])
    result = run_pytest(baked, ci, "tests/test_needs_a_module.py", "tests/test_settings.py", PYTHONPATH=path)
    if ci:
        assert result.returncode != 0, result.stdout
        assert "skipped under CI=true: needs tritonrt_no_such_module: pip install it" in result.stdout
        assert result.stdout.strip().splitlines()[-1].startswith("1 error in"), result.stdout
    else:
        assert result.returncode == 0, result.stdout + result.stderr
        assert " passed, 1 skipped in " in result.stdout.strip().splitlines()[-1], result.stdout
