#!/usr/bin/env python3
"""Debian's packaged Rust toolchain for tritonrt's backend (this crate), standard library only.

- ``ensure``: before the runtime is installed (``make install``, ``make demo``, ``make venv``). Nothing to do
  when ``cargo`` and a ``rustc`` at least the crate's ``rust-version`` are on PATH. Otherwise, run as root on a
  machine with apt, it installs the first of Debian's cargo packages whose compiler is new enough (``cargo``
  with ``rustc``: Rust 1.85 on Debian 13; on Debian 12 ``cargo`` is 1.63 and ``cargo-web`` with ``rustc-web``
  is the new one); otherwise it prints exactly what to run. It never fails: without cargo the caller decides.
  ``TRITONRT_NO_APT=1`` keeps it from running apt-get at all (no update, no install), root or not: it only says
  what to run (for a machine whose packages someone else manages, and for the tests of the path without cargo);
  ``chroot`` then installs no debootstrap either.
- ``chroot``: the proof of ``rust-version``: a Debian root file system (``debootstrap``, ``--suite``, trixie by
  default, whose rustc is the crate's ``rust-version``) with its apt ``cargo``, built once into
  ``~/.cache/tritonrt/toolchains/<suite>-cargo`` and reused (root and debootstrap needed; it says why not
  otherwise, and exits 0 so that ``make test`` goes on and the test skips).
- ``build``: build the crate and its tests (``--release``, ``--locked``, offline) with that chroot's cargo;
  prints the compiler's version. ``runtime/tests/native/test_rust_suite.py`` runs it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "NO_APT",
    "AptChoice",
    "apt_allowed",
    "apt_choice",
    "build_in_chroot",
    "chroot_path",
    "ensure_cargo",
    "parse_version",
    "rust_version",
]

CRATE_DIR = Path(__file__).resolve().parent
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tritonrt" / "toolchains"
DEFAULT_SUITE = "trixie"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Debian's cargo packages and the compiler package each brings, in order of preference: cargo/rustc (every
# suite), cargo-web/rustc-web (Debian 12's updates: a newer Rust for browsers, installed as /usr/bin/cargo).
APT_PACKAGES = (("cargo", "rustc"), ("cargo-web", "rustc-web"))
# What the chroot needs besides cargo: rustc's libc-dev dependency is virtual (debootstrap cannot resolve it).
CHROOT_PACKAGES = ("cargo", "libc6-dev", "gcc")
# What the build in the chroot copies of the crate.
CRATE_PARTS = ("Cargo.toml", "Cargo.lock", "src", "tests", "abi")
# Set to 1: ``ensure`` runs no apt-get (neither update nor install), it says what to run instead.
NO_APT = "TRITONRT_NO_APT"
RUSTUP = (
    "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal "
    '&& . "$HOME/.cargo/env"'
)

Version = tuple[int, ...]


class AptChoice(NamedTuple):
    """A Debian cargo package and the version of the rustc it brings."""

    package: str
    rustc_version: Version


def parse_version(text: str) -> Version | None:
    """The first dotted version in ``text`` (``rustc 1.85.1 (...)``, apt's ``1.85.0+dfsg3-1~deb12u3``)."""
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if found is None:
        return None
    return tuple(int(part) for part in found.groups() if part is not None)


def rust_version(cargo_toml: Path = CRATE_DIR / "Cargo.toml") -> Version:
    """The crate's declared ``rust-version``."""
    found = re.search(r'^rust-version\s*=\s*"([^"]+)"', cargo_toml.read_text(), re.MULTILINE)
    version = parse_version(found.group(1)) if found else None
    if version is None:
        raise SystemExit(f'{cargo_toml} declares no rust-version: add one (rust-version = "1.85")')
    return version


def dotted(version: Version) -> str:
    return ".".join(str(part) for part in version)


def installed_rustc() -> Version | None:
    """The version of the rustc on PATH, when cargo and rustc both are."""
    if shutil.which("cargo") is None or shutil.which("rustc") is None:
        return None
    done = subprocess.run(["rustc", "--version"], capture_output=True, text=True, check=False)
    return parse_version(done.stdout) if done.returncode == 0 else None


def apt_candidate(package: str) -> Version | None:
    """The version apt would install of ``package`` (None when apt has none)."""
    done = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True, check=False)
    found = re.search(r"Candidate:\s*(\S+)", done.stdout)
    if done.returncode != 0 or found is None or found.group(1) == "(none)":
        return None
    return parse_version(found.group(1))


def apt_choice(need: Version, candidate: dict[str, Version | None]) -> AptChoice | None:
    """The first cargo package whose rustc (``candidate[rustc package]``) is at least ``need``."""
    for package, compiler in APT_PACKAGES:
        version = candidate.get(compiler)
        if version is not None and version >= need:
            return AptChoice(package, version)
    return None


def is_root() -> bool:
    return os.geteuid() == 0


def apt_allowed() -> bool:
    """Whether this script may run apt-get itself: as root, with apt-get, unless ``TRITONRT_NO_APT=1``."""
    return is_root() and os.environ.get(NO_APT) != "1" and shutil.which("apt-get") is not None


def apt_install_command(package: str) -> list[str]:
    return ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package]


def apt_install(package: str) -> bool:
    """Install ``package`` with apt-get (as root), without questions; whether it worked."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(apt_install_command(package), env=env, check=False).returncode == 0


def ensure_cargo(need: Version) -> str:
    """Install Debian's cargo when needed and possible; returns what happened, or exactly what to run."""
    have = installed_rustc()
    if have is not None and have >= need:
        return ""
    why = (
        f"rustc {dotted(have)} is older than {dotted(need)}, the rust-version of tritonrt's backend"
        if have is not None
        else f"cargo is not installed; tritonrt's backend (runtime/native) needs Rust {dotted(need)} or newer"
    )
    if shutil.which("apt-cache") is None:
        return f"{why}. Install Rust with rustup: {RUSTUP}"
    may_install = apt_allowed()
    if may_install:
        subprocess.run(["apt-get", "update", "-qq"], check=False)
    choice = apt_choice(need, {compiler: apt_candidate(compiler) for _, compiler in APT_PACKAGES})
    if choice is None:
        return f"{why}, and no Debian package here is new enough. Install Rust with rustup: {RUSTUP}"
    if not may_install:
        install = ("" if is_root() else "sudo ") + " ".join(apt_install_command(choice.package))
        opted_out = f" ({NO_APT}=1: not installed here)" if os.environ.get(NO_APT) == "1" else ""
        return f"{why}. Install Debian's: {install} (Rust {dotted(choice.rustc_version)}){opted_out}"
    print(f"==> {why}: installing Debian's {choice.package} (Rust {dotted(choice.rustc_version)})", file=sys.stderr)
    if not apt_install(choice.package):
        return f"{why}; apt-get could not install {choice.package}. Install Rust with rustup: {RUSTUP}"
    return f"installed Debian's {choice.package} (Rust {dotted(choice.rustc_version)})"


def chroot_path(suite: str = DEFAULT_SUITE) -> Path:
    """Where the suite's cargo chroot is kept."""
    return CACHE_DIR / f"{suite}-cargo"


def build_chroot(suite: str, mirror: str) -> str:
    """Build the suite's cargo chroot unless it is there; returns what happened or why it cannot."""
    root = chroot_path(suite)
    if (root / "usr/bin/cargo").exists():
        return f"{root}: present"
    if not is_root():
        return f"{root} is missing and building it needs root (debootstrap): sudo {sys.executable} {__file__} chroot"
    if shutil.which("debootstrap") is None:
        if not apt_allowed() or not apt_install("debootstrap"):
            return f"{root} is missing and debootstrap is not installed (apt-get install debootstrap)"
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    print(f"==> debootstrap {suite} with its cargo into {root} (once; a few minutes)", file=sys.stderr)
    include = f"--include={','.join(CHROOT_PACKAGES)}"
    done = subprocess.run(["debootstrap", "--variant=minbase", include, suite, str(partial), mirror], check=False)
    if done.returncode != 0:
        return f"debootstrap {suite} failed (exit {done.returncode}); see {partial}/debootstrap/debootstrap.log"
    partial.rename(root)
    return f"{root}: built"


def build_in_chroot(root: Path, crate: Path = CRATE_DIR) -> subprocess.CompletedProcess[str]:
    """Build the crate and its tests with the chroot's cargo (a copy of the crate inside it)."""
    with tempfile.TemporaryDirectory(dir=root / "tmp", prefix="tritonrt-crate-") as work:
        for part in CRATE_PARTS:
            source = crate / part
            if source.is_dir():
                shutil.copytree(source, Path(work) / part)
            elif source.exists():
                shutil.copy2(source, Path(work) / part)
        inside = "/tmp/" + Path(work).name
        script = (
            f"cd {inside} && rustc --version && cargo --version "
            "&& cargo build --release --locked --offline && cargo test --locked --offline --no-run"
        )
        return subprocess.run(["chroot", str(root), "sh", "-c", script], capture_output=True, text=True, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("ensure", help="install Debian's cargo when needed and possible, else say what to run")
    for name, text in (("chroot", "build the Debian cargo chroot once"), ("build", "build the crate in it")):
        command = commands.add_parser(name, help=text)
        command.add_argument("--suite", default=DEFAULT_SUITE)
        command.add_argument("--mirror", default=DEFAULT_MIRROR)
    args = parser.parse_args(argv)
    if args.command == "ensure":
        message = ensure_cargo(rust_version())
        if message:
            print(f"==> {message}", file=sys.stderr)
        return 0
    if args.command == "chroot":
        print(f"==> {build_chroot(args.suite, args.mirror)}", file=sys.stderr)
        return 0
    root = chroot_path(args.suite)
    if not (root / "usr/bin/cargo").exists():
        print(f"{root} is missing: run {__file__} chroot first", file=sys.stderr)
        return 1
    done = build_in_chroot(root)
    print(done.stdout + done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
