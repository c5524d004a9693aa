#!/usr/bin/env python3
"""Build a CPU stand-in for the NGC ``nvcr.io/nvidia/tritonserver:<tag>-py3`` image, from packages only.

The NGC image cannot be pulled here (or in an air-gapped site), yet a generated service's Dockerfile must
be built and run in tests. This script makes an image with the same layout:

- a Debian root filesystem (``debootstrap``, from the apt mirror this host already uses) with ``python3``,
  pip and CA certificates: ``--suite bookworm`` (Python 3.11, the default) or ``--suite trixie``
  (Python 3.13), the two ends of the Pythons NGC's images span;
- what NGC's image has that a service's Dockerfile meets: the ``triton-server`` user (uid and gid 1000)
  and the system Python's PEP 668 mark (``EXTERNALLY-MANAGED``, Debian's own);
- tritonserver extracted by ``tritonrt install-server`` into ``/opt/tritonserver`` (``bin/``, ``lib/``,
  ``backends/``, ``caches/``), without the Python backend: tritonrt serves every model through its own
  backend, so the stand-in leaves out what NGC has only for the Python backend (``backends/python``, the
  shared ``libpython3.X``), and a service image that still relied on it fails here;
- ``docker import``, then a check that tritonserver starts in it.

It is tagged ``tritonrt/tritonserver-cpu:<Triton version>`` (bookworm) or ``...:<Triton version>-trixie``
and labelled with a hash of its recipe (this file, the suite and the tritonserver wheel version): a second
run finds the labelled image and does nothing, so it is rebuilt only when missing or when the recipe
changes. Progress goes to stderr; the image tag is the one
line on stdout. Needs root (debootstrap) and a Docker engine; installs debootstrap with apt if missing.

Usage::

    BASE_IMAGE=$(python docker/build_stand_in_base.py)   # build once, then reuse
    BASE_IMAGE=$(python docker/build_stand_in_base.py --suite trixie)   # Python 3.13
    docker build --build-arg BASE_IMAGE=$BASE_IMAGE my-service/
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from typing import NoReturn

IMAGE_REPOSITORY = "tritonrt/tritonserver-cpu"
RECIPE_LABEL = "org.tritonrt.stand-in.recipe"
SUITE_LABEL = "org.tritonrt.stand-in.suite"
# Debian suite -> its python3's version. bookworm is the default; trixie has the newest Python NGC's range
# reaches for (NGC 25.x: Ubuntu 24.04, Python 3.12).
SUITES = {"bookworm": "3.11", "trixie": "3.13"}
DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# NGC's image has this user (uid and gid 1000) for running tritonserver as non-root: a Dockerfile that
# takes uid 1000 for its own user clashes with it there, and here too.
NGC_USER = "triton-server"
NGC_USER_ID = 1000
# Left out of the image: package caches and lists (NGC clears them too), docs and manuals.
SLIM_PATHS = ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info")
NGC_ENTRYPOINT = "opt/nvidia/nvidia_entrypoint.sh"
# NGC's entrypoint checks the driver and sets up CUDA, then runs its arguments (a shell without any).
# The stand-in has no GPU to set up: it keeps the path and the contract, so images that chain it run here.
NGC_ENTRYPOINT_SCRIPT = """#!/bin/sh
# Stand-in for NGC's entrypoint (no GPU set-up here): run the command, or a shell without one.
[ "$#" -eq 0 ] && exec /bin/bash
exec "$@"
"""
IMAGE_CHANGES = (
    "ENV PATH=/opt/tritonserver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    f"ENV TRITON_SERVER_USER={NGC_USER}",
    "WORKDIR /opt/tritonserver",
    f'ENTRYPOINT ["/{NGC_ENTRYPOINT}"]',
)
_SERVER_VERSION = re.compile(r"\|\s*server_version\s*\|\s*([0-9][0-9.]*)\s*\|")
_START = time.monotonic()


def progress(message: str) -> None:
    """Print one progress line to stderr, with the seconds since the script started."""
    print(f"[stand-in base {time.monotonic() - _START:6.1f}s] {message}", file=sys.stderr, flush=True)


def fail(message: str) -> NoReturn:
    """Stop with a message that says what went wrong and what to do."""
    print(f"build_stand_in_base: error: {message}", file=sys.stderr)
    raise SystemExit(1)


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run ``command``; on failure stop with its output so the cause is visible."""
    result = subprocess.run(command, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)
    if result.returncode != 0:
        fail(f"`{' '.join(command)}` exited {result.returncode}:\n{result.stdout[-4000:]}")
    return result


def server_wheel_version() -> str:
    """The ``nvidia-pytriton`` wheel version ``tritonrt install-server`` extracts tritonserver from."""
    try:
        from tritonrt.server.install import WHEEL_VERSION
    except ImportError:
        fail(f"tritonrt is not importable by {sys.executable}: run this script with the Python that has the "
             "runtime installed (pip install ./runtime).")  # fmt: skip
    return WHEEL_VERSION


def packages(suite: str) -> tuple[str, ...]:
    """The Debian packages of the image: what NGC's image provides and a service image relies on.

    No python3-venv and no curl: the generated Dockerfile must not need them, so the stand-in does not offer
    them either. No shared libpython (NGC has it for the Python backend's stub, which tritonrt does not use).
    passwd gives useradd.
    """
    return ("python3", "python3-pip", "ca-certificates", "passwd")


def image_tag(version: str, suite: str) -> str:
    """``tritonrt/tritonserver-cpu:2.51.0`` for the default suite, ``...:2.51.0-trixie`` for another."""
    return f"{IMAGE_REPOSITORY}:{version}" + ("" if suite == DEFAULT_SUITE else f"-{suite}")


def recipe_hash(recipe: bytes, wheel_version: str, suite: str = DEFAULT_SUITE) -> str:
    """A short hash of what decides the image's content: this script's text, the suite, the server wheel."""
    return hashlib.sha256(recipe + b"\0" + wheel_version.encode() + b"\0" + suite.encode()).hexdigest()[:16]


def find_cached_image(recipe: str) -> str | None:
    """The ``tritonrt/tritonserver-cpu:<version>`` tag of an image built from ``recipe``, if any."""
    listing = run(["docker", "images", "--filter", f"label={RECIPE_LABEL}={recipe}",
                   "--format", "{{.Repository}}:{{.Tag}}"]).stdout  # fmt: skip
    tags = [line for line in listing.split() if line.startswith(IMAGE_REPOSITORY + ":")]
    return tags[0] if tags else None


def apt_mirror(apt_dir: pathlib.Path = pathlib.Path("/etc/apt")) -> str:
    """The first Debian mirror apt on this host uses (one-line or deb822 sources).

    A source of one of :data:`SUITES` counts (a mirror that serves bookworm serves trixie too); Debian's own
    mirror otherwise.
    """
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    files += sorted((apt_dir / "sources.list.d").glob("*.sources"))
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text()
        for line in text.splitlines():
            fields = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()  # without [options]
            if fields[:1] == ["deb"] and len(fields) >= 3 and fields[2] in SUITES:
                return fields[1].rstrip("/")
        for stanza in re.split(r"\n\s*\n", text):
            entries = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, flags=re.MULTILINE))
            if "deb" in entries.get("Types", "").split() and set(SUITES) & set(entries.get("Suites", "").split()):
                return entries["URIs"].split()[0].rstrip("/")
    return DEFAULT_MIRROR


def ensure_debootstrap() -> None:
    """Install debootstrap with apt when it is missing."""
    if shutil.which("debootstrap"):
        return
    progress("installing debootstrap with apt-get")
    run(["apt-get", "update"])
    run(["apt-get", "install", "-y", "--no-install-recommends", "debootstrap"])


def bootstrap_rootfs(rootfs: pathlib.Path, mirror: str, suite: str) -> None:
    """A minimal Debian ``suite`` root filesystem with :func:`packages`, without package caches or docs."""
    progress(f"debootstrap {suite} from {mirror} (a few minutes)")
    run(["debootstrap", "--variant=minbase", f"--include={','.join(packages(suite))}", suite, str(rootfs), mirror])
    for relative in SLIM_PATHS:
        target = rootfs / relative
        if target.exists():
            shutil.rmtree(target)
            target.mkdir(parents=True)


def add_ngc_entrypoint(rootfs: pathlib.Path) -> None:
    """Write :data:`NGC_ENTRYPOINT_SCRIPT` where NGC images have their entrypoint."""
    path = rootfs / NGC_ENTRYPOINT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(NGC_ENTRYPOINT_SCRIPT)
    path.chmod(0o755)


def add_ngc_user(rootfs: pathlib.Path) -> None:
    """Create NGC's ``triton-server`` user and group (uid and gid 1000), as NGC's image has them."""
    run(["chroot", str(rootfs), "useradd", "--uid", str(NGC_USER_ID), "--user-group", NGC_USER])


def install_server(rootfs: pathlib.Path, suite: str) -> None:
    """Extract tritonserver into ``rootfs/opt/tritonserver``, without the Python backend."""
    dest = rootfs / "opt" / "tritonserver"
    progress("tritonrt install-server --dest /opt/tritonserver --without-python-backend")
    command = [sys.executable, "-m", "tritonrt", "install-server", "--dest", str(dest),
               "--without-python-backend", "--force"]  # fmt: skip
    if subprocess.run(command).returncode != 0:
        fail("`tritonrt install-server` failed (its message is above).")
    # As in NGC's image: the server is root's, readable and runnable by the service's non-root user.
    subprocess.run(["chmod", "-R", "a+rX", str(dest)], check=True)


def import_image(rootfs: pathlib.Path, recipe: str, wheel_version: str, suite: str) -> str:
    """``docker import`` the root filesystem; returns the new image's id."""
    progress("docker import")
    labels = [f"LABEL {RECIPE_LABEL}={recipe} {SUITE_LABEL}={suite} "
              f"org.tritonrt.stand-in.server-wheel=nvidia-pytriton=={wheel_version}"]  # fmt: skip
    changes = [arg for change in (*IMAGE_CHANGES, *labels) for arg in ("--change", change)]
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", "-", "."], stdout=subprocess.PIPE)
    imported = subprocess.run(["docker", "import", *changes, "-"], stdin=tar.stdout, capture_output=True, text=True)
    tar.stdout.close()
    if tar.wait() != 0 or imported.returncode != 0:
        fail(f"docker import failed: {imported.stderr.strip()}")
    return imported.stdout.strip()


# Run in the new image: NGC's user and the system Python's PEP 668 mark are there, as in NGC's image.
NGC_LIKENESS_CHECK = f"""set -e
ids="$(id -u {NGC_USER}):$(id -g {NGC_USER})"
test "$ids" = "{NGC_USER_ID}:{NGC_USER_ID}" || {{ echo "{NGC_USER} is $ids, not {NGC_USER_ID}:{NGC_USER_ID}"; exit 1; }}
mark=$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED
test -f "$mark" || {{ echo "no PEP 668 mark $mark"; exit 1; }}
"""


def verify_image(image: str) -> str:
    """Check NGC's user and PEP 668 mark are there and tritonserver starts in ``image``; returns its version."""
    progress("checking the image: triton-server user, PEP 668 mark, tritonserver starts")
    run(["docker", "run", "--rm", image, "sh", "-c", NGC_LIKENESS_CHECK])
    name = f"stand-in-check-{uuid.uuid4().hex[:8]}"
    command = ["docker", "run", "--rm", "--name", name, "-e", "LD_LIBRARY_PATH=/opt/tritonserver/lib", image,
               "tritonserver", "--model-repository=/tmp", "--allow-http=false", "--allow-grpc=false",
               "--allow-metrics=false"]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    try:
        for line in server.stdout:
            seen.append(line)
            match = _SERVER_VERSION.search(line)
            if match:
                return match.group(1)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        server.wait()
    fail("tritonserver did not start in the stand-in image:\n" + "".join(seen[-40:]))


def build(recipe: str, wheel_version: str, suite: str) -> str:
    """Build, check and tag the stand-in image of ``suite``; returns its tag."""
    if os.geteuid() != 0:
        fail("building the stand-in needs root (debootstrap, apt-get, chroot): run this script with sudo.")
    ensure_debootstrap()
    mirror = apt_mirror()
    with tempfile.TemporaryDirectory(prefix="stand-in-rootfs-", dir="/var/tmp") as tmp:
        rootfs = pathlib.Path(tmp) / "rootfs"
        bootstrap_rootfs(rootfs, mirror, suite)
        add_ngc_entrypoint(rootfs)
        add_ngc_user(rootfs)
        install_server(rootfs, suite)
        image = import_image(rootfs, recipe, wheel_version, suite)
    tag = image_tag(verify_image(image), suite)
    previous = subprocess.run(["docker", "images", "-q", tag], capture_output=True, text=True).stdout.strip()
    run(["docker", "tag", image, tag])
    if previous and not image.endswith(previous):
        # The image this one replaces; docker keeps it while images built on it still exist.
        subprocess.run(["docker", "rmi", previous], capture_output=True)
    return tag


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if an image of this recipe exists")
    parser.add_argument("--suite", choices=sorted(SUITES), default=DEFAULT_SUITE,
                        help="Debian suite: bookworm (Python 3.11, the default) or trixie (Python 3.13)")  # fmt: skip
    args = parser.parse_args(argv)
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        fail("no Docker engine answers (`docker info` failed): start Docker, then run this again.")
    wheel_version = server_wheel_version()
    recipe = recipe_hash(pathlib.Path(__file__).read_bytes(), wheel_version, args.suite)
    cached = None if args.force else find_cached_image(recipe)
    if cached:
        progress(f"{cached} is up to date (recipe {recipe})")
        tag = cached
    else:
        progress(f"building the {args.suite} stand-in base image (recipe {recipe})")
        tag = build(recipe, wheel_version, args.suite)
        progress(f"built {tag}")
    print(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
