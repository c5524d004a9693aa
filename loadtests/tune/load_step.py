"""One load step: ``python -m loadtests`` in a subprocess for a few seconds at a user count; its figures back.

Each step is its own process (Locust's gevent patching and global event hooks stay out of the tuner) in a
session of its own (Ctrl+C reaches the tuner, which ends the step). It writes its usual reports into the
step's folder; the figures come from ``loadtest_summary.json``.

Example::

    options = StepOptions(locustfile=Path("loadtests/locustfile.py"), duration_s=5)
    figures = run_load_step(options, "http://127.0.0.1:8000", users=8, reports=Path("reports/tune/steps/1"))
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from loadtests.errors import LoadTestSetupError
from loadtests.gates import Figures
from loadtests.tune.interrupts import deferred_interrupt, stop_child

__all__ = ["STEP_GRACE_S", "StepOptions", "run_load_step"]

# What a step may take beyond its duration (start-up, the model's config, reports) before it is ended.
STEP_GRACE_S = 60.0


@dataclasses.dataclass(frozen=True, slots=True)
class StepOptions:
    """What every step shares: the users' locustfile, how long each runs, the samples sent (None: random)."""

    locustfile: Path
    duration_s: float = 5.0
    samples: str | None = None
    python: str = sys.executable


def run_load_step(options: StepOptions, url: str, users: int, reports: Path) -> Figures:
    """Run ``users`` users against ``url`` for the step's duration; raise LoadTestSetupError if it cannot run."""
    command = [
        options.python,
        "-m",
        "loadtests",
        "--url",
        url,
        "--users",
        str(users),
        "--duration",
        f"{options.duration_s:g}s",
        "--locustfile",
        str(options.locustfile),
        "--reports",
        str(reports),
        "--max-failure-ratio",
        "1",
    ]
    if options.samples:
        command += ["--samples", options.samples]
    environ = {key: value for key, value in os.environ.items() if not key.startswith("LOADTEST_")}
    reports.mkdir(parents=True, exist_ok=True)
    log_path = reports / "step.log"
    with open(log_path, "wb") as log:
        process: subprocess.Popen[bytes] | None = None
        try:
            with deferred_interrupt():
                process = subprocess.Popen(
                    command,
                    env=environ,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            returncode = process.wait(options.duration_s + STEP_GRACE_S)
        except subprocess.TimeoutExpired:
            assert process is not None
            _end(process)
            raise LoadTestSetupError(
                f"a load step of {options.duration_s:g} s ran past {options.duration_s + STEP_GRACE_S:.0f} s; "
                f"see {log_path}"
            ) from None
        except BaseException:
            if process is not None:
                _end(process)
            raise
    summary = reports / "loadtest_summary.json"
    if returncode not in (0, 1) or not summary.is_file():
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-1500:]
        raise LoadTestSetupError(f"the load step could not run (exit status {returncode}):\n{tail}")
    figures = json.loads(summary.read_text(encoding="utf-8"))["figures"]
    figures.pop("failure_ratio", None)
    return Figures(**figures)


def _end(process: subprocess.Popen[bytes]) -> None:
    """Stop a step: SIGINT lets Locust stop its users; SIGKILL if it does not exit soon."""
    stop_child(process, signal.SIGINT, timeout_s=15)
