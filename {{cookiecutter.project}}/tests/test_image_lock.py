"""tools/image_lock.py: the lock's pins for the image's Python and machine, as make wheels downloads them."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tools.image_lock import marker_environment, pins

__all__: list[str] = []

PROJECT_DIR = Path(__file__).resolve().parents[1]
LOCK = """\
# a comment, as uv writes them
numpy==2.2.6 ; python_full_version < '3.11'
numpy==2.3.4 ; python_full_version >= '3.11'
Jinja2==3.1.6
uvloop==0.22.1 ; sys_platform == 'linux' and platform_machine == 'x86_64'
colorama==0.4.6 ; sys_platform == 'win32'
tomli==2.5.0 ; python_full_version == '3.11.*'
"""


def test_each_python_gets_its_own_lines_without_markers() -> None:
    assert pins(LOCK, marker_environment("3.10", "x86_64")) == {"numpy": "2.2.6", "jinja2": "3.1.6",
                                                                 "uvloop": "0.22.1"}  # fmt: skip
    assert pins(LOCK, marker_environment("3.11.9", "aarch64")) == {"numpy": "2.3.4", "jinja2": "3.1.6",
                                                                    "tomli": "2.5.0"}  # fmt: skip


def test_the_projects_own_lock_pins_every_package_once_per_platform() -> None:
    lock = (PROJECT_DIR / "requirements.txt").read_text()
    for python in ("3.10", "3.11", "3.12", "3.13", "3.14"):
        found = pins(lock, marker_environment(python, "x86_64"))
        assert {"numpy", "dumb-init", "setuptools"} <= set(found), python


@pytest.mark.parametrize(
    ("lock", "problem"),
    [
        ("numpy>=2\n", "pins no single version"),
        ("numpy==2.2.6\nnumpy==2.3.4\n", "pins numpy a second time"),
        ("-e ./runtime\n", "is no requirement"),
    ],
)
def test_a_lock_line_that_is_no_single_pin_is_named(lock: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        pins(lock, marker_environment("3.12", "x86_64"))


def test_the_command_prints_the_pins_for_the_images_python(tmp_path: Path) -> None:
    docker = tmp_path / "docker"  # answers as an image of Python 3.10 would (tools/image_platform.py asks it)
    docker.write_text('#!/bin/sh\nprintf %s "3.10 2.31 aarch64"\n')
    docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "requirements.txt").write_text(LOCK)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    command = [sys.executable, "-m", "tools.image_lock", str(tmp_path / "requirements.txt"), "base:1"]
    result = subprocess.run(command, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["jinja2==3.1.6", "numpy==2.2.6"]
    assert "2 pins of" in result.stderr and "for Python 3.10 on aarch64" in result.stderr
