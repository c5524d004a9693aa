"""The GPU check: bake a `pytorch` service, serve it on the GPU through tritonrt, check it, measure it.

The GPU machine has Python 3.12 with torch (CUDA) and no network, so the check comes in two steps::

    .venv/bin/python bench/gpu_check.py pack                 # here (make gpu-pack): build/gpu-carry/, < 60 MiB
    python3 bench/gpu_check.py run                           # there (make gpu-check), offline
    python3 bench/gpu_check.py run --allow-cpu               # a dry run without a GPU: never reported as one

``pack`` needs the network and the repository's ``.venv`` (tritonrt, pip). It writes to the carry folder:

- ``server.tar.xz``: tritonserver laid out as in NGC's ``/opt/tritonserver`` (``bin/``, ``lib/``), from the
  ``nvidia-pytriton`` wheel that ``tritonrt install-server`` uses. Left out: the Python backend (tritonrt's
  models run in its native backend), the libpython 3.13 the wheel bundles for its 3.13 stub, ``caches/``
  (tritonrt turns on no response cache) and the debug symbols of the server's own binaries (``strip``).
- ``libtriton_tritonrt.so``: tritonrt's native backend (``cargo build --release`` of runtime/native when the
  source tree has no build yet); ``run`` points ``TRITONRT_NATIVE_LIBRARY`` at it, since a baked project
  vendors the backend's sources, not its build.
- ``site.tar.xz``: ``pip install --target`` for CPython 3.12 on manylinux x86_64, no bytecode: the
  runtime's dependencies but numpy (tritonclient[http,grpc], wrapt: the machine's own numpy 2, the one torch
  uses, serves the service), the generated service's and cookiecutter. Unpacked and xz-compressed, it is
  smaller than the same wheels (deflate) would be, and the GPU machine needs no pip run.
- ``manifest.json``: the target Python, the sizes, what was left out.

``run`` extracts the carry into ``build/gpu-check/``, bakes ``framework=pytorch`` there with cookiecutter
and runs ``bench/gpu_service.py`` with ``PYTHONPATH`` = the carried site-packages, the project's ``src/``
and ``runtime/``, ``TRITONRT_SERVER_DIR`` = the carried server and ``TRITONRT_NATIVE_LIBRARY`` = the carried
backend. It exits 0 only when the check passed on CUDA, or on CPU
with ``--allow-cpu`` (printed as a dry run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_CARRY = REPO / "build" / "gpu-carry"
DEFAULT_WORK = REPO / "build" / "gpu-check"
TARGET_PYTHON = "3.12"  # the GPU machine's
LIMIT_MIB = 60  # the device tool carries at most 64 MiB of work tree
# What the carried site-packages hold besides the runtime's own dependencies (read from runtime/pyproject.toml).
EXTRA_PACKAGES = ("cookiecutter>=2.6",)
# The manylinux platforms pip may take wheels for (glibc 2.17 to 2.28 covers every wheel needed here).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64")  # fmt: skip
# Binaries of the server that ship with their symbols; stripping them loses only names in backtraces.
STRIPPED = ("bin/tritonserver", "lib/libtritonserver-*.so")
LIBRARY = "libtriton_tritonrt.so"
_START = time.monotonic()


def progress(message: str) -> None:
    print(f"[gpu-check {time.monotonic() - _START:6.1f}s] {message}", file=sys.stderr, flush=True)


def fail(message: str, status: int = 1) -> None:
    print(f"gpu_check: error: {message}", file=sys.stderr)
    raise SystemExit(status)


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def runtime_requirements() -> list[str]:
    """The runtime's dependencies, as its pyproject.toml lists them."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((REPO / "runtime" / "pyproject.toml").read_text())["project"]["dependencies"]


def write_tar_xz(source: pathlib.Path, archive: pathlib.Path) -> int:
    """``tar | xz -9e`` of ``source``'s content (multi-threaded xz when available); returns the size."""
    with archive.open("wb") as sink:
        tar = subprocess.Popen(["tar", "-C", str(source), "--owner=0", "--group=0", "-cf", "-", "."],
                               stdout=subprocess.PIPE)  # fmt: skip
        xz = subprocess.run(["xz", "-9e", "-T0", "-c"], stdin=tar.stdout, stdout=sink)
        tar.stdout.close()
        if tar.wait() != 0 or xz.returncode != 0:
            fail(f"compressing {source} into {archive} failed (tar and xz are needed)")
    return archive.stat().st_size


def pack_server(staging: pathlib.Path) -> list[str]:
    """tritonserver without what the check does not use (the Python backend among it)."""
    server = staging / "server"
    progress("tritonrt install-server --without-python-backend (from the nvidia-pytriton wheel)")
    command = [sys.executable, "-m", "tritonrt", "install-server", "--dest", str(server),
               "--without-python-backend", "--force"]  # fmt: skip
    if subprocess.run(command).returncode != 0:
        fail("tritonrt install-server failed (its message is above); run pack with the repository's .venv")
    dropped = ["the Python backend, its stubs and the libpython bundled for the 3.13 one (tritonrt's models "
               "do not use them)"]  # fmt: skip
    if (server / "caches").is_dir():
        dropped.append("caches/ (the response cache: tritonrt turns none on)")
        shutil.rmtree(server / "caches")
    before = sum(path.stat().st_size for pattern in STRIPPED for path in server.glob(pattern))
    if shutil.which("strip"):
        subprocess.run(["strip", "--strip-unneeded", *(str(p) for pattern in STRIPPED for p in server.glob(pattern))],
                       check=True)  # fmt: skip
        after = sum(path.stat().st_size for pattern in STRIPPED for path in server.glob(pattern))
        dropped.append(f"debug symbols of {', '.join(STRIPPED)} ({mib(before - after)})")
    return dropped


def pack_library(carry: pathlib.Path) -> int:
    """Copy tritonrt's backend library into the carry (built with cargo first if the tree has none)."""
    native = REPO / "runtime" / "native"
    built = native / "target" / "release" / LIBRARY
    if not built.is_file():
        progress("cargo build --release of runtime/native (tritonrt's backend)")
        if shutil.which("cargo") is None or subprocess.run(["cargo", "build", "--release"], cwd=native).returncode:
            fail(f"no {built} and cargo could not build it: install Rust's cargo (https://rustup.rs)")
    shutil.copyfile(built, carry / LIBRARY)
    return (carry / LIBRARY).stat().st_size


def pack_site(staging: pathlib.Path, python_version: str) -> list[str]:
    """``pip install --target`` of the runtime's dependencies and cookiecutter for ``python_version``."""
    site = staging / "site"
    requirements = [*runtime_requirements(), *EXTRA_PACKAGES]
    progress(f"pip install --target for CPython {python_version} manylinux x86_64: {' '.join(requirements)}")
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(site), "--no-compile",
               "--only-binary=:all:", "--implementation", "cp", "--python-version", python_version,
               *platforms, *requirements]  # fmt: skip
    if subprocess.run(command).returncode != 0:
        fail("pip could not install the carried packages (its message is above); is PyPI reachable?")
    shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts with this machine's shebang
    for numpy in [*site.glob("numpy"), *site.glob("numpy.libs"), *site.glob("numpy-*.dist-info")]:
        shutil.rmtree(numpy)  # the machine's numpy serves: the one its torch was built with
    return [
        "numpy (the GPU machine's own serves)",
        f"bytecode and console scripts of the carried packages ({', '.join(requirements)})",
    ]


def pack(carry: pathlib.Path, python_version: str) -> int:
    carry.mkdir(parents=True, exist_ok=True)
    for old in ("server.tar.xz", "site.tar.xz", LIBRARY, "manifest.json"):
        (carry / old).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-carry-") as tmp:
        staging = pathlib.Path(tmp)
        dropped = pack_server(staging) + pack_site(staging, python_version)
        sizes = {}
        for name in ("server", "site"):
            unpacked = sum(path.stat().st_size for path in (staging / name).rglob("*") if path.is_file())
            progress(f"compressing {name}/ ({mib(unpacked)}) with xz -9e (a minute or two)")
            sizes[f"{name}.tar.xz"] = {
                "unpacked": unpacked,
                "packed": write_tar_xz(staging / name, carry / f"{name}.tar.xz"),
            }
    library = pack_library(carry)
    sizes[LIBRARY] = {"unpacked": library, "packed": library}
    total = sum(entry["packed"] for entry in sizes.values())
    manifest = {"python": python_version, "sizes": sizes, "total": total, "dropped": dropped}
    (carry / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for name, entry in sizes.items():
        print(f"{name:14} {mib(entry['packed']):>10} (unpacked {mib(entry['unpacked'])})")
    print(f"{'total':14} {mib(total):>10} (limit {LIMIT_MIB} MiB) in {carry}")
    print("left out:\n" + "\n".join(f"  - {line}" for line in dropped))
    if total > LIMIT_MIB * 2**20:
        fail(f"the carry is {mib(total)}, over {LIMIT_MIB} MiB: the device tool would not take it")
    return 0


def extract(carry: pathlib.Path, work: pathlib.Path) -> dict:
    """Unpack the carry into ``work`` (once per carry: a marker holds the manifest's hash)."""
    manifest_path = carry / "manifest.json"
    if not manifest_path.is_file():
        fail(f"no carry in {carry}: run `make gpu-pack` (bench/gpu_check.py pack) where PyPI is reachable")
    manifest = json.loads(manifest_path.read_text())
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest["python"] != running:
        fail(f"the carry in {carry} is for Python {manifest['python']}, this is Python {running} "
             f"({sys.executable}): pack with `bench/gpu_check.py pack --python-version {running}`")  # fmt: skip
    digest = hashlib.sha256(manifest_path.read_bytes()).hexdigest()
    marker = work / "carry.sha256"
    if marker.is_file() and marker.read_text() == digest:
        progress(f"the carry is already unpacked in {work}")
        return manifest
    shutil.rmtree(work, ignore_errors=True)
    for name in ("server", "site"):
        progress(f"unpacking {name}.tar.xz into {work / name}")
        with tarfile.open(carry / f"{name}.tar.xz") as archive:
            if hasattr(tarfile, "data_filter"):
                archive.extractall(work / name, filter="data")
            else:  # Python < 3.11.4: the archive is ours
                archive.extractall(work / name)
    marker.write_text(digest)
    return manifest


def bake(work: pathlib.Path, env: dict[str, str]) -> pathlib.Path:
    """The template's ``framework=pytorch`` service, baked into ``work/bake``."""
    output = work / "bake"
    shutil.rmtree(output, ignore_errors=True)
    progress("baking a pytorch service with cookiecutter (framework=pytorch, the other answers default)")
    command = [sys.executable, "-m", "cookiecutter", "--no-input", "--output-dir", str(output), str(REPO),
               "framework=pytorch"]  # fmt: skip
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"cookiecutter failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    (project,) = output.iterdir()
    return project


def run(carry: pathlib.Path, work: pathlib.Path, service_args: list[str]) -> int:
    extract(carry, work)
    site = work / "site"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(":")}
    project = bake(work, env)
    env["PYTHONPATH"] = os.pathsep.join(str(path) for path in (site, project / "src", project / "runtime"))
    env.update(TRITONRT_SERVER_DIR=str(work / "server"), TRITONRT_NO_DOWNLOAD="1",
               TRITONRT_NATIVE_LIBRARY=str((carry / LIBRARY).resolve()))  # fmt: skip
    command = [sys.executable, str(REPO / "bench" / "gpu_service.py"), "--project", str(project), *service_args]
    progress(f"serving {project.name} through tritonrt: {' '.join(command[1:])}")
    return subprocess.run(command, env=env).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    pack_cmd = commands.add_parser("pack", help="write the carry folder (needs the network and .venv)")
    pack_cmd.add_argument("--out", type=pathlib.Path, default=DEFAULT_CARRY)
    pack_cmd.add_argument("--python-version", default=TARGET_PYTHON, help="the GPU machine's Python (3.12)")
    run_cmd = commands.add_parser("run", help="install from the carry folder offline and run the check")
    run_cmd.add_argument("--carry", type=pathlib.Path, default=DEFAULT_CARRY)
    run_cmd.add_argument("--work", type=pathlib.Path, default=DEFAULT_WORK)
    run_cmd.add_argument(
        "--allow-cpu", action="store_true", help="a dry run without CUDA (never reported as a GPU run)"
    )
    run_cmd.add_argument("--seconds", type=float, default=5.0, help="how long each load runs")
    args = parser.parse_args(argv)
    if args.command == "pack":
        return pack(args.out, args.python_version)
    service_args = ["--seconds", str(args.seconds)] + (["--allow-cpu"] if args.allow_cpu else [])
    return run(args.carry, args.work, service_args)


if __name__ == "__main__":
    sys.exit(main())
