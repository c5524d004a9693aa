"""Check that the runtime's wheel runs in the base image: its manylinux tag against the image's glibc.

The wheel's ``manylinux_2_<N>_<machine>`` tag names the newest glibc its Triton backend library needs
(runtime/setup.py sets it from the library's symbols). ``make runtime-wheel`` runs this after building
the wheel: a wheel that needs a newer glibc than the image has, or another machine, or that is no
manylinux wheel (its backend library is missing), is removed, so that ``make image`` cannot take it.

Example::

    python -m tools.runtime_wheel dist nvcr.io/nvidia/tritonserver:25.01-py3
    # dist/tritonrt-0.7.0.1-py3-none-manylinux_2_34_x86_64.whl: needs glibc 2.34 or newer; ... has glibc 2.39
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

from tools.image_platform import Platform, image_platform

__all__ = ["WheelCheckError", "WheelNeed", "check", "find_wheel", "main", "wheel_need"]

_MANYLINUX = re.compile(r"manylinux_2_(\d+)_(\w+)")


class WheelCheckError(Exception):
    """The wheel does not run in the image; the message says why and what to do."""


@dataclasses.dataclass(frozen=True, slots=True)
class WheelNeed:
    """What a wheel's platform tag asks of a system: glibc 2.``glibc_minor`` or newer, CPU ``machine``."""

    glibc_minor: int
    machine: str


def wheel_need(wheel: str) -> WheelNeed | None:
    """What the wheel (file name) needs, from its manylinux_2_<N> tags (the oldest glibc of them); None when
    it has none (a pure Python or non-manylinux wheel)."""
    platform_tag = Path(wheel).name.removesuffix(".whl").rsplit("-", 1)[-1]
    needs = [
        WheelNeed(int(match.group(1)), match.group(2))
        for match in map(_MANYLINUX.fullmatch, platform_tag.split("."))
        if match is not None
    ]
    return min(needs, key=lambda need: need.glibc_minor, default=None)


def find_wheel(dist: Path) -> Path:
    """The one tritonrt wheel in ``dist``."""
    wheels = sorted(dist.glob("tritonrt-*.whl"))
    if len(wheels) != 1:
        raise WheelCheckError(
            f"expected one tritonrt wheel in {dist}/, found {len(wheels)}: build it with make runtime-wheel"
        )
    return wheels[0]


def check(wheel: Path, platform: Platform, image: str) -> str:
    """Raise WheelCheckError when ``wheel`` cannot run on ``image``'s ``platform``; else say what it needs."""
    need = wheel_need(wheel.name)
    if need is None:
        raise WheelCheckError(f"{wheel} is not a manylinux wheel: its backend library is missing")
    if need.glibc_minor > platform.glibc_minor or need.machine != platform.machine:
        raise WheelCheckError(
            f"{wheel} needs glibc 2.{need.glibc_minor} on {need.machine}, but {image} has glibc "
            f"2.{platform.glibc_minor} on {platform.machine}: build the backend on a system with glibc "
            f"2.{platform.glibc_minor} or older (e.g. in a container of the base image), or give a library "
            "built there: make runtime-wheel TRITONRT_NATIVE_LIBRARY=<path>"
        )
    return (
        f"{wheel}: needs glibc 2.{need.glibc_minor} or newer; {image} has glibc 2.{platform.glibc_minor} "
        f"on {platform.machine}"
    )


def main(argv: list[str] | None = None) -> int:
    """Check dist/'s runtime wheel against the base image; remove it when it cannot run there."""
    parser = argparse.ArgumentParser(prog="python -m tools.runtime_wheel", description=main.__doc__)
    parser.add_argument("dist", type=Path, help="the folder holding the wheel (dist)")
    parser.add_argument("image", help="the base image (BASE_IMAGE)")
    arguments = parser.parse_args(argv)
    try:
        wheel = find_wheel(arguments.dist)
        try:
            print(check(wheel, image_platform(arguments.image), arguments.image))
        except (WheelCheckError, ValueError):
            wheel.unlink()
            raise
    except (WheelCheckError, ValueError) as error:
        print(f"make runtime-wheel: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
