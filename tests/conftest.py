"""Shared helpers of the template's tests: bake the template, in-process or through the prompts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from cookiecutter.main import cookiecutter

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # the hooks package, as cookiecutter's hooks import it

# Under CI a skip fails (.ci/strict_skips.py): the CI machine has every tool these tests need.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / ".ci"))
from strict_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402, F401 (hooks: pytest finds them by name)

# The prompts, in order: what a person answers when they press Enter at each (the default).
PROMPTS = (
    "project_name",
    "project",
    "package",
    "model_name",
    "description",
    "author",
    "framework",
    "inputs",
    "outputs",
    "max_batch_size",
    "streaming",
    "triton_image",
)


def bake(output_dir: Path, **answers: str) -> Path:
    """Generate a project with cookiecutter's API (``--no-input``, ``answers`` over the defaults)."""
    return Path(cookiecutter(str(REPO_ROOT), no_input=True, extra_context=answers, output_dir=str(output_dir)))


def bake_interactively(output_dir: Path, answers: Mapping[str, str]) -> subprocess.CompletedProcess:
    """Run the ``cookiecutter`` command and type ``answers`` at its prompts (Enter for the others).

    Typed answers take the path a person's answers take: cookiecutter does not render them as templates.
    Choice prompts take the option's number.
    """
    unknown = set(answers) - set(PROMPTS)
    assert not unknown, f"not prompts: {unknown}"
    typed = "".join(answers.get(name, "") + "\n" for name in PROMPTS)
    return subprocess.run(
        [sys.executable, "-m", "cookiecutter", str(REPO_ROOT), "--output-dir", str(output_dir)],
        input=typed,
        capture_output=True,
        text=True,
        timeout=300,
    )
