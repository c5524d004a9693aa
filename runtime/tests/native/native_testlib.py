"""What the native backend's tests share (importable from them: conftest puts this directory on sys.path)."""

from __future__ import annotations

import pathlib

__all__ = ["GOLDEN_DIR", "NATIVE_DIR", "SPEC", "spec_constants"]

NATIVE_DIR = pathlib.Path(__file__).resolve().parents[2] / "native"
SPEC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "wire-protocol.md"
GOLDEN_DIR = NATIVE_DIR / "tests" / "golden"


def spec_constants() -> dict[str, int]:
    """The constants block of the wire protocol's specification."""
    text = SPEC.read_text()
    block = text.split("```constants\n", 1)[1].split("```", 1)[0]
    constants = {}
    for line in block.splitlines():
        name, _, value = line.partition(" = ")
        constants[name.strip()] = int(value, 0)
    return constants
