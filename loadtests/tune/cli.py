"""Command line of ``python -m loadtests tune`` (``make tune`` in a generated project).

Example::

    python -m loadtests tune --package my_service --model my_service --budget-min 10 [--apply]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from loadtests.errors import LoadTestSetupError
from loadtests.gates import Gates
from loadtests.tune.load_step import StepOptions
from loadtests.tune.measure import Slo
from loadtests.tune.project_files import read_env_file
from loadtests.tune.report import render_table, write_reports
from loadtests.tune.service_process import Service
from loadtests.tune.space import WORKER_MODES, Space
from loadtests.tune.tuner import TuneOptions, TuneResult, run_tuning

__all__ = ["build_parser", "main"]

T = TypeVar("T")


def _listed(convert: Callable[[str], T], what: str) -> Callable[[str], tuple[T, ...]]:
    def parse(text: str) -> tuple[T, ...]:
        try:
            values = tuple(convert(item.strip()) for item in text.split(",") if item.strip())
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"{text!r}: {error}; give {what}, comma-separated") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r} lists nothing; give {what}, comma-separated")
        return values

    return parse


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{text!r} is not a whole number >= 1")
    return int(text)


def _micros(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a whole number of microseconds >= 0")
    return int(text)


def _switch(text: str) -> bool:
    if text not in ("off", "on"):
        raise ValueError(f"{text!r} is neither off nor on")
    return text == "on"


def _mode(text: str) -> str:
    if text not in WORKER_MODES:
        raise ValueError(f"{text!r} is not a worker mode ({', '.join(WORKER_MODES)})")
    return text


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than zero")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests tune",
        description="Serve the service with candidate batching and instance settings, load each at rising users "
        "until the SLO breaks, and report the setting that sustains the most requests per second within it.",
    )
    parser.add_argument("--package", required=True, help="the service's package: the tuner runs python -m PACKAGE")
    parser.add_argument("--model", required=True, help="the model to measure (its name on the server)")
    parser.add_argument("--tuning-file", type=Path, help="default src/PACKAGE/tuning.json")
    parser.add_argument("--slo-env", type=Path, default=Path("deploy/k8s/base/slo.env"), help="default %(default)s")
    parser.add_argument("--budget-min", type=_positive, default=10.0, help="the whole run's time (default 10)")
    parser.add_argument("--apply", action="store_true", help="write the winner into the tuning file and slo.env")
    space = parser.add_argument_group("what is varied (comma-separated values; the current setting is always one)")
    space.add_argument("--max-batch-sizes", type=_listed(_count, "sizes >= 1"), default=(8, 16, 32, 64, 128))
    space.add_argument("--queue-delays-us", type=_listed(_micros, "microseconds"), default=(0, 100, 1000, 5000))
    space.add_argument(
        "--preferred", type=_listed(_switch, "off and/or on"), default=(False, True), help="prefer full batches"
    )
    space.add_argument("--instances", type=_listed(_count, "counts >= 1"), default=(1, 2, 4))
    space.add_argument(
        "--modes",
        type=_listed(_mode, "thread and/or process"),
        default=("thread", "process"),
        help="worker modes (the service's WORKERS setting); default thread,process (searched with --instances)",
    )
    load = parser.add_argument_group("load")
    load.add_argument("--step-s", type=_positive, default=5.0, help="seconds per load step (default 5)")
    load.add_argument("--start-users", type=_count, default=1, help="users of the first step (default 1)")
    load.add_argument("--max-users", type=_count, default=64, help="the most users a step has (default 64)")
    load.add_argument("--p95-ms", type=_positive, help="p95 objective, ms [LOADTEST_P95_MS, else slo.env's]")
    load.add_argument("--max-failure-ratio", type=float, help="allowed failed share [LOADTEST_MAX_FAILURE_RATIO]")
    load.add_argument("--samples", help="folder of .npz/.npy request samples instead of random inputs")
    load.add_argument("--locustfile", type=Path, default=Path("loadtests/locustfile.py"), help="default %(default)s")
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="report folder (default reports/)")
    return parser


def _slo(args: argparse.Namespace) -> Slo:
    gates = Gates.from_sources({"p95_ms": args.p95_ms, "max_failure_ratio": args.max_failure_ratio}, os.environ)
    p95 = gates.p95_ms
    if p95 is None and args.slo_env.is_file():
        text = read_env_file(args.slo_env).get("LOADTEST_P95_MS", "")
        p95 = float(text) if text.replace(".", "", 1).isdigit() else None
    if p95 is None or p95 <= 0:
        raise LoadTestSetupError(f"no p95 objective: set LOADTEST_P95_MS in {args.slo_env} or pass --p95-ms")
    return Slo(p95_ms=p95, max_failure_ratio=gates.max_failure_ratio or 0.0)


def _options(args: argparse.Namespace) -> TuneOptions:
    if not args.locustfile.is_file():
        raise LoadTestSetupError(f"no locustfile at {args.locustfile}; run from the project root or pass --locustfile")
    tuning_file = args.tuning_file or Path("src") / args.package.replace(".", "/") / "tuning.json"
    space = Space(
        max_batch_size=args.max_batch_sizes,
        max_queue_delay_us=args.queue_delays_us,
        preferred=args.preferred,
        instances=args.instances,
        workers=args.modes,
    )
    return TuneOptions(
        service=Service.of(args.package, args.model),
        space=space,
        slo=_slo(args),
        step=StepOptions(locustfile=args.locustfile, duration_s=args.step_s, samples=args.samples),
        budget_s=args.budget_min * 60.0,
        tuning_file=tuning_file,
        slo_env=args.slo_env,
        reports=args.reports,
        start_users=args.start_users,
        max_users=args.max_users,
    )


def _finish(options: TuneOptions, result: TuneResult, apply: bool) -> None:
    outcome = result.outcome
    print(render_table(outcome), flush=True)
    paths = write_reports(options.reports, outcome)
    print(f"reports: {', '.join(str(path) for path in paths)}")
    if outcome.winner is None:
        return
    if outcome.winner == outcome.baseline:
        print(f"The current settings ({outcome.winner.label}) are the best found.")
    else:
        print(f"The winner: {outcome.winner.label}.")
    print("\n".join(outcome.reasoning))
    if not outcome.diff:
        print("Nothing to change.")
        return
    print(outcome.diff, end="")
    if not apply:
        print("make tune APPLY=1 (or --apply) writes this.")
        return
    for path, text in ((options.tuning_file, result.tuning_text), (options.slo_env, result.slo_env_text)):
        if text is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")


def main(argv: Sequence[str] | None = None) -> int:
    """0 when the run finished (or was stopped and reported), 2 when it could not run."""
    args = build_parser().parse_args(argv)
    try:
        options = _options(args)
        result = run_tuning(options)
        _finish(options, result, args.apply)
        return 0
    except LoadTestSetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
