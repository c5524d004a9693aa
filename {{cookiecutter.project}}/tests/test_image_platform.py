"""tools/image_platform.py: the base image's platform, asked from Docker or assumed, and pip's arguments."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tools.image_platform import NGC_TRITONSERVER, Platform, image_platform, probe

PROJECT_DIR = Path(__file__).resolve().parents[1]


def fake_docker(directory: Path, output: str, status: int = 0) -> str:
    """A ``docker`` program that prints ``output`` and exits with ``status``, recording its arguments."""
    program = directory / "docker"
    program.write_text(
        f'#!/bin/sh\necho "$@" > "{directory}/arguments"\nprintf %s "{output}"\nexit {status}\n'
    )
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return str(program)


def test_a_platform_reads_and_prints_as_the_probe_writes_it() -> None:
    platform = Platform.parse("3.12 2.39 x86_64\n")
    assert platform == Platform("3.12", 39, "x86_64")
    assert str(platform) == "3.12 2.39 x86_64"


@pytest.mark.parametrize("text", ["3.12 2.39", "3.12  x86_64", "three 2.39 x86_64", ""])
def test_a_malformed_probe_answer_is_an_error_that_shows_it(text: str) -> None:
    with pytest.raises(ValueError, match="3.12 2.39 x86_64"):
        Platform.parse(text)


def test_the_manylinux_tags_go_from_the_image_glibc_down_to_manylinux1() -> None:
    tags = Platform("3.11", 7, "aarch64").manylinux_tags()
    assert tags == [
        "manylinux_2_7_aarch64",
        "manylinux_2_6_aarch64",
        "manylinux_2_5_aarch64",
        "manylinux2014_aarch64",
        "manylinux2010_aarch64",
        "manylinux1_aarch64",
    ]


def test_pip_gets_the_python_version_and_every_tag() -> None:
    arguments = NGC_TRITONSERVER.pip_arguments()
    assert arguments[:2] == ["--python-version", "3.12"]
    assert arguments[2::2] == ["--platform"] * len(NGC_TRITONSERVER.manylinux_tags())
    assert arguments[3::2] == NGC_TRITONSERVER.manylinux_tags()
    assert "manylinux_2_39_x86_64" in arguments and "manylinux_2_40_x86_64" not in arguments


def test_the_image_is_asked_without_pulling_it(tmp_path: Path) -> None:
    docker = fake_docker(tmp_path, "3.10 2.31 aarch64")
    assert probe("registry.example.com/base:1", docker) == Platform("3.10", 31, "aarch64")
    arguments = (tmp_path / "arguments").read_text().split()
    assert arguments[:6] == ["run", "--rm", "--pull", "never", "--entrypoint", "python3"]
    assert arguments[6] == "registry.example.com/base:1"


def test_without_the_image_or_docker_ngc_tritonserver_is_assumed_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert image_platform("absent:1", fake_docker(tmp_path, "", status=125)) == NGC_TRITONSERVER
    assert image_platform("absent:1", str(tmp_path / "no-docker")) == NGC_TRITONSERVER
    assert capsys.readouterr().err.count("absent:1 is not in the local Docker images") == 2


def test_the_command_prints_the_platform_or_pips_arguments(tmp_path: Path) -> None:
    fake_docker(tmp_path, "3.10 2.31 aarch64")
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}

    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tools.image_platform", *arguments]
        return subprocess.run(command, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=60)

    plain = run("base:1")
    assert plain.returncode == 0 and plain.stdout == "3.10 2.31 aarch64\n", plain.stderr
    pip = run("--pip-arguments", "base:1")
    assert pip.returncode == 0, pip.stderr
    assert pip.stdout.split() == Platform("3.10", 31, "aarch64").pip_arguments()
    assert "Wheels for base:1: Python 3.10, glibc 2.31, aarch64" in pip.stderr
