"""Under CI a skipped test fails, naming the reason (.ci/strict_skips.py); outside CI it stays a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

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
CONFTEST = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT / ".ci")!r})
from strict_skips import pytest_runtest_makereport
"""


def run_suite(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {**os.environ, "CI": ci}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q", str(tmp_path)]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


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
