"""Command line of ``python -m loadtests``: parse options, run the load test, map errors to exit codes.

Example::

    python -m loadtests --url http://localhost:8000 --users 8 --duration 30s --p95-ms 50
    python -m loadtests --url grpc://localhost:8001                    # gRPC users: the URL's scheme says so
    python -m loadtests tune --package my_service --model my_service   # see loadtests/tune/cli.py

Run from a generated project's root, the gates not given as options or ``LOADTEST_*`` variables come from its
``deploy/k8s/base/slo.env`` (``--slo-env``), as under ``make loadtest``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from loadtests.errors import LoadTestSetupError
from loadtests.gates import DEFAULT_SLO_ENV, ENV_VARS, Gates, read_env_file

__all__ = ["build_parser", "main", "parse_duration", "protocol_of"]

_SPAN = re.compile(r"^(?:(?P<h>\d+(?:\.\d+)?)h)?(?:(?P<m>\d+(?:\.\d+)?)m)?(?:(?P<s>\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str) -> float:
    """Seconds in a time span such as ``30s``, ``2m``, ``1h30m`` or ``45`` (seconds)."""
    match = _SPAN.match(text.strip())
    if not text.strip() or match is None:
        raise LoadTestSetupError(f"--duration {text!r} is not a time span; use e.g. 30s, 2m or 1h30m")
    seconds = sum(float(match[unit] or 0) * factor for unit, factor in (("h", 3600), ("m", 60), ("s", 1)))
    if seconds <= 0:
        raise LoadTestSetupError(f"--duration {text!r} must be longer than zero")
    return seconds


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than zero")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests",
        description="Load-test a Triton (KServe v2) service with Locust and check SLO gates. "
        "Exit status: 0 all gates held, 1 a gate was missed, 2 the test could not run.",
        epilog="python -m loadtests tune --help: find the batching and instance settings that serve the most "
        "within the SLO (make tune).",
    )
    parser.add_argument(
        "--url",
        required=True,
        help="server address: http://host:8000, or grpc://host:8001 (or host:8001 with --protocol grpc) for gRPC",
    )
    parser.add_argument("--users", type=_positive_int, default=1, help="concurrent users (default 1)")
    parser.add_argument("--duration", default="30s", help="how long to run: 30s, 2m, 1h30m (default 30s)")
    parser.add_argument("--spawn-rate", type=_positive_float, help="users started per second (default: all at once)")
    parser.add_argument("--protocol", choices=["http", "grpc"], help="http, or grpc (default: the URL's scheme)")
    parser.add_argument("--stream", action="store_true", help="gRPC streaming users (decoupled models); implies grpc")
    parser.add_argument("--json", action="store_true", help="HTTP only: send JSON tensors instead of binary")
    parser.add_argument("--samples", help="folder of .npz/.npy request samples instead of random inputs")
    gates = parser.add_argument_group("SLO gates (each also read from the environment variable shown)")
    help_text = {
        "p50_ms": "highest allowed median latency, ms",
        "p95_ms": "highest allowed 95th percentile latency, ms",
        "p99_ms": "highest allowed 99th percentile latency, ms",
        "max_failure_ratio": "highest allowed share of failed requests, 0..1 (default 0)",
        "min_rps": "lowest allowed throughput, requests per second",
    }
    for field, variable in ENV_VARS.items():
        flag = "--" + field.replace("_", "-")
        gates.add_argument(flag, dest=field, type=float, metavar="X", help=f"{help_text[field]} [{variable}]")
    gates.add_argument(
        "--slo-env",
        type=Path,
        metavar="PATH",
        help=f"env file whose LOADTEST_* lines set the gates not given above (default: {DEFAULT_SLO_ENV}, the "
        "project's objectives, when it exists)",
    )
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="report folder (default reports/)")
    parser.add_argument(
        "--locustfile",
        type=Path,
        default=Path("loadtests/locustfile.py"),
        help="default loadtests/locustfile.py",
    )
    parser.add_argument("--ui", action="store_true", help="open Locust's web UI instead of a headless run")
    parser.add_argument("--ui-port", type=_positive_int, default=8089, help="web UI port (default 8089)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["tune"]:
        from loadtests.tune.cli import main as tune

        return tune(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        protocol = protocol_of(args.url, args.protocol, stream=args.stream)
        if args.json and protocol != "http":
            raise LoadTestSetupError("--json selects JSON tensors for HTTP; drop it when testing over gRPC")
        gates = _gates(args)
        from loadtests.runner import RunOptions, run_headless, run_ui  # imports locust: gevent patching

        options = RunOptions(
            url=args.url,
            users=args.users,
            duration_s=parse_duration(args.duration),
            spawn_rate=args.spawn_rate,
            protocol=protocol,
            json_encoding=args.json,
            samples=args.samples,
            gates=gates,
            reports=args.reports,
            locustfile=args.locustfile,
            ui_port=args.ui_port,
        )
        return run_ui(options) if args.ui else run_headless(options)
    except LoadTestSetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def protocol_of(url: str, protocol: str | None, *, stream: bool = False) -> str:
    """The users to run: ``protocol`` when given, else the URL's: gRPC for ``grpc://``, else HTTP; with ``stream``
    gRPC streams. A URL and a protocol that disagree are an error."""
    scheme = url.strip().partition("://")[0].lower() if "://" in url else ""
    if stream and protocol == "http":
        raise LoadTestSetupError("--stream uses gRPC streams; drop --protocol http or use --protocol grpc")
    if scheme == "grpc" and protocol == "http":
        raise LoadTestSetupError(f"--url {url} is a gRPC address: drop --protocol http, or give the HTTP port")
    if stream:
        return "grpc-stream"
    return protocol or ("grpc" if scheme == "grpc" else "http")


def _gates(args: argparse.Namespace) -> Gates:
    """The gates of the options, the environment and slo.env (``--slo-env``, else the project's when present)."""
    path: Path | None = args.slo_env
    if path is None and DEFAULT_SLO_ENV.is_file():
        path = DEFAULT_SLO_ENV
    slo = read_env_file(path) if path is not None else None
    gates = Gates.from_sources({field: getattr(args, field) for field in ENV_VARS}, os.environ, slo, str(path))
    for field, origin in gates.origins.items():  # (said, since neither the command nor its environment says it)
        print(f"gate {ENV_VARS[field]}={getattr(gates, field):g} from {origin}", file=sys.stderr)
    return gates
