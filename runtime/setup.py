"""Build hook: put tritonrt's Triton backend library (runtime/native, Rust) into the wheel as
``tritonrt/_native/libtriton_tritonrt.so`` and tag the wheel for the platform it runs on.

The library comes from, in order: ``$TRITONRT_NATIVE_LIBRARY`` (a prebuilt .so), ``tritonrt/_native/`` already
holding one (a prebuilt copy), or ``cargo build --release`` of runtime/native (std only: builds offline). The
wheel's tag is ``manylinux_2_<N>_<arch>``, N the highest GLIBC symbol version the library needs.

An editable install (``pip install -e runtime``) builds the library into runtime/native/target, where
tritonrt.proxy.native_files finds it in a source tree: tritonrt serves every model through it.

Without cargo and without a prebuilt library the wheel is built without the backend (pure Python: it cannot
serve), saying so, unless ``TRITONRT_REQUIRE_NATIVE=1`` (release builds, ``make wheels``): then that is an error.
Everything else of the project's metadata is in pyproject.toml.
"""

from __future__ import annotations

import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = pathlib.Path(__file__).resolve().parent
NATIVE = HERE / "native"
LIBRARY = "libtriton_tritonrt.so"
PREBUILT = HERE / "tritonrt" / "_native" / LIBRARY
_GLIBC = re.compile(rb"GLIBC_2\.(\d+)")


def _say(message: str) -> None:
    print(f"tritonrt build: {message}", file=sys.stderr, flush=True)


def _required() -> bool:
    return os.environ.get("TRITONRT_REQUIRE_NATIVE") == "1"


def native_library(target_dir: pathlib.Path) -> pathlib.Path | None:
    """The backend library to ship: prebuilt, or built now with cargo into ``target_dir``; None if neither can be
    had."""
    override = os.environ.get("TRITONRT_NATIVE_LIBRARY")
    if override:
        path = pathlib.Path(override)
        if not path.is_file():
            raise SystemExit(f"tritonrt build: TRITONRT_NATIVE_LIBRARY={override} is not a file")
        return path
    if PREBUILT.is_file():
        return PREBUILT
    cargo = shutil.which("cargo")
    if cargo is None or not (NATIVE / "Cargo.toml").is_file():
        reason = "cargo (Rust) is not installed" if cargo is None else f"{NATIVE} has no Cargo.toml"
        message = (
            f"{reason}, and no prebuilt {LIBRARY} was given: install Rust's cargo (https://rustup.rs), or put a "
            f"prebuilt library at tritonrt/_native/{LIBRARY} or in TRITONRT_NATIVE_LIBRARY"
        )
        if _required():
            raise SystemExit(f"tritonrt build: {message}")
        _say(f"building without the native backend: {message}")
        return None
    target = target_dir.resolve()  # cargo runs in runtime/native: an absolute path
    _say("cargo build --release (runtime/native) ...")
    command = [cargo, "build", "--release", "--locked", "--offline", "--target-dir", str(target)]
    subprocess.run(command, cwd=NATIVE, check=True)
    return target / "release" / LIBRARY


def glibc_minor(library: pathlib.Path) -> int:
    """The highest GLIBC_2.N symbol version ``library`` refers to (its dynamic string table names them)."""
    found = [int(minor) for minor in _GLIBC.findall(library.read_bytes())]
    return max(found, default=17)


class BuildPy(build_py):
    """build_py that also places the native library in the package; an editable install builds it where
    tritonrt.proxy.native_files looks in a source tree (runtime/native/target/release) instead, since every
    model tritonrt serves needs it."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            native_library(NATIVE / "target")
            return
        library = native_library(pathlib.Path(self.get_finalized_command("build").build_temp) / "cargo")
        target = pathlib.Path(self.build_lib) / "tritonrt" / "_native" / LIBRARY
        if library is None:
            target.unlink(missing_ok=True)  # a library left in build/ by an earlier build must not ship untagged
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library, target)
        target.chmod(0o755)
        self.distribution.native_glibc = glibc_minor(target)


class BinaryDistribution(Distribution):
    """A distribution that carries a compiled library once the build placed one (platlib, platform tag)."""

    native_glibc: int | None = None

    def has_ext_modules(self) -> bool:
        return self.native_glibc is not None


class BdistWheel(bdist_wheel):
    def get_tag(self) -> tuple[str, str, str]:
        glibc = self.distribution.native_glibc
        if glibc is None:
            return super().get_tag()  # no library: a pure wheel
        machine = platform.machine()
        return "py3", "none", f"manylinux_2_{glibc}_{machine}"

    def run(self) -> None:
        self.run_command("build_py")  # learn whether a library is shipped before the wheel is tagged
        self.root_is_pure = self.distribution.native_glibc is None
        super().run()


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
