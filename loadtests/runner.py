"""Run a locustfile in this process with Locust's library API: headless with SLO gates, or the web UI.

Example::

    options = RunOptions(url="http://localhost:8000", users=4, duration_s=30)
    exit_code = run_headless(options)   # 0 when every gate held, 1 when one was missed
"""

from __future__ import annotations

# locust first: importing it monkey-patches the standard library for gevent before anything else loads.
import locust  # isort: skip

import argparse
import dataclasses
import gc
import signal
import sys
import time
from pathlib import Path

import gevent
import gevent.event
from locust.env import Environment
from locust.log import setup_logging
from locust.runners import LocalRunner
from locust.stats import RequestStats, StatsEntry, stats_history
from locust.util.load_locustfile import load_locustfile

from loadtests.errors import LoadTestSetupError
from loadtests.gates import Figures, Gates, evaluate, passed, render_table
from loadtests.model_user import TTFR_REQUEST_TYPE
from loadtests.reports import write_reports
from loadtests.timeline import Timeline

PROGRESS_INTERVAL_S = 5
STOP_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """One load test: where, how hard, how long, which users, which gates, where the reports go."""

    url: str
    users: int = 1
    duration_s: float = 30.0
    spawn_rate: float | None = None
    protocol: str = "http"  # "http", "grpc" or "grpc-stream"
    json_encoding: bool = False
    samples: str | None = None
    gates: Gates = dataclasses.field(default_factory=Gates)
    reports: Path = Path("reports")
    locustfile: Path = Path("loadtests/locustfile.py")
    ui_port: int = 8089

    @property
    def host(self) -> str:
        """The URL as the selected users expect it: ``http(s)://host:port`` for HTTP, ``host:port`` for gRPC."""
        url = self.url.strip().rstrip("/")
        scheme, _, rest = url.rpartition("://")
        if self.protocol == "http":
            if scheme not in ("", "http", "https"):
                raise LoadTestSetupError(f"--url {self.url} must be an http:// or https:// address for HTTP")
            return url if scheme else f"http://{url}"
        if scheme not in ("", "grpc", "http") or "/" in rest:
            raise LoadTestSetupError(f"--url {self.url} must be host:port (or grpc://host:port) for gRPC")
        return rest


def user_classes(options: RunOptions) -> list[type[locust.User]]:
    """The locustfile's user classes whose ``protocol`` is the one asked for, with CLI overrides applied."""
    if not options.locustfile.is_file():
        raise LoadTestSetupError(
            f"no locustfile at {options.locustfile}; run from the project root or pass --locustfile PATH"
        )
    found = load_locustfile(str(options.locustfile))[-2]  # (classes, shapes); older Locust: (doc, classes, shapes)
    selected = [cls for cls in found.values() if getattr(cls, "protocol", None) == options.protocol]
    if not selected:
        names = ", ".join(f"{n} ({getattr(c, 'protocol', 'no protocol')})" for n, c in found.items()) or "none"
        raise LoadTestSetupError(
            f"{options.locustfile} has no user class for protocol '{options.protocol}' (found: {names}); "
            "derive one from KServeHttpUser, TritonGrpcUser or TritonGrpcStreamUser"
        )
    for cls in selected:
        if options.json_encoding:
            cls.binary = False
        if options.samples:
            cls.samples = options.samples
    return selected


def _environment(options: RunOptions, classes: list[type[locust.User]], **extra: object) -> Environment:
    host = options.host
    for cls in classes:
        progress(f"checking {cls.__name__}: model '{getattr(cls, 'model_name', '?')}' at {host}")
        prepare = getattr(cls, "prepare", None)
        if prepare is not None:
            prepare(host)
    return Environment(
        user_classes=classes,
        host=host,
        events=locust.events,
        locustfile=str(options.locustfile),
        stop_timeout=STOP_TIMEOUT_S,
        **extra,
    )


def run_headless(options: RunOptions) -> int:
    """Run for ``duration_s``, print the gate table, write reports; 0 when all gates held, else 1."""
    setup_logging("WARNING")
    environment = _environment(options, user_classes(options))
    runner = environment.create_local_runner()
    environment.events.init.fire(environment=environment, runner=runner, web_ui=None)

    start = time.monotonic()
    timeline = Timeline(start)

    def record(request_type: str, response_time: float, exception: object, **_: object) -> None:
        if request_type != TTFR_REQUEST_TYPE:
            timeline.record(time.monotonic(), response_time or 0.0, exception is not None)

    environment.events.request.add_listener(record)
    _drive(runner, options, timeline, start)
    until = time.monotonic()
    environment.events.quitting.fire(environment=environment, reverse=True)
    gc.collect()  # free stopped users' gRPC clients while the event loop runs (see TritonGrpcUser.on_stop)

    figures = _figures(environment, runner, until - start)
    checks = evaluate(options.gates, figures)
    print(render_table(checks), flush=True)
    for line in failure_lines(environment.stats):
        print(line, flush=True)
    models = ", ".join(sorted({getattr(c, "model_name", c.__name__) for c in environment.user_classes}))
    title = f"{models} @ {options.host}"
    paths = write_reports(options.reports, environment, timeline, until, checks, figures, title, options.gates.p95_ms)
    print(f"reports: {', '.join(str(p) for p in paths)}", flush=True)
    ok = passed(checks)
    print("all gates passed" if ok else "GATES MISSED: see the FAIL rows above", flush=True)
    return 0 if ok else 1


def _drive(runner: LocalRunner, options: RunOptions, timeline: Timeline, start: float) -> None:
    """Start the users, print progress, and return once they stopped: after ``duration_s`` or Ctrl-C/SIGTERM."""
    done = gevent.event.Event()

    def stop(*_: object) -> None:
        if not done.is_set():
            progress("stopping: waiting for requests in flight")
            runner.quit()
            done.set()

    spawn_rate = options.spawn_rate or float(options.users)
    names = ", ".join(c.__name__ for c in runner.user_classes)
    progress(
        f"starting {options.users} user(s) at {spawn_rate:g}/s against {options.host} "
        f"for {options.duration_s:g}s ({names})"
    )
    background = [
        gevent.spawn(stats_history, runner),
        gevent.spawn(_report_progress, runner, timeline, start, options.duration_s),
    ]
    watchers = [gevent.signal_handler(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)]
    runner.start(options.users, spawn_rate)
    gevent.spawn_later(options.duration_s, stop)
    done.wait()
    for watcher in watchers:
        watcher.cancel()
    gevent.killall(background)


def failure_lines(stats: RequestStats, most: int = 5) -> list[str]:
    """What failed, most frequent first (at most ``most`` kinds), so a missed failure gate says why on the
    terminal and in CI logs, not only in the failures CSV."""
    errors = sorted(stats.errors.values(), key=lambda error: -error.occurrences)
    if not errors:
        return []
    lines = [f"failures ({sum(e.occurrences for e in errors)} in {len(errors)} kind(s), most frequent first):"]
    lines += [f"  {e.occurrences} x {e.method} {e.name}: {e.error}" for e in errors[:most]]
    if len(errors) > most:
        lines.append(f"  ... and {len(errors) - most} more kind(s): see the failures CSV")
    return lines


def _gated(stats: RequestStats) -> StatsEntry:
    """All entries the gates judge (every request type but time-to-first-response) merged into one."""
    entry = StatsEntry(stats, "gated", "")
    for item in stats.entries.values():
        if item.method != TTFR_REQUEST_TYPE:
            entry.extend(item)
    return entry


def _figures(environment: Environment, runner: LocalRunner, elapsed_s: float) -> Figures:
    entry = _gated(environment.stats)
    return Figures(
        requests=entry.num_requests,
        failures=entry.num_failures,
        p50_ms=float(entry.get_response_time_percentile(0.50) or 0),
        p95_ms=float(entry.get_response_time_percentile(0.95) or 0),
        p99_ms=float(entry.get_response_time_percentile(0.99) or 0),
        rps=entry.num_requests / elapsed_s if elapsed_s > 0 else 0.0,
        user_errors=sum(row["count"] for row in runner.exceptions.values()),
    )


def _report_progress(runner: LocalRunner, timeline: Timeline, start: float, duration_s: float) -> None:
    """Every second note the user count; every few seconds print one progress line."""
    ticks = 0
    while True:
        gevent.sleep(1)
        ticks += 1
        now = time.monotonic()
        timeline.set_users(now, runner.user_count)
        elapsed = now - start
        if ticks % PROGRESS_INTERVAL_S == 0 and elapsed < duration_s:
            entry = _gated(runner.stats)
            progress(
                f"[{elapsed:5.0f}s/{duration_s:g}s] users {runner.user_count}  requests {entry.num_requests}  "
                f"failures {entry.num_failures}  rps {entry.num_requests / elapsed:.1f}  "
                f"p95 {entry.get_response_time_percentile(0.95) or 0} ms"
            )


def run_ui(options: RunOptions) -> int:
    """Serve Locust's web UI for the selected users until Ctrl-C; the UI starts and stops the load."""
    setup_logging("INFO")
    # The web UI parses sys.argv with Locust's own parser on every page load; ours has other options.
    sys.argv = sys.argv[:1]
    # What the UI's start form shows: the users and spawn rate asked for, no time limit.
    defaults = argparse.Namespace(
        num_users=options.users,
        spawn_rate=options.spawn_rate or float(options.users),
        run_time=None,
        stats_history_enabled=False,
    )
    environment = _environment(options, user_classes(options), parsed_options=defaults)
    runner = environment.create_local_runner()
    web_ui = environment.create_web_ui(host="127.0.0.1", port=options.ui_port, delayed_start=True)
    environment.events.init.fire(environment=environment, runner=runner, web_ui=web_ui)
    web_ui.start()
    while not (getattr(web_ui, "server", None) and web_ui.server.started):  # listening before we say so
        if web_ui.greenlet.dead:
            raise LoadTestSetupError(
                f"cannot serve the web UI on port {options.ui_port} ({web_ui.greenlet.exception}); "
                "pick another with --ui-port"
            )
        gevent.sleep(0.05)
    history = gevent.spawn(stats_history, runner)
    progress(f"Locust web UI at http://127.0.0.1:{options.ui_port} (Ctrl-C to quit)")
    done = gevent.event.Event()
    watchers = [gevent.signal_handler(sig, done.set) for sig in (signal.SIGINT, signal.SIGTERM)]
    done.wait()
    for watcher in watchers:
        watcher.cancel()
    history.kill()
    runner.quit()
    web_ui.stop()
    gc.collect()  # as in run_headless
    return 0


def progress(message: str) -> None:
    """One progress line on stderr (stdout carries the results)."""
    print(message, file=sys.stderr, flush=True)
