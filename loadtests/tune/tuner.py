"""The tuning run: measure the project's current settings, search from there within the budget, report.

Example::

    outcome = run_tuning(options)   # prints progress, the table, the diff and the reasoning
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from loadtests.errors import LoadTestSetupError
from loadtests.tune.load_step import StepOptions, run_load_step
from loadtests.tune.measure import Measurement, Slo, Step, climb
from loadtests.tune.objectives import derive_queue_target, lighter_loads_unmeasured
from loadtests.tune.project_files import diff, read_tuning, render_tuning, with_env_value
from loadtests.tune.reload import override, reloadable
from loadtests.tune.report import TuneOutcome
from loadtests.tune.search import better, coordinate_search
from loadtests.tune.service_process import Service, ServiceFailed, ServiceProcess
from loadtests.tune.space import Candidate, Space, ladder

__all__ = [
    "BudgetSpent",
    "TuneOptions",
    "TuneResult",
    "candidate_from_config",
    "choose_winner",
    "run_tuning",
    "serving_note",
    "tuned_text",
]

READY_TIMEOUT_S = 180.0


class BudgetSpent(Exception):
    """The run's time budget is spent: the search stops and keeps what it measured."""


@dataclasses.dataclass(frozen=True, slots=True)
class TuneOptions:
    """One tuning run: the service, what to vary, the SLO, the load steps, the budget, the files."""

    service: Service
    space: Space
    slo: Slo
    step: StepOptions
    budget_s: float
    tuning_file: Path
    slo_env: Path
    reports: Path = Path("reports")
    start_users: int = 1
    max_users: int = 64
    ready_timeout_s: float = READY_TIMEOUT_S


@dataclasses.dataclass(frozen=True, slots=True)
class TuneResult:
    """The outcome to report, and the new texts of the files ``APPLY=1`` writes (None: unchanged)."""

    outcome: TuneOutcome
    tuning_text: str | None
    slo_env_text: str | None


def candidate_from_config(config: dict[str, Any], workers: str) -> Candidate:
    """The candidate a served model configuration is (``GET /v2/models/<model>/config``)."""
    batcher = config.get("dynamic_batching") or {}
    max_batch_size = int(config.get("max_batch_size", 0))
    preferred = [int(size) for size in batcher.get("preferred_batch_size", [])]
    groups = config.get("instance_group") or [{"count": 1}]
    return Candidate(
        max_batch_size=max_batch_size,
        max_queue_delay_us=int(batcher.get("max_queue_delay_microseconds", 0)),
        preferred=bool(ladder(max_batch_size)) and preferred == ladder(max_batch_size),
        instances=sum(int(group.get("count", 1)) for group in groups),
        workers=workers,
    )


def choose_winner(measurements: list[Measurement], baseline: Candidate) -> Candidate:
    """The cheapest of the candidates within the search's margin of the highest score (fewest instances, threads
    before processes: a gain within the margin is noise, resources are not), if it beats the baseline by that
    margin; else the baseline."""
    scores = {m.candidate: m.score for m in measurements}
    top = max((score for score in scores.values() if score is not None), default=None)
    if top is None:
        return baseline
    close = [candidate for candidate, score in scores.items() if score is not None and not better(top, score)]
    cheapest = min(close, key=lambda c: (c.instances, c.workers == "process", -float(scores[c] or 0.0)))
    return cheapest if better(scores[cheapest], scores.get(baseline)) else baseline


class _Run:
    """The state of one tuning run: its deadline, the measurements so far, and the service of the last candidate
    (kept for the next, which may be served by a reload of its model): use it in ``with``, which stops it."""

    def __init__(self, options: TuneOptions) -> None:
        self.options = options
        self.started = time.monotonic()
        self.deadline = self.started + options.budget_s
        self.measurements: list[Measurement] = []
        self.running: ServiceProcess | None = None  # the service of the last candidate, kept for a reload
        self.workdir = options.reports / "tune"  # services' logs and load steps' reports, this run's only
        shutil.rmtree(self.workdir, ignore_errors=True)

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def estimate_s(self) -> float:
        """How long a candidate takes: the mean so far."""
        done = [m.seconds for m in self.measurements if m.complete]
        return sum(done) / len(done) if done else 0.0

    def start_users(self) -> int:
        """Where a candidate's climb starts: a quarter of the users at which the best candidate so far peaked
        (the light steps below tell nothing about throughput, and each costs a step's seconds of the budget);
        the first candidate starts at ``start_users``."""
        best = max(self.measurements, key=lambda m: m.score or 0.0, default=None)
        peak = best.sustained if best is not None else None
        if peak is None:
            return self.options.start_users
        return max(self.options.start_users, min(self.options.max_users, peak.users // 4))

    def measure(self, candidate: Candidate | None, workers: str) -> Measurement:
        """Serve ``candidate`` (None: the current settings), climb the load; record and return it. The service
        stays running for the next candidate, which it serves by a reload where it can (``tune/reload.py``)."""
        index = len(self.measurements) + 1
        if candidate is not None and self.left_s() < 0.5 * self.estimate_s():
            raise BudgetSpent(f"{self.left_s():.0f} s left, a candidate takes about {self.estimate_s():.0f} s")
        began = time.monotonic()
        steps: list[Step] = []
        measured = candidate
        error: str | None = None
        complete = False
        served_by, ready_s = "-", 0.0  # (until it serves)
        name = "current settings" if candidate is None else candidate.label
        try:
            for attempt in (1, 2):
                steps.clear()
                server, served_by, ready_s = self._serve(candidate, workers, index, name)
                measured = server.serving
                broke = self._climb(server, index, steps)
                if attempt == 1 and served_by == "reload" and not server.alive():
                    # (tritonserver 2.51 crashes now and then after a load: the candidate is not to blame)
                    _say(f"[{index}] {name}: the service exited after the reload; once more, started anew")
                    self.close()
                    continue
                if broke is not None:
                    raise broke
                break
            complete = True
        except (ServiceFailed, LoadTestSetupError) as failure:
            self.close()  # (a service that failed a candidate serves no other)
            if candidate is None and not steps:  # the current settings: nothing to tune from
                raise LoadTestSetupError(
                    f"the service with its current settings could not be served and loaded: {failure}"
                ) from None
            error = str(failure)
            complete = True
            _say(f"[{index}] {name}: FAILED: {error}")
        finally:
            if measured is not None:
                seconds = time.monotonic() - began
                self.measurements.append(
                    Measurement(
                        measured,
                        tuple(steps),
                        self.options.slo,
                        error,
                        complete,
                        seconds,
                        served_by=served_by,
                        ready_s=ready_s,
                    )  # fmt: skip
                )
        result = self.measurements[-1]
        sustained = result.sustained
        summary = (
            f"{sustained.rps:.1f} req/s within the SLO at {sustained.users} users (p95 {sustained.p95_ms:g} ms)"
            if sustained is not None
            else "no load step met the SLO"
        )
        if error is None:
            _say(f"[{index}] {result.candidate.label}: {summary}, {result.seconds:.0f} s")
        return result

    def _climb(
        self, server: ServiceProcess, index: int, steps: list[Step]
    ) -> ServiceFailed | LoadTestSetupError | None:
        """Climb the load on ``server`` into ``steps``; what broke the climb, if anything did."""
        try:
            climb(
                lambda users: self._step(server, index, users),
                self.options.slo,
                steps,
                start_users=self.start_users(),
                max_users=self.options.max_users,
                floor_users=self.options.start_users,
            )
        except (ServiceFailed, LoadTestSetupError) as broke:
            return broke
        return None

    def _serve(
        self, candidate: Candidate | None, workers: str, index: int, name: str, *, budgeted: bool = True
    ) -> tuple[ServiceProcess, str, float]:
        """The service serving ``candidate``, how, and the seconds that took: ``running`` when the running service
        serves it already, ``reload`` (its model loaded again with the candidate's batching) where that can serve
        it, else ``start`` (from the old service's stop to serving). A reload that fails falls back to a start; a
        start whose service exits at once (a port taken since it was picked) is tried once more."""
        began = time.monotonic()
        running = self.running
        served = running.serving if running is not None and running.alive() else None
        if running is not None and served is not None:
            if served == candidate:
                return running, "running", 0.0  # (the winner's lighter loads, right after it was measured)
            if candidate is not None and reloadable(served, candidate):
                _say(f"[{index}] {name}: reloading the model ({self.left_s():.0f} s of the budget left)")
                try:
                    running.load_model(override(running.model_config(), candidate))
                    running.serving = self._check_served(running, candidate, reloaded=True)
                    return running, "reload", time.monotonic() - began
                except (ServiceFailed, LoadTestSetupError) as failure:
                    _say(f"[{index}] {name}: the reload failed, starting the service instead: {failure}")
        began = time.monotonic()
        self.close()
        _say(f"[{index}] {name}: starting the service ({self.left_s():.0f} s of the budget left)")
        attempt = 1
        while True:
            server = ServiceProcess(self.options.service, candidate, self.workdir / "services", workers)
            self.running = server
            server.start()
            try:
                timeout_s = self.options.ready_timeout_s
                server.wait_ready(min(timeout_s, max(self.left_s(), 0.0) + 30.0) if budgeted else timeout_s)
                server.serving = self._check_served(server, candidate)
                return server, "start", time.monotonic() - began
            except ServiceFailed as failure:
                self.close()
                if attempt > 1 or not failure.exited:
                    raise
                _say(f"[{index}] {name}: the service exited while starting; once more, on other ports")
                attempt += 1

    def close(self) -> None:
        """Stop the running service, if any."""
        running, self.running = self.running, None
        if running is not None:
            running.stop()

    def __enter__(self) -> _Run:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _check_served(
        self, server: ServiceProcess, candidate: Candidate | None, *, reloaded: bool = False
    ) -> Candidate:
        """The setting the server serves; ServiceFailed when it is not ``candidate``."""
        served = candidate_from_config(server.model_config(), server.workers)
        if candidate is not None and served != candidate:
            why = (
                "Triton did not take the batching of the reload's config (see the service's log)"
                if reloaded
                else f"it does not read {self.options.service.env_prefix}TUNING_FILE (see the generated tuning.py)"
            )
            raise ServiceFailed(f"the service serves {served.label}, not {candidate.label}: {why}")
        return served

    def measure_lighter(self, winner: Measurement) -> Measurement:
        """The winner with the lighter loads its climb skipped measured too (it started where earlier candidates
        peaked): the queue target must stay above their queue time. A few steps, taken past the budget if need
        be; the winner as it was when they cannot run."""
        missing = lighter_loads_unmeasured(winner, self.options.start_users)
        if not missing:
            return winner
        index = self.measurements.index(winner) + 1
        label = winner.candidate.label
        _say(f"[{index}] {label}: the lighter loads its climb skipped ({', '.join(map(str, missing))} users), for "
             "the queue target")  # fmt: skip
        steps: list[Step] = []
        try:
            server, _, _ = self._serve(winner.candidate, winner.candidate.workers, index, label, budgeted=False)
            for users in missing:
                steps.append(self._step(server, index, users, budgeted=False))
        except (ServiceFailed, LoadTestSetupError) as failure:
            self.close()
            _say(f"[{index}] {label}: the lighter loads could not be measured: {failure}")
        merged = dataclasses.replace(winner, steps=tuple(sorted((*steps, *winner.steps), key=lambda s: s.users)))
        self.measurements[index - 1] = merged
        return merged

    def _step(self, server: ServiceProcess, index: int, users: int, *, budgeted: bool = True) -> Step:
        if budgeted and self.left_s() <= 0:
            raise BudgetSpent("the budget ran out during a candidate")
        before = server.queue_counters()
        reports = self.workdir / "steps" / f"{index}-{users}u"
        figures = run_load_step(self.options.step, server.url, users, reports)
        after = server.queue_counters()
        queue_ms = after.mean_queue_ms(before) if after is not None and before is not None else None
        step = Step(users, figures.requests, figures.rps, figures.p95_ms, figures.failure_ratio, queue_ms)
        queue = "-" if queue_ms is None else f"{queue_ms:.2f} ms"
        verdict = "ok" if step.meets(self.options.slo) else "over the SLO"
        _say(
            f"[{index}]   {users:3d} users: {step.rps:8.1f} req/s  p95 {step.p95_ms:6g} ms  "
            f"failures {step.failure_ratio:.1%}  queue {queue}  {verdict}"
        )
        return step


def run_tuning(options: TuneOptions) -> TuneResult:
    """Measure, search, and work out the winner, its diff and the derived queue target."""
    current = read_tuning(options.tuning_file)
    with _Run(options) as run:
        notes: list[str] = []
        baseline: Candidate | None = None
        interrupted = False
        try:
            baseline = run.measure(None, str(current.get("workers", "thread"))).candidate
            first = run.measurements[0]

            def score(candidate: Candidate) -> float | None:
                return first.score if candidate == baseline else run.measure(candidate, candidate.workers).score

            coordinate_search(options.space, baseline, score)
            notes.append("the search finished: no neighbouring setting gained 5 % or more")
        except BudgetSpent as spent:
            notes.append(f"the budget ({options.budget_s / 60:g} min) stopped the search: {spent}")
            _say(f"budget spent: {spent}; keeping the best so far")
        except KeyboardInterrupt:
            interrupted = True
            notes.append("stopped with Ctrl+C: the best so far is kept")
            _say("stopped: keeping the best so far")
        return _result(options, run, baseline, current, notes, interrupted)


def serving_note(measurements: list[Measurement]) -> str | None:
    """How the candidates came to be served, and the mean seconds each way took (None when none was)."""
    parts: list[str] = []
    for way, what in (("start", "started the service"), ("reload", "reloaded its model")):
        seconds = [m.ready_s for m in measurements if m.served_by == way and m.ready_s > 0]
        if seconds:
            parts.append(f"{len(seconds)} {what} ({sum(seconds) / len(seconds):.2f} s each until it served)")
    return "candidates served: " + "; ".join(parts) if parts else None


def tuned_text(current: dict[str, Any], winner: Candidate, baseline: Candidate) -> str | None:
    """The tuning file's new text: its other keys kept, the winner's settings over them; None when unchanged."""
    if winner == baseline:
        return None
    return render_tuning(current | winner.tuning())


def _result(
    options: TuneOptions,
    run: _Run,
    baseline: Candidate | None,
    current: dict[str, Any],
    notes: list[str],
    interrupted: bool = False,
) -> TuneResult:
    if baseline is None and run.measurements:  # cut while the current settings were measured
        baseline = run.measurements[0].candidate
    if baseline is None:
        outcome = TuneOutcome(tuple(run.measurements), options.slo, None, None, "", (), tuple(notes))
        return TuneResult(outcome, None, None)
    winner = choose_winner(run.measurements, baseline)
    measurement = next(m for m in run.measurements if m.candidate == winner)
    if not interrupted:
        try:
            measurement = run.measure_lighter(measurement)
        except KeyboardInterrupt:
            notes.append("stopped with Ctrl+C while the winner's lighter loads were measured")
    tuning_text = tuned_text(current, winner, baseline)
    derived = derive_queue_target(measurement, options.start_users)
    slo_text = None
    if derived.queue_target_ms is not None and options.slo_env.is_file():
        old = options.slo_env.read_text(encoding="utf-8")
        new = with_env_value(old, "QUEUE_TARGET_MS", f"{derived.queue_target_ms:g}")
        slo_text = new if new != old else None
    changes = ""
    if tuning_text is not None:
        changes += diff(options.tuning_file, tuning_text)
    if slo_text is not None:
        changes += diff(options.slo_env, slo_text)
    notes.append(f"elapsed {(time.monotonic() - run.started) / 60:.1f} min for {len(run.measurements)} candidates")
    serving = serving_note(run.measurements)
    if serving is not None:
        notes.append(serving)
    outcome = TuneOutcome(
        tuple(run.measurements), options.slo, baseline, winner, changes, derived.reasoning, tuple(notes)
    )
    return TuneResult(outcome, tuning_text, slo_text)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
