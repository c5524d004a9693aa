"""``python -m loadtests tune``: the options and the errors a user can make (exit status 2, a clear message).

None of these runs starts a service.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.tests.conftest import REPO_ROOT
from loadtests.tune.cli import main


def _project(tmp_path: Path, slo: str = "LOADTEST_P95_MS=100\n") -> list[str]:
    (tmp_path / "locustfile.py").write_text("", encoding="utf-8")
    (tmp_path / "slo.env").write_text(slo, encoding="utf-8")
    return [
        "--package", "nothing_here", "--model", "m", "--locustfile", str(tmp_path / "locustfile.py"),
        "--slo-env", str(tmp_path / "slo.env"), "--reports", str(tmp_path / "reports"),
    ]  # fmt: skip


def test_without_a_p95_objective_it_says_where_to_set_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOADTEST_P95_MS", raising=False)
    assert main(_project(tmp_path, slo="QUEUE_TARGET_MS=20\n")) == 2
    assert "set LOADTEST_P95_MS in" in capsys.readouterr().err


def test_a_missing_locustfile_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _project(tmp_path)
    (tmp_path / "locustfile.py").unlink()
    assert main(args) == 2
    assert "no locustfile at" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--max-batch-sizes", "8,x", "'x' is not a whole number >= 1"),
        ("--queue-delays-us", "-5", "not a whole number of microseconds"),
        ("--preferred", "maybe", "neither off nor on"),
        ("--modes", "fibre", "not a worker mode (thread, process)"),
        ("--instances", ",", "lists nothing"),
        ("--budget-min", "0", "must be greater than zero"),
    ],
)
def test_a_bad_option_is_explained(tmp_path: Path, option: str, value: str, message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loadtests", "tune", *_project(tmp_path), option, value],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_a_service_that_cannot_start_stops_the_run_with_its_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*_project(tmp_path), "--budget-min", "1"]) == 2
    error = capsys.readouterr().err
    assert "could not be served" in error and "No module named nothing_here" in error
