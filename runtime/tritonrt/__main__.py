"""The ``tritonrt`` command line: ``tritonrt install-server`` and ``tritonrt server-dir``."""

from __future__ import annotations

import argparse
import pathlib
import sys

from tritonrt.exceptions import PyTritonError
from tritonrt.server import install


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tritonrt", description="tritonrt: Triton Inference Server runtime.")
    commands = parser.add_subparsers(dest="command", required=True)
    install_cmd = commands.add_parser("install-server", help="download and extract tritonserver")
    install_cmd.add_argument("--dest", type=pathlib.Path, help="target directory (default: the user cache)")
    install_cmd.add_argument(
        "--python-version",
        help="the Python version whose Python backend stub goes at the backend's default place, e.g. 3.11 "
        "(default: this one). The stubs of every Python the wheel has are extracted into "
        "backends/python/stubs/<X.Y>/ whatever this says; tritonrt's own models need none",
    )
    install_cmd.add_argument(
        "--without-python-backend",
        action="store_true",
        help="leave Triton's Python backend out (tritonrt's models do not use it; for images and carried installs)",
    )
    install_cmd.add_argument("--force", action="store_true", help="reinstall even if a server is there")
    commands.add_parser("server-dir", help="print the directory of the tritonserver tritonrt would use")
    args = parser.parse_args(argv)
    try:
        if args.command == "install-server":
            if args.python_version and args.without_python_backend:
                parser.error(
                    "--python-version picks the Python backend's default stub and --without-python-backend leaves "
                    "that backend out: give one of them"
                )
            dest = args.dest or install.cache_server_dir()
            if install.is_server_dir(dest) and not args.force:
                print(f"tritonrt: tritonserver already installed in {dest} (use --force to reinstall)")
                return 0
            install.install_server(dest, args.python_version, python_backend=not args.without_python_backend)
        else:
            found = install.find_server_dir()
            if found is None:
                print("no tritonserver found; run `tritonrt install-server`", file=sys.stderr)
                return 1
            print(found)
    except PyTritonError as error:
        print(f"tritonrt: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
