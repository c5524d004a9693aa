"""The lock's pins for one platform: ``requirements.txt`` with its environment markers evaluated there.

``make wheels`` downloads the image's wheels within these pins: pip evaluates a constraint's markers for the
Python that runs pip, not for the ``--python-version`` it downloads for, so the lock itself would pick the
wrong line of a package pinned differently per Python (``numpy==2.2.6 ; python_full_version < '3.11'``).
The container tests compare the image's installed versions with the same pins.

Example::

    python -m tools.image_lock requirements.txt nvcr.io/nvidia/tritonserver:25.01-py3 > build/image-lock.txt
    pins(Path("requirements.txt").read_text(), marker_environment("3.12", "x86_64"))  # {"numpy": "2.3.4"}
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from tools.image_platform import image_platform

__all__ = ["marker_environment", "pins", "main"]


def marker_environment(python: str, machine: str) -> dict[str, str]:
    """PEP 508's marker variables of CPython ``python`` ("3.12" or "3.12.3") on Linux ``machine``.

    A version without its patch level counts as X.Y.0: the lock's markers split at minor versions."""
    parts = python.split(".")
    full = ".".join((parts + ["0"])[:3])
    return {
        "implementation_name": "cpython",
        "implementation_version": full,
        "os_name": "posix",
        "platform_machine": machine,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": full,
        "python_version": ".".join(parts[:2]),
        "sys_platform": "linux",
    }


def pins(lock: str, environment: dict[str, str]) -> dict[str, str]:
    """The lock's ``name==version`` pins whose markers hold in ``environment``: canonical name -> version.

    Raises ValueError naming a line that is no pin, or a package pinned twice for the same environment."""
    found: dict[str, str] = {}
    for number, line in enumerate(lock.splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            requirement = Requirement(text)
        except InvalidRequirement as error:
            raise ValueError(f"line {number} of the lock is no requirement ({error}): {line!r}") from None
        versions = [spec.version for spec in requirement.specifier if spec.operator == "=="]
        if len(versions) != 1:
            raise ValueError(f"line {number} of the lock pins no single version (name==version): {line!r}")
        marker: Marker | None = requirement.marker
        if marker is not None and not marker.evaluate(environment):
            continue
        name = canonicalize_name(requirement.name)
        if name in found:
            raise ValueError(f"line {number} of the lock pins {name} a second time for the same platform")
        found[name] = versions[0]
    return found


def main(argv: list[str] | None = None) -> int:
    """Print the pins of LOCK that apply to IMAGE's Python and machine, one ``name==version`` a line."""
    parser = argparse.ArgumentParser(prog="python -m tools.image_lock", description=main.__doc__)
    parser.add_argument("lock", type=Path, help="the lock (requirements.txt)")
    parser.add_argument("image", help="the base image (BASE_IMAGE): asked for its Python, or NGC's assumed")
    arguments = parser.parse_args(argv)
    try:
        platform = image_platform(arguments.image)
        found = pins(arguments.lock.read_text(), marker_environment(platform.python, platform.machine))
    except (OSError, ValueError) as error:
        print(f"Cannot read the lock's pins for {arguments.image}: {error}", file=sys.stderr)
        return 1
    where = f"Python {platform.python} on {platform.machine}"
    print(f"{len(found)} pins of {arguments.lock} for {where}", file=sys.stderr)
    for name, version in sorted(found.items()):
        print(f"{name}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
