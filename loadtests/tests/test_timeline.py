"""Timeline: per-second buckets of a run, their CSV and the PNG chart."""

from __future__ import annotations

import csv

import matplotlib.image
import numpy as np
from PIL import Image

from loadtests.timeline import Timeline


def _timeline() -> Timeline:
    timeline = Timeline(start=100.0)
    timeline.set_users(100.0, 1)
    for i in range(100):
        timeline.record(100.0 + i / 200, response_time_ms=float(i + 1), failed=i < 3)
    timeline.set_users(101.0, 2)
    timeline.record(103.2, response_time_ms=7.0, failed=False)
    return timeline


def test_buckets_count_requests_failures_and_percentiles():
    first, idle, _, last = _timeline().seconds(until=104.5)

    assert (first.second, first.users, first.requests, first.failures) == (0, 1, 100, 3)
    assert (first.p50_ms, round(first.p95_ms, 2), round(first.p99_ms, 2)) == (50.5, 95.05, 99.01)
    assert (idle.second, idle.users, idle.requests) == (1, 2, 0)  # noted at 101.0: second 1's count
    assert (last.second, last.requests, last.p50_ms) == (3, 1, 7.0)


def test_unfinished_last_second_is_left_out_unless_it_is_all_there_is():
    assert len(_timeline().seconds(until=104.9)) == 4

    short = Timeline(start=0.0)
    short.record(0.3, 2.0, False)
    [only] = short.seconds(until=0.6)
    assert only.requests == 1


def test_csv_has_one_row_per_second(tmp_path):
    path = tmp_path / "timeline.csv"

    _timeline().write_csv(path, until=104.0)

    rows = list(csv.DictReader(path.open()))
    assert [r["second"] for r in rows] == ["0", "1", "2", "3"]
    assert rows[0]["requests_per_s"] == "100" and rows[0]["failures_per_s"] == "3"
    assert rows[1]["p95_ms"] == ""  # idle second: no latency


def test_chart_is_a_png(tmp_path):
    path = tmp_path / "chart.png"

    _timeline().write_chart(path, until=104.0, title="identity @ http://localhost:8000")

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == (1000, 700)
    assert matplotlib.image.imread(path).shape[:2] == (700, 1000)


def test_the_chart_starts_at_the_first_full_second():
    assert [s.second for s in _timeline().chart_seconds(until=104.0)] == [1, 2, 3]
    short = Timeline(start=0.0)
    short.record(0.3, 2.0, False)
    assert [s.second for s in short.chart_seconds(until=0.6)] == [0]


def _red_in_lower_half(path) -> bool:
    """Whether the latency panel (the lower half) holds tab:red, the colour of the p95 gate's line."""
    pixels = np.asarray(Image.open(path).convert("RGB"))
    lower = pixels[pixels.shape[0] // 2 :].astype(int)
    return bool((np.abs(lower - (214, 39, 40)).sum(axis=2) < 30).any())


def test_the_chart_draws_the_p95_gate(tmp_path):
    gated, plain = tmp_path / "gated.png", tmp_path / "plain.png"

    _timeline().write_chart(gated, until=104.0, title="identity", p95_gate_ms=60.0)
    _timeline().write_chart(plain, until=104.0, title="identity")

    assert _red_in_lower_half(gated) and not _red_in_lower_half(plain)
