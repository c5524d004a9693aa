"""The backend's Rust tests (unit, golden messages, executor, fuzzer), plain and under AddressSanitizer.

The ASan run needs the nightly toolchain (``cargo +nightly``, its asan runtime): skipped with the reason when it
is absent. ``cargo clippy`` keeps the crate free of warnings.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from native_testlib import NATIVE_DIR

pytestmark = pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo is not installed")


def cargo(*args: str, env: dict[str, str] | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["cargo", *args],
        cwd=NATIVE_DIR,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def passed(output: str) -> int:
    return sum(int(line.split()[3]) for line in output.splitlines() if line.startswith("test result: ok."))


def test_the_rust_suite_passes():
    done = cargo("test", "--offline")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert passed(done.stdout) >= 35


def test_the_rust_suite_passes_under_address_sanitizer():
    if cargo("+nightly", "--version").returncode != 0:
        pytest.skip("the nightly toolchain (cargo +nightly) is not installed: it has the AddressSanitizer runtime")
    flags = {"RUSTFLAGS": "-Zsanitizer=address", "RUSTDOCFLAGS": "-Zsanitizer=address"}
    args = ["+nightly", "test", "--offline", "--target", "x86_64-unknown-linux-gnu", "--target-dir", "target/asan"]
    done = cargo(*args, env=flags)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "AddressSanitizer" not in done.stderr
    assert passed(done.stdout) >= 35


def test_clippy_finds_nothing():
    done = cargo("clippy", "--offline", "--all-targets", "--", "-D", "warnings")
    if done.returncode != 0 and "no such command" in done.stderr:
        pytest.skip("clippy is not installed")
    assert done.returncode == 0, done.stderr[-4000:]
