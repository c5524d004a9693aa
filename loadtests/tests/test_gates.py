"""SLO gates: where thresholds come from, how figures are judged, the printed table."""

from __future__ import annotations

import pytest

from loadtests.errors import LoadTestSetupError
from loadtests.gates import Figures, Gates, evaluate, passed, render_table

FIGURES = Figures(requests=1000, failures=0, p50_ms=3.0, p95_ms=9.0, p99_ms=14.0, rps=250.0)


def test_options_win_over_environment_and_defaults():
    environ = {"LOADTEST_P95_MS": "40", "LOADTEST_P99_MS": " 80 ", "LOADTEST_MIN_RPS": ""}

    gates = Gates.from_sources({"p95_ms": 50.0, "p50_ms": None}, environ)

    assert gates == Gates(p50_ms=None, p95_ms=50.0, p99_ms=80.0, max_failure_ratio=0.0, min_rps=None)


def test_slo_env_sets_the_gates_that_neither_options_nor_the_environment_set():
    slo = {"LOADTEST_P95_MS": "100", "LOADTEST_P99_MS": "300", "LOADTEST_MIN_RPS": "5", "QUEUE_TARGET_MS": "20"}

    gates = Gates.from_sources({"p99_ms": 250.0}, {"LOADTEST_MIN_RPS": "7"}, slo, "deploy/k8s/base/slo.env")

    assert gates == Gates(p95_ms=100.0, p99_ms=250.0, min_rps=7.0)
    assert gates.origins == {"p95_ms": "deploy/k8s/base/slo.env"}


def test_a_bad_value_in_slo_env_names_the_file():
    with pytest.raises(LoadTestSetupError, match=r"LOADTEST_P95_MS='x' in slo.env is not a number"):
        Gates.from_sources({}, {}, {"LOADTEST_P95_MS": "x"})


def test_failure_ratio_can_be_loosened_from_the_environment():
    assert Gates.from_sources({}, {"LOADTEST_MAX_FAILURE_RATIO": "0.05"}).max_failure_ratio == 0.05


def test_bad_environment_value_names_the_variable():
    with pytest.raises(LoadTestSetupError, match=r"LOADTEST_P50_MS='fast' is not a number"):
        Gates.from_sources({}, {"LOADTEST_P50_MS": "fast"})


@pytest.mark.parametrize(("field", "value"), [("max_failure_ratio", 1.5), ("p99_ms", -1.0), ("min_rps", -2.0)])
def test_out_of_range_gates_are_rejected(field, value):
    with pytest.raises(LoadTestSetupError, match=f"gate {field} must be"):
        Gates.from_sources({field: value}, {})


def test_all_gates_met():
    checks = evaluate(Gates(p50_ms=5, p95_ms=10, p99_ms=14, max_failure_ratio=0.0, min_rps=100), FIGURES)

    assert passed(checks)
    assert [c.passed for c in checks] == [True] * 7


def test_each_missed_gate_fails_its_row():
    figures = Figures(requests=100, failures=2, p50_ms=6.0, p95_ms=9.0, p99_ms=30.0, rps=50.0, user_errors=1)
    checks = evaluate(Gates(p50_ms=5, p95_ms=10, p99_ms=20, max_failure_ratio=0.01, min_rps=100), figures)

    assert {c.name: c.passed for c in checks} == {
        "p50 latency": False,
        "p95 latency": True,
        "p99 latency": False,
        "failure ratio": False,
        "throughput": False,
        "requests completed": True,
        "errors in user code": False,
    }
    assert not passed(checks)


def test_unset_gates_show_figures_without_judging():
    checks = evaluate(Gates(max_failure_ratio=None), FIGURES)

    assert all(c.passed is None for c in checks[:5])
    assert checks[1].actual == "9.0 ms" and checks[4].actual == "250.0 rps"
    assert passed(checks)


def test_a_run_without_requests_fails_even_without_gates():
    checks = evaluate(Gates(max_failure_ratio=None), Figures(0, 0, 0.0, 0.0, 0.0, 0.0))

    assert not passed(checks)


def test_table_lists_threshold_actual_and_result():
    table = render_table(evaluate(Gates(p95_ms=5, min_rps=1e9), FIGURES)).splitlines()

    assert table[0].split() == ["gate", "threshold", "actual", "result"]
    assert set(table[1]) <= {"-", " "}
    rows = {line[:19].strip(): line.split() for line in table[2:]}
    assert rows["p95 latency"][2:] == ["<=", "5.0", "ms", "9.0", "ms", "FAIL"]
    assert rows["p50 latency"][-1] == "-"
    assert rows["failure ratio"][-3:] == ["0.00%", "0.00%", "PASS"]
    assert rows["throughput"][-1] == "FAIL" and ">=" in rows["throughput"]
