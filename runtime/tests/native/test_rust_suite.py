"""The backend's Rust tests (unit, golden messages, executor, fuzzer, ABI), plain and under AddressSanitizer.

The ASan run needs the nightly toolchain (``cargo +nightly``, its asan runtime): skipped with the reason when it
is absent. ``cargo clippy`` keeps the crate free of warnings. The crate's ``rust-version`` is proven by Debian's
packaged rustc of that version building it, in the chroot ``debian_cargo.py chroot`` builds (``make test`` does
when run as root): skipped with the reason when it is absent outside CI, a failure under ``CI``. ``debian_cargo.py
ensure`` is run against an apt faked on PATH: it installs as root, and with ``TRITONRT_NO_APT=1`` runs no apt-get.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
from types import ModuleType

import pytest
from native_testlib import NATIVE_DIR

needs_cargo = pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo is not installed")


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


@needs_cargo
def test_the_rust_suite_passes():
    done = cargo("test", "--offline")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert passed(done.stdout) >= 35


@needs_cargo
def test_the_rust_suite_passes_under_address_sanitizer():
    if cargo("+nightly", "--version").returncode != 0:
        pytest.skip("the nightly toolchain (cargo +nightly) is not installed: it has the AddressSanitizer runtime")
    flags = {"RUSTFLAGS": "-Zsanitizer=address", "RUSTDOCFLAGS": "-Zsanitizer=address"}
    args = ["+nightly", "test", "--offline", "--target", "x86_64-unknown-linux-gnu", "--target-dir", "target/asan"]
    done = cargo(*args, env=flags)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "AddressSanitizer" not in done.stderr
    assert passed(done.stdout) >= 35


@needs_cargo
def test_clippy_finds_nothing():
    done = cargo("clippy", "--offline", "--all-targets", "--", "-D", "warnings")
    if done.returncode != 0 and "no such command" in done.stderr:
        pytest.skip("clippy is not installed")
    assert done.returncode == 0, done.stderr[-4000:]


def debian_cargo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("debian_cargo", NATIVE_DIR / "debian_cargo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_crate_builds_with_debians_rustc_of_its_rust_version():
    toolchain = debian_cargo()
    need = toolchain.rust_version()
    root = toolchain.chroot_path()
    absent = None
    if os.geteuid() != 0:
        absent = "building in the Debian chroot needs root (chroot)"
    elif not (root / "usr/bin/cargo").exists():
        absent = f"{root} is missing: make test builds it (sudo {sys.executable} {toolchain.__file__} chroot)"
    if absent is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI: {absent}")
        pytest.skip(absent)
    done = toolchain.build_in_chroot(root)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    rustc = toolchain.parse_version(done.stdout.splitlines()[0])
    assert rustc is not None and rustc[:2] == need[:2], f"the chroot's {done.stdout.splitlines()[0]} is not {need}"


def test_debians_cargo_is_chosen_by_its_rustc():
    toolchain = debian_cargo()
    bookworm = {"rustc": (1, 63, 0), "rustc-web": (1, 96, 0)}
    assert toolchain.apt_choice((1, 85), bookworm) == ("cargo-web", (1, 96, 0)), "Debian 12: cargo is too old"
    assert toolchain.apt_choice((1, 85), {"rustc": (1, 85, 1), "rustc-web": None}) == ("cargo", (1, 85, 1))
    assert toolchain.apt_choice((1, 85), {"rustc": (1, 75, 0), "rustc-web": None}) is None, "then: rustup"
    assert toolchain.parse_version("1.85.0+dfsg3-1~deb12u3") == (1, 85, 0)
    assert toolchain.parse_version("rustc 1.85.1 (4eb161250 2025-03-15)") == (1, 85, 1)


def fake_apt(directory: pathlib.Path, log: pathlib.Path) -> None:
    """``apt-cache`` offering Debian 12's compilers (rustc 1.63, rustc-web 1.96) and an ``apt-get`` that only
    writes its arguments to ``log``, alone on PATH (no cargo)."""
    directory.mkdir()
    scripts = {
        "apt-cache": 'case "$2" in rustc) v=1.63.0+dfsg1-2;; rustc-web) v=1.96.0+dfsg1-1~deb12u2;;\n'
        '*) v="(none)";; esac; echo "$2:"; echo "  Candidate: $v"\n',
        "apt-get": f'echo "$@" >> "{log}"\n',
    }
    for name, body in scripts.items():
        (directory / name).write_text("#!/bin/sh\n" + body)
        (directory / name).chmod(0o755)


@pytest.mark.parametrize("root", [True, False], ids=["root", "user"])
def test_ensure_runs_no_apt_get_with_tritonrt_no_apt(tmp_path, monkeypatch, root: bool):
    toolchain = debian_cargo()
    log = tmp_path / "apt-get.log"
    fake_apt(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(toolchain, "is_root", lambda: root)
    monkeypatch.setenv(toolchain.NO_APT, "1")
    message = toolchain.ensure_cargo((1, 85))
    assert not log.exists(), f"apt-get ran: {log.read_text()}"
    install = "apt-get install -y -qq --no-install-recommends cargo-web"
    assert f"Install Debian's: {'' if root else 'sudo '}{install} (Rust 1.96.0)" in message
    assert message.startswith("cargo is not installed") and "TRITONRT_NO_APT=1" in message


def test_ensure_installs_debians_cargo_as_root_without_the_opt_out(tmp_path, monkeypatch):
    toolchain = debian_cargo()
    log = tmp_path / "apt-get.log"
    fake_apt(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(toolchain, "is_root", lambda: True)
    monkeypatch.delenv(toolchain.NO_APT, raising=False)
    assert toolchain.ensure_cargo((1, 85)) == "installed Debian's cargo-web (Rust 1.96.0)"
    assert log.read_text().splitlines() == ["update -qq", "install -y -qq --no-install-recommends cargo-web"]
    monkeypatch.setenv(toolchain.NO_APT, "0")  # only 1 opts out
    assert toolchain.apt_allowed()
