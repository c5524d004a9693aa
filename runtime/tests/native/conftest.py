"""Fixtures of the native backend's tests: the backend library (built with cargo when it is not there)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # native_testlib, peer

from native_testlib import NATIVE_DIR  # noqa: E402
from worker_harness import Harness  # noqa: E402


@pytest.fixture(scope="session")
def native_library() -> pathlib.Path:
    """The backend library: the installed one, or built from runtime/native with cargo (skips without both)."""
    from tritonrt.proxy import native_files

    if "TRITONRT_NATIVE_LIBRARY" not in os.environ and shutil.which("cargo") and (NATIVE_DIR / "Cargo.toml").exists():
        # Build (or bring up to date) the source tree's library: the tests check this tree's code.
        subprocess.run(["cargo", "build", "--release", "--offline", "--quiet"], cwd=NATIVE_DIR, check=True)
    try:
        return native_files.library_path()
    except FileNotFoundError as error:
        pytest.skip(f"no backend library and no cargo to build one: {error}")


@pytest.fixture
def harness(tmp_path: pathlib.Path) -> Iterator[Callable[..., Harness]]:
    """Factory: ``harness(infer_callable, decoupled=False, strict=False)``, a worker and its fake backend, closed
    after the test (which fails if a worker is still running)."""
    made: list[Harness] = []

    def make(infer_callable: Callable[..., Any], **options: bool) -> Harness:
        made.append(Harness(tmp_path, infer_callable, **options))
        return made[-1]

    yield make
    for each in made:
        each.close()
    assert not any(each.worker.is_alive() for each in made)
