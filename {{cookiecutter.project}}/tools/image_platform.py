"""The Python version, glibc version and machine of the service's base image, for the wheels pip takes.

``make wheels`` downloads wheels for it and ``make runtime-wheel`` checks the runtime's wheel against it.
The image is asked (``docker run``, never pulled) when Docker has it locally; otherwise the platform of
NGC tritonserver 25.x is assumed (Python 3.12, glibc 2.39, x86_64) and a note on stderr says so.

Example::

    python -m tools.image_platform nvcr.io/nvidia/tritonserver:25.01-py3        # 3.12 2.39 x86_64
    python -m tools.image_platform --pip-arguments nvcr.io/nvidia/tritonserver:25.01-py3
    # --python-version 3.12 --platform manylinux_2_39_x86_64 ... --platform manylinux1_x86_64
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys

__all__ = ["NGC_TRITONSERVER", "Platform", "image_platform", "main", "probe"]

# The oldest glibc of the manylinux_2_<minor> tags pip is offered: manylinux1 (2.5).
_OLDEST_GLIBC_MINOR = 5
# What the image's python3 prints: "3.12 2.39 x86_64".
_PROBE = (
    'import platform, sys; print("%d.%d" % sys.version_info[:2], platform.libc_ver()[1], platform.machine())'
)
_PLATFORM = re.compile(r"(\d+\.\d+) 2\.(\d+) (\w+)")


@dataclasses.dataclass(frozen=True, slots=True)
class Platform:
    """Where a wheel has to run: Python ``python`` ("3.12"), glibc 2.``glibc_minor``, CPU ``machine``."""

    python: str
    glibc_minor: int
    machine: str

    @classmethod
    def parse(cls, text: str) -> Platform:
        """Read ``"3.12 2.39 x86_64"`` (the probe's output); ValueError names what does not fit."""
        match = _PLATFORM.fullmatch(text.strip())
        if match is None:
            raise ValueError(
                f"expected '<python X.Y> 2.<glibc minor> <machine>' (as '3.12 2.39 x86_64'), got {text!r}"
            )
        return cls(match.group(1), int(match.group(2)), match.group(3))

    def __str__(self) -> str:
        return f"{self.python} 2.{self.glibc_minor} {self.machine}"

    def manylinux_tags(self) -> list[str]:
        """The manylinux platform tags of wheels that run here, newest glibc first."""
        minors = range(self.glibc_minor, _OLDEST_GLIBC_MINOR - 1, -1)
        legacy = ("manylinux2014", "manylinux2010", "manylinux1")
        return [f"manylinux_2_{minor}_{self.machine}" for minor in minors] + [
            f"{tag}_{self.machine}" for tag in legacy
        ]

    def pip_arguments(self) -> list[str]:
        """``pip download`` arguments that pick the wheels of this platform."""
        arguments = ["--python-version", self.python]
        for tag in self.manylinux_tags():
            arguments += ["--platform", tag]
        return arguments


NGC_TRITONSERVER = Platform("3.12", 39, "x86_64")
"""The platform of NGC's tritonserver 25.x images (Ubuntu 24.04), assumed when the image cannot be asked."""


def probe(image: str, docker: str = "docker") -> Platform | None:
    """Ask ``image``'s python3 for its platform; None when Docker is missing or the image is not local."""
    command = [docker, "run", "--rm", "--pull", "never", "--entrypoint", "python3", image, "-c", _PROBE]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError:  # no docker
        return None
    if result.returncode != 0:
        return None
    return Platform.parse(result.stdout)


def image_platform(image: str, docker: str = "docker") -> Platform:
    """``image``'s platform, or NGC tritonserver's when it cannot be asked (with a note on stderr)."""
    found = probe(image, docker)
    if found is not None:
        return found
    print(
        f"{image} is not in the local Docker images (or Docker is not running): assuming NGC tritonserver "
        f"25.x's platform ({NGC_TRITONSERVER}: Python, glibc, machine). Pull or build the image to ask it.",
        file=sys.stderr,
    )
    return NGC_TRITONSERVER


def main(argv: list[str] | None = None) -> int:
    """Print the image's platform (``3.12 2.39 x86_64``), or with --pip-arguments pip's arguments for it."""
    parser = argparse.ArgumentParser(prog="python -m tools.image_platform", description=main.__doc__)
    parser.add_argument("image", help="the base image (BASE_IMAGE)")
    parser.add_argument(
        "--pip-arguments", action="store_true", help="print pip download's --platform arguments"
    )
    arguments = parser.parse_args(argv)
    try:
        platform = image_platform(arguments.image)
    except ValueError as error:
        print(
            f"Cannot read the platform of {arguments.image}: {error}. Check that its python3 runs.",
            file=sys.stderr,
        )
        return 1
    if arguments.pip_arguments:
        print(
            f"Wheels for {arguments.image}: Python {platform.python}, glibc 2.{platform.glibc_minor}, "
            f"{platform.machine}",
            file=sys.stderr,
        )
        print(" ".join(platform.pip_arguments()))
    else:
        print(platform)
    return 0


if __name__ == "__main__":
    sys.exit(main())
