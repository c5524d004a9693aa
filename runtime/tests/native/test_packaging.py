"""The runtime's wheel: a platform wheel carrying the backend library (built with cargo or prebuilt), an honest
manylinux tag, and a clear outcome without cargo."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import venv
import zipfile

import pytest

RUNTIME = pathlib.Path(__file__).resolve().parents[2]
LIBRARY = "tritonrt/_native/libtriton_tritonrt.so"


def build_wheel(out: pathlib.Path, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "TRITONRT_NATIVE_LIBRARY"}
    environment.update(env)
    command = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", str(RUNTIME)]
    command += ["-w", str(out)]
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600)


def no_cargo_path(tmp_path: pathlib.Path) -> str:
    """PATH without cargo: the directories of the tools the build needs, minus any holding cargo."""
    keep = [d for d in os.environ["PATH"].split(os.pathsep) if not (pathlib.Path(d) / "cargo").exists()]
    return os.pathsep.join(keep)


@pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo is not installed")
def test_the_wheel_carries_the_library_and_a_tag_for_its_glibc(tmp_path):
    done = build_wheel(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name.startswith("tritonrt-") and "-py3-none-manylinux_2_" in wheel.name
    with zipfile.ZipFile(wheel) as archive:
        assert LIBRARY in archive.namelist()
        info = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/WHEEL"))).decode()
        library = archive.read(LIBRARY)
    assert "Root-Is-Purelib: false" in info
    glibc = int(wheel.name.split("manylinux_2_")[1].split("_")[0])
    assert f"GLIBC_2.{glibc}".encode() in library and f"GLIBC_2.{glibc + 1}".encode() not in library
    # Installed from the wheel, the runtime finds its library in the package: no compiler needed.
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=False, system_site_packages=True)
    python = environment / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], check=True, timeout=300)
    probe = "from tritonrt.proxy import native_files; print(native_files.library_path())"
    found = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert found.stdout.strip().endswith(LIBRARY) and str(environment) in found.stdout


def test_without_cargo_the_wheel_is_pure_and_says_why(tmp_path):
    done = build_wheel(tmp_path, PATH=no_cargo_path(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "building without the native backend: cargo (Rust) is not installed" in done.stderr
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert LIBRARY not in archive.namelist()


def test_a_release_build_without_cargo_fails_with_what_to_do(tmp_path):
    done = build_wheel(tmp_path, PATH=no_cargo_path(tmp_path), TRITONRT_REQUIRE_NATIVE="1")
    assert done.returncode != 0
    assert "install Rust's cargo" in done.stderr and "TRITONRT_NATIVE_LIBRARY" in done.stderr
    assert not list(tmp_path.glob("*.whl"))
