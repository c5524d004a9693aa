"""Under CI, a skipped test fails: the CI machine has every tool the tests need, so a skip there hides a regression.

The template's suites (runtime/tests, loadtests/tests, tests) import this hook into their conftest. Outside CI (the
``CI`` variable unset or empty) a skip stays a skip and keeps its reason. Under CI it becomes a failure that names
the reason and what to do: install the missing tool through the repository's own files (Makefile, .ci/run).

A skip at collection (``pytest.importorskip`` or ``pytest.skip(allow_module_level=True)`` at a module's top) fails
too: under CI it becomes a collection error, which stops the run before any test, as an import error would.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

__all__ = ["ci_is_set", "pytest_make_collect_report", "pytest_runtest_makereport"]


def ci_is_set() -> bool:
    """Whether this run is CI's (the ``CI`` variable set, as CI services and .ci/run set it)."""
    return bool(os.environ.get("CI"))


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Turn a skip into a failure when ``CI`` is set (an expected failure, xfail, stays what it is)."""
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and ci_is_set():
        _fail(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """Turn a skip at collection (a module's ``pytest.importorskip``) into a collection error when ``CI`` is set."""
    report = yield
    if report.skipped and ci_is_set():
        _fail(report)
    return report


def _fail(report: pytest.TestReport | pytest.CollectReport) -> None:
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI={os.environ['CI']}: {_reason(report)}\n"
        "CI must run every test: install what it needs through the repository's files (Makefile, .ci/run), "
        "or run outside CI (CI unset) to let it skip."
    )
