"""How the tuner serves each candidate (``tuner._Run._serve``), on a fake service: a batching candidate by a
reload of the running service's model, the others by a start; a refused reload, or a service that exits after
one, by a start; and whatever happens, no service left running."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadtests.tune import tuner
from loadtests.tune.load_step import StepOptions
from loadtests.tune.measure import Slo, Step
from loadtests.tune.service_process import Service, ServiceFailed
from loadtests.tune.space import Candidate, Space
from loadtests.tune.tuner import TuneOptions, _Run

CURRENT = Candidate(max_batch_size=16, max_queue_delay_us=100, preferred=False, instances=1, workers="thread")


def _config(candidate: Candidate) -> dict[str, Any]:
    """A config as Triton reports it for ``candidate``."""
    return {
        "backend": "tritonrt",
        "max_batch_size": candidate.max_batch_size,
        "dynamic_batching": {
            "max_queue_delay_microseconds": str(candidate.max_queue_delay_us),
            "preferred_batch_size": candidate.preferred_batch_sizes or [candidate.max_batch_size],
        },
        "instance_group": [{"count": candidate.instances, "kind": "KIND_CPU"}],
    }


class FakeService:
    """A service that serves its candidate's config (the current settings for None) and takes reloads, unless
    ``refuse`` is set."""

    made: list[FakeService] = []
    refuse = False

    def __init__(self, service: Service, candidate: Candidate | None, workdir: Path, workers: str = "thread"):
        self.workers = candidate.workers if candidate is not None else workers
        self.config = _config(candidate or CURRENT)
        self.serving: Candidate | None = None
        self.running = False
        FakeService.made.append(self)

    def start(self) -> None:
        self.running = True

    def wait_ready(self, timeout_s: float) -> None:
        assert self.running

    def alive(self) -> bool:
        return self.running

    def stop(self) -> None:
        self.running = False

    def model_config(self) -> dict[str, Any]:
        return self.config

    def load_model(self, config: dict[str, Any]) -> None:
        if FakeService.refuse:
            raise ServiceFailed("the server refused to load model 'tuned' (HTTP 400): a refusal")
        self.config = config


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    FakeService.made, FakeService.refuse = [], False
    monkeypatch.setattr(tuner, "ServiceProcess", FakeService)
    options = TuneOptions(
        service=Service.of("demo", "tuned"),
        space=Space(),
        slo=Slo(p95_ms=100.0),
        step=StepOptions(locustfile=tmp_path / "locustfile.py", duration_s=1.0),
        budget_s=600.0,
        tuning_file=tmp_path / "tuning.json",
        slo_env=tmp_path / "slo.env",
        reports=tmp_path / "reports",
    )
    return _Run(options)


def _climbs(monkeypatch: pytest.MonkeyPatch, exits_after_reload: bool = False) -> list[str]:
    """Each climb measures one step; with ``exits_after_reload`` the first climb on a reloaded service ends
    with the service gone. Returns the served configs' labels, one per climb."""
    climbed: list[str] = []

    def climb(self: _Run, server: Any, index: int, steps: list[Step]) -> None:
        climbed.append(server.serving.label)
        steps.append(Step(1, 100, 50.0, 10.0, 0.0))
        if exits_after_reload and len(FakeService.made) == 1 and len(climbed) == 2:
            server.running = False  # (as tritonserver 2.51 now and then after a load)

    monkeypatch.setattr(_Run, "_climb", climb)
    return climbed


def test_batching_candidates_are_reloaded_and_others_started(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _climbs(monkeypatch)
    batching = CURRENT.replace("max_batch_size", 64).replace("preferred", True)
    with run:
        assert run.measure(None, "thread").served_by == "start"
        measured = run.measure(batching, "thread")
        assert (measured.served_by, measured.candidate) == ("reload", batching)
        assert len(FakeService.made) == 1 and FakeService.made[0].serving == batching
        more = batching.replace("instances", 2)
        assert run.measure(more, "thread").served_by == "start"  # its callables are bound at start
        assert [service.running for service in FakeService.made] == [False, True]
        assert run.measure(more.replace("workers", "process"), "process").served_by == "start"
    assert not any(service.running for service in FakeService.made)
    assert [m.served_by for m in run.measurements] == ["start", "reload", "start", "start"]
    assert all(m.ready_s >= 0 and m.error is None for m in run.measurements)


def test_a_refused_reload_falls_back_to_a_start(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _climbs(monkeypatch)
    FakeService.refuse = True
    with run:
        run.measure(None, "thread")
        measured = run.measure(CURRENT.replace("max_batch_size", 8), "thread")
    assert (measured.served_by, measured.error) == ("start", None)
    assert measured.candidate == CURRENT.replace("max_batch_size", 8)
    assert len(FakeService.made) == 2 and not any(service.running for service in FakeService.made)


def test_a_service_that_exits_after_a_reload_is_measured_again_started(
    run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    climbed = _climbs(monkeypatch, exits_after_reload=True)
    candidate = CURRENT.replace("max_queue_delay_us", 1000)
    with run:
        run.measure(None, "thread")
        measured = run.measure(candidate, "thread")
    assert climbed == [CURRENT.label, candidate.label, candidate.label]  # the second climb on a new service
    assert (measured.served_by, len(measured.steps), measured.error) == ("start", 1, None)
    assert len(FakeService.made) == 2 and not any(service.running for service in FakeService.made)


def test_the_service_is_stopped_when_the_run_is_interrupted(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(self: _Run, server: Any, index: int, steps: list[Step]) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_Run, "_climb", interrupted)
    with pytest.raises(KeyboardInterrupt), run:
        run.measure(None, "thread")
    assert len(FakeService.made) == 1 and not FakeService.made[0].running
