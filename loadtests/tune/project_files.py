"""The project files the tuner reads and writes: the tuning file (``src/<package>/tuning.json``) and slo.env.

Example::

    slo = read_env_file(Path("deploy/k8s/base/slo.env"))          # {"LOADTEST_P95_MS": "100", ...}
    print(diff(Path("src/pkg/tuning.json"), render_tuning({"instances": 2})))
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

from loadtests.errors import LoadTestSetupError
from loadtests.gates import read_env_file  # (slo.env's reading is the gates')

__all__ = ["diff", "read_env_file", "read_tuning", "render_tuning", "with_env_value"]


def read_tuning(path: Path) -> dict[str, Any]:
    """The tuning file's settings; an absent file is empty (the service's defaults)."""
    if not path.is_file():
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise LoadTestSetupError(f"{path} is not valid JSON ({error}); fix or delete it") from None
    if not isinstance(document, dict):
        raise LoadTestSetupError(f"{path} must hold a JSON object of settings; fix or delete it")
    return document


def render_tuning(settings: dict[str, Any]) -> str:
    return json.dumps(settings, indent=2) + "\n"


def with_env_value(text: str, name: str, value: str) -> str:
    """``text`` of an env file with ``name``'s line set to ``value`` (appended when absent)."""
    pattern = re.compile(rf"^{re.escape(name)}=.*$", re.MULTILINE)
    if pattern.search(text):
        return pattern.sub(f"{name}={value}", text, count=1)
    return text + ("" if text.endswith("\n") or not text else "\n") + f"{name}={value}\n"


def diff(path: Path, new_text: str) -> str:
    """A unified diff from ``path``'s current text (empty when absent) to ``new_text``; empty when equal."""
    old_text = path.read_text(encoding="utf-8") if path.is_file() else ""
    lines = difflib.unified_diff(
        old_text.splitlines(keepends=True),
        new_text.splitlines(keepends=True),
        fromfile=f"{path} (now)" if old_text else "/dev/null",
        tofile=f"{path} (tuned)",
    )
    return "".join(lines)
