"""Unit tests of ``make tune``'s logic on synthetic measurements: the search, the load climb, the winner,
the derived queue target, the tuning file's form, the project files, the metrics parser and the report."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from loadtests.errors import LoadTestSetupError
from loadtests.tune.measure import PLATEAU_GAIN, Measurement, Slo, Step, climb
from loadtests.tune.project_files import diff, read_env_file, read_tuning, with_env_value
from loadtests.tune.reload import override, reloadable
from loadtests.tune.report import TuneOutcome, render_table, write_reports
from loadtests.tune.search import better, coordinate_search
from loadtests.tune.service_process import QueueCounters, parse_queue_counters
from loadtests.tune.space import Candidate, Space, ladder
from loadtests.tune.tuner import candidate_from_config, choose_winner, serving_note, tuned_text

SLO = Slo(p95_ms=100.0)
START = Candidate(max_batch_size=64, max_queue_delay_us=100, preferred=False, instances=1)
SPACE = Space(
    max_batch_size=(1, 8, 16, 32, 64, 128),
    max_queue_delay_us=(0, 100, 1000, 5000),
    preferred=(False, True),
    instances=(1, 2, 4),
)


def _peaked(candidate: Candidate) -> float:
    """A throughput surface with one best setting: batch 16, 2 instances, 1000 µs, preferred sizes on."""
    batch = {1: 10, 8: 60, 16: 100, 32: 80, 64: 70, 128: 50}[candidate.max_batch_size]
    instances = {1: 1.0, 2: 1.6, 4: 1.3}[candidate.instances]
    delay = {0: 0.9, 100: 1.0, 1000: 1.2, 5000: 0.8}[candidate.max_queue_delay_us]
    return batch * instances * delay * (1.1 if candidate.preferred else 1.0)


def test_the_search_finds_the_best_setting_measuring_far_fewer_than_the_grid() -> None:
    measured: list[Candidate] = []

    def score(candidate: Candidate) -> float:
        measured.append(candidate)
        return _peaked(candidate)

    best = coordinate_search(SPACE, START, score)
    assert best == Candidate(max_batch_size=16, max_queue_delay_us=1000, preferred=True, instances=2)
    assert len(measured) == len(set(measured))  # each candidate measured once
    assert len(measured) < 6 * 4 * 2 * 3 / 3


def test_a_gain_within_noise_does_not_move_the_search() -> None:
    def flat(candidate: Candidate) -> float:
        return 100.0 + candidate.instances  # 1 % per instance: below MIN_GAIN

    assert coordinate_search(SPACE, START, flat) == START


def test_candidates_that_fail_are_passed_over() -> None:
    def score(candidate: Candidate) -> float | None:
        return None if candidate.instances > 1 else _peaked(candidate)

    best = coordinate_search(SPACE, START, score)
    assert best.instances == 1 and best.max_batch_size == 16


def test_the_search_stops_where_score_raises() -> None:
    calls: list[Candidate] = []

    def score(candidate: Candidate) -> float:
        calls.append(candidate)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return _peaked(candidate)

    with pytest.raises(KeyboardInterrupt):
        coordinate_search(SPACE, START, score)
    assert len(calls) == 3


def _gil_bound(candidate: Candidate) -> float:
    """A CPU-bound callable holding the GIL on a 4-core machine, batching a little: threads share one core (a
    second thread instance costs 10 %), one worker process is no faster than one thread, N processes scale."""
    batch = {1: 1.0, 8: 1.1, 16: 1.1, 32: 1.1, 64: 1.1, 128: 1.1}[candidate.max_batch_size]
    if candidate.workers == "thread":
        instances = {1: 1.0, 2: 0.9, 4: 0.8}[candidate.instances]
    else:
        instances = {1: 1.0, 2: 1.8, 4: 3.2}[candidate.instances]
    return 1000.0 * batch * instances


def test_the_search_moves_instances_and_worker_mode_together_where_neither_gains_alone() -> None:
    space = dataclasses.replace(SPACE, workers=("thread", "process"))
    start = dataclasses.replace(START, max_batch_size=16)
    measured: list[Candidate] = []

    def score(candidate: Candidate) -> float:
        measured.append(candidate)
        return _gil_bound(candidate)

    for single in (start.replace("instances", 2), start.replace("workers", "process")):
        assert not better(_gil_bound(single), _gil_bound(start))  # each move alone: no gain
    best = coordinate_search(space, start, score)
    assert (best.instances, best.workers) == (4, "process")
    assert len(measured) == len(set(measured)) and len(measured) <= 20  # a short run's worth, not the grid (144)


def test_a_short_budget_reaches_worker_processes_first() -> None:
    space = dataclasses.replace(SPACE, workers=("thread", "process"), instances=(1, 2))
    measured: list[Candidate] = []

    def score(candidate: Candidate) -> float:
        measured.append(candidate)
        if len(measured) > 4:  # a budget of four candidates
            raise KeyboardInterrupt
        return _gil_bound(candidate)

    with pytest.raises(KeyboardInterrupt):
        coordinate_search(space, START, score)
    assert {(c.instances, c.workers) for c in measured[:4]} == {(1, "thread"), (2, "thread"), (1, "process"),
                                                                 (2, "process")}  # fmt: skip


def test_the_joint_step_measures_nothing_more_with_one_worker_mode() -> None:
    with_joint: list[Candidate] = []
    best = coordinate_search(SPACE, START, lambda candidate: with_joint.append(candidate) or _gil_bound(candidate))
    assert best.workers == "thread" and all(candidate.workers == "thread" for candidate in with_joint)


def test_better_needs_the_margin_and_none_never_wins() -> None:
    assert better(106.0, 100.0) and not better(104.0, 100.0)
    assert better(1.0, None) and not better(None, 1.0) and better(1.0, 0.0) and not better(0.0, 0.0)


def test_a_model_that_does_not_batch_varies_only_instances_and_workers() -> None:
    unbatched = Candidate(max_batch_size=0, max_queue_delay_us=0, preferred=False, instances=1)
    space = Space(max_batch_size=(8, 64), max_queue_delay_us=(0, 100), instances=(1, 2), workers=("thread", "process"))
    assert space.values(unbatched, "max_batch_size") == (0,)
    assert space.values(unbatched, "preferred") == (False,)
    assert space.values(unbatched, "instances") == (1, 2)
    assert space.values(unbatched, "workers") == ("thread", "process")
    assert unbatched.tuning() == {"instances": 1, "workers": "thread"}
    assert unbatched.replace("workers", "process").tuning() == {"instances": 1, "workers": "process"}


def test_preferred_sizes_are_a_ladder_and_switch_off_where_none_fits() -> None:
    assert ladder(64) == [4, 8, 16, 32, 64] and ladder(48) == [4, 8, 16, 32, 48] and ladder(4) == []
    on = START.replace("preferred", True)
    assert on.tuning()["preferred_batch_sizes"] == [4, 8, 16, 32, 64]
    assert on.replace("max_batch_size", 4).preferred is False
    assert START.tuning() == {
        "instances": 1,
        "max_batch_size": 64,
        "max_queue_delay_us": 100,
        "preferred_batch_sizes": [],
        "workers": "thread",
    }


def test_the_served_config_reads_back_as_the_candidate() -> None:
    config = {
        "max_batch_size": 64,
        "dynamic_batching": {"max_queue_delay_microseconds": "1000", "preferred_batch_size": [4, 8, 16, 32, 64]},
        "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
    }
    assert candidate_from_config(config, "thread") == Candidate(64, 1000, True, 2, "thread")
    # Triton reports no preferred sizes as [max_batch_size].
    config["dynamic_batching"] = {"preferred_batch_size": [64]}
    assert candidate_from_config(config, "process") == Candidate(64, 0, False, 2, "process")
    assert candidate_from_config({"max_batch_size": 0}, "thread") == Candidate(0, 0, False, 1, "thread")


def test_a_reload_serves_a_candidate_that_changes_only_the_batching() -> None:
    assert reloadable(START, START.replace("max_batch_size", 8).replace("max_queue_delay_us", 0))
    assert reloadable(START, START.replace("preferred", True))
    assert not reloadable(START, START.replace("instances", 2))  # callables bound at start
    assert not reloadable(START, START.replace("workers", "process"))  # worker processes started at start
    assert not reloadable(START, Candidate(0, 0, False, 1))  # a model that does not batch


def test_the_override_is_the_served_config_with_the_candidates_batching() -> None:
    served = {
        "name": "m",
        "backend": "tritonrt",
        "max_batch_size": 64,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": ["4"]}],
        "dynamic_batching": {"max_queue_delay_microseconds": "100", "preferred_batch_size": [64], "priority_levels": 0},
        "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
    }
    candidate = Candidate(16, 1000, True, 2, "thread")
    config = override(served, candidate)
    assert config["max_batch_size"] == 16 and config["backend"] == "tritonrt" and config["input"] == served["input"]
    assert config["dynamic_batching"] == {
        "max_queue_delay_microseconds": 1000,
        "preferred_batch_size": [4, 8, 16],
        "priority_levels": 0,
    }
    assert config["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]
    assert served["max_batch_size"] == 64 and served["dynamic_batching"]["preferred_batch_size"] == [64]  # a copy
    # Preferred off: the old sizes go (Triton then forms the largest batch it can), and it reads back as off.
    off = override(served, candidate.replace("preferred", False))
    assert "preferred_batch_size" not in off["dynamic_batching"]
    assert candidate_from_config(off, "thread") == candidate.replace("preferred", False)
    assert candidate_from_config(config, "thread") == candidate


def test_the_notes_say_how_the_candidates_were_served_and_how_long_it_took() -> None:
    measurements = [
        Measurement(START, (), SLO, served_by="start", ready_s=1.5),
        Measurement(START.replace("max_batch_size", 8), (), SLO, served_by="reload", ready_s=0.02),
        Measurement(START.replace("max_batch_size", 16), (), SLO, served_by="reload", ready_s=0.04),
        Measurement(START.replace("instances", 2), (), SLO, served_by="start", ready_s=2.5),
    ]
    assert serving_note(measurements) == (
        "candidates served: 2 started the service (2.00 s each until it served); "
        "2 reloaded its model (0.03 s each until it served)"
    )
    assert serving_note([]) is None


def _steps(*rows: tuple[int, float, float]) -> tuple[Step, ...]:
    return tuple(Step(users, int(rps * 5), rps, p95, 0.0, queue_ms=p95 / 2) for users, rps, p95 in rows)


def test_the_climb_stops_at_the_first_step_over_the_slo() -> None:
    figures = {1: (50.0, 20.0), 2: (95.0, 30.0), 4: (180.0, 60.0), 8: (200.0, 140.0), 16: (210.0, 300.0)}
    steps: list[Step] = []
    climb(lambda users: Step(users, 100, *figures[users], 0.0), SLO, steps, max_users=64)
    assert [step.users for step in steps] == [1, 2, 4, 8]
    measurement = Measurement(START, tuple(steps), SLO)
    assert measurement.sustained is not None and measurement.sustained.users == 4 and measurement.score == 180.0


def test_the_climb_stops_when_doubling_the_users_twice_in_a_row_gains_nothing() -> None:
    flat = 90.0 * (1 + PLATEAU_GAIN / 2)
    rps = {1: 50.0, 2: 90.0, 4: flat, 8: flat, 16: 200.0}
    steps: list[Step] = []
    climb(lambda users: Step(users, 100, rps[users], 10.0, 0.0), SLO, steps, max_users=64)
    assert [step.users for step in steps] == [1, 2, 4, 8]


def test_one_flat_doubling_does_not_end_the_climb() -> None:
    rps = {1: 24.0, 2: 23.5, 4: 60.0, 8: 61.0, 16: 61.5}  # a batching model: flat until batches fill
    steps: list[Step] = []
    climb(lambda users: Step(users, 100, rps[users], 10.0, 0.0), SLO, steps, max_users=64)
    assert [step.users for step in steps] == [1, 2, 4, 8, 16]


def test_the_climb_stops_at_max_users_and_keeps_its_steps_when_cut() -> None:
    steps: list[Step] = []
    climb(lambda users: Step(users, 100, 10.0 * users, 10.0, 0.0), SLO, steps, start_users=2, max_users=8)
    assert [step.users for step in steps] == [2, 4, 8]

    def cut(users: int) -> Step:
        if users == 4:
            raise KeyboardInterrupt
        return Step(users, 100, 10.0 * users, 10.0, 0.0)

    kept: list[Step] = []
    with pytest.raises(KeyboardInterrupt):
        climb(cut, SLO, kept)
    assert [step.users for step in kept] == [1, 2]


def test_a_climb_started_high_halves_the_users_until_a_step_meets_the_slo() -> None:
    p95 = {1: 20.0, 2: 40.0, 4: 80.0, 8: 160.0, 16: 320.0}
    steps: list[Step] = []
    climb(lambda users: Step(users, 100, 10.0 * users, p95[users], 0.0), SLO, steps, start_users=16, floor_users=1)
    assert [step.users for step in steps] == [16, 8, 4]  # 4 met the SLO; more users missed it already
    assert Measurement(START, tuple(steps), SLO).score == 40.0
    none: list[Step] = []
    climb(lambda users: Step(users, 100, 10.0, 500.0, 0.0), SLO, none, start_users=4, floor_users=2)
    assert [step.users for step in none] == [4, 2]  # nothing met it, down to the floor: the candidate scores 0


def test_a_climb_started_high_climbs_on_when_its_first_step_meets_the_slo() -> None:
    steps: list[Step] = []
    climb(lambda users: Step(users, 100, 10.0 * users, 10.0, 0.0), SLO, steps, start_users=8, floor_users=1)
    assert [step.users for step in steps] == [8, 16, 32, 64]


def test_failures_over_the_allowed_share_miss_the_slo() -> None:
    assert not Step(1, 100, 10.0, 5.0, 0.01).meets(Slo(p95_ms=100))
    assert Step(1, 100, 10.0, 5.0, 0.01).meets(Slo(p95_ms=100, max_failure_ratio=0.02))
    assert not Step(1, 0, 0.0, 0.0, 0.0).meets(SLO)


def test_scores_of_failed_and_slow_candidates() -> None:
    assert Measurement(START, (), SLO, error="exited").score is None
    assert Measurement(START, _steps((1, 10.0, 150.0)), SLO).score == 0.0


def test_the_winner_must_beat_the_baseline_by_the_margin() -> None:
    other = START.replace("instances", 2)
    baseline = Measurement(START, _steps((4, 100.0, 50.0)), SLO)
    assert choose_winner([baseline, Measurement(other, _steps((4, 104.0, 50.0)), SLO)], START) == START
    assert choose_winner([baseline, Measurement(other, _steps((4, 130.0, 50.0)), SLO)], START) == other
    assert choose_winner([baseline, Measurement(other, (), SLO, error="exited")], START) == START


def test_queue_counters_come_from_the_models_metrics() -> None:
    text = "\n".join(
        [
            "# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds",
            'nv_inference_queue_duration_us{model="m",version="1"} 3000',
            'nv_inference_queue_duration_us{model="other",version="1"} 99999',
            'nv_inference_request_success{model="m",version="1"} 10',
            'nv_inference_request_success{model="m",version="2"} 5',
        ]
    )
    counters = parse_queue_counters(text, "m")
    assert counters == QueueCounters(3000.0, 15.0)
    assert QueueCounters(9000.0, 25.0).mean_queue_ms(counters) == pytest.approx(0.6)
    assert counters.mean_queue_ms(counters) is None


def test_env_values_are_replaced_or_appended_and_diffed(tmp_path: Path) -> None:
    slo = tmp_path / "slo.env"
    slo.write_text("# objectives\nLOADTEST_P95_MS=100\nQUEUE_TARGET_MS=20\n", encoding="utf-8")
    assert read_env_file(slo) == {"LOADTEST_P95_MS": "100", "QUEUE_TARGET_MS": "20"}
    new = with_env_value(slo.read_text(), "QUEUE_TARGET_MS", "3.5")
    assert new == "# objectives\nLOADTEST_P95_MS=100\nQUEUE_TARGET_MS=3.5\n"
    assert with_env_value("A=1", "B", "2") == "A=1\nB=2\n"
    assert "-QUEUE_TARGET_MS=20\n+QUEUE_TARGET_MS=3.5" in diff(slo, new)
    assert diff(slo, slo.read_text()) == ""
    assert diff(tmp_path / "absent.json", "{}\n").startswith("--- /dev/null")
    with pytest.raises(LoadTestSetupError, match="slo-env"):
        read_env_file(tmp_path / "missing.env")


def test_a_bad_tuning_file_is_named(tmp_path: Path) -> None:
    assert read_tuning(tmp_path / "absent.json") == {}
    bad = tmp_path / "tuning.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(LoadTestSetupError, match="tuning.json is not valid JSON"):
        read_tuning(bad)
    bad.write_text("[1]", encoding="utf-8")
    with pytest.raises(LoadTestSetupError, match="JSON object"):
        read_tuning(bad)


def test_the_report_marks_the_winner_and_writes_its_files(tmp_path: Path) -> None:
    other = START.replace("max_batch_size", 16)
    measurements = (
        Measurement(START, _steps((1, 50.0, 20.0), (2, 60.0, 150.0)), SLO, seconds=20),
        Measurement(other, _steps((1, 50.0, 20.0), (2, 95.0, 40.0), (4, 150.0, 90.0)), SLO, seconds=25),
        Measurement(START.replace("instances", 4), (), SLO, error="exited with status 1"),
    )
    outcome = TuneOutcome(measurements, SLO, START, other, "--- a\n+++ b\n", ("because",), ("a note",))
    table = render_table(outcome)
    rows = table.splitlines()
    assert rows[2].startswith("b ") and "50.0" in rows[2] and "60.0" not in rows[2]  # 60 missed the SLO
    assert rows[3].startswith("* ") and "150.0" in rows[3] and "90" in rows[3]
    assert "failed" in rows[4]
    paths = write_reports(tmp_path, outcome)
    assert [path.name for path in paths] == ["tune.png", "tune.html", "tune.json"]
    assert paths[0].read_bytes().startswith(b"\x89PNG")
    page = paths[1].read_text()
    assert "data:image/png;base64," in page and "because" in page and "a note" in page
    document = json.loads(paths[2].read_text())
    assert document["winner"]["max_batch_size"] == 16
    assert [m["score_rps"] for m in document["measurements"]] == [50.0, 150.0, None]


def test_the_new_tuning_file_keeps_other_keys_and_names_the_winners_worker_mode() -> None:
    current = {"instances": 4, "workers": "process", "note": "kept"}
    winner = START.replace("max_batch_size", 16)
    assert json.loads(tuned_text(current, winner, START) or "") == {
        "instances": 1,
        "workers": "thread",  # written even where it is a default: the pytorch service's default is process
        "note": "kept",
        "max_batch_size": 16,
        "max_queue_delay_us": 100,
        "preferred_batch_sizes": [],
    }
    assert tuned_text(current, START, START) is None


def test_the_winner_is_the_cheapest_setting_within_the_margin_of_the_best() -> None:
    baseline = Measurement(START, _steps((4, 100.0, 50.0)), SLO)
    one_thread = dataclasses.replace(START, max_batch_size=128)
    two_processes = dataclasses.replace(one_thread, instances=2, workers="process")
    close = [baseline, Measurement(one_thread, _steps((4, 183.0, 50.0)), SLO)]
    assert choose_winner([*close, Measurement(two_processes, _steps((4, 190.0, 50.0)), SLO)], START) == one_thread
    assert choose_winner([*close, Measurement(two_processes, _steps((4, 260.0, 50.0)), SLO)], START) == two_processes
