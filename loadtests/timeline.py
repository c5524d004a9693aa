"""Per-second throughput and latency percentiles of a run, written as CSV and drawn as a PNG chart.

Example::

    timeline = Timeline(start=time.monotonic())
    timeline.record(time.monotonic(), response_time_ms=4.2, failed=False)   # once per request
    timeline.write_csv("reports/loadtest_timeline.csv")
    timeline.write_chart("reports/loadtest_chart.png", title="identity @ http://localhost:8000", p95_gate_ms=50)
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np


@dataclasses.dataclass(frozen=True)
class Second:
    """One second of the run: how many requests ended in it, how many failed, latency percentiles (ms)."""

    second: int
    users: int
    requests: int
    failures: int
    p50_ms: float
    p95_ms: float
    p99_ms: float


class Timeline:
    """Collects request latencies into one-second buckets; memory stays bounded by the run's length."""

    def __init__(self, start: float) -> None:
        self._start = start
        self._seconds: list[Second] = []
        self._current = 0
        self._latencies: list[float] = []
        self._failures = 0
        self._users = 0

    def record(self, timestamp: float, response_time_ms: float, failed: bool) -> None:
        """Count one finished request (``timestamp`` on the same clock as ``start``)."""
        self._advance(timestamp)
        self._latencies.append(response_time_ms)
        self._failures += int(failed)

    def set_users(self, timestamp: float, users: int) -> None:
        """Note how many users were running at ``timestamp`` (a second shows the count last noted in it)."""
        self._advance(timestamp)  # the seconds before ``timestamp`` keep the count noted in them
        self._users = users

    def seconds(self, until: float) -> list[Second]:
        """Every whole second from the start to ``until``, idle ones included. The unfinished last second is
        left out (its rate would mislead) unless the run was shorter than a second.
        """
        self._advance(until)
        return list(self._seconds) or [self._bucket()]

    def chart_seconds(self, until: float) -> list[Second]:
        """The seconds the chart draws: from the first full one (second 0 is the users' start-up)."""
        rows = self.seconds(until)
        return rows[1:] if len(rows) > 1 else rows

    def _advance(self, timestamp: float) -> None:
        second = max(int(timestamp - self._start), self._current)
        while self._current < second:
            self._seconds.append(self._bucket())
            self._current += 1
            self._latencies, self._failures = [], 0

    def _bucket(self) -> Second:
        if self._latencies:
            p50, p95, p99 = (float(v) for v in np.percentile(self._latencies, [50, 95, 99]))
        else:
            p50 = p95 = p99 = float("nan")
        return Second(self._current, self._users, len(self._latencies), self._failures, p50, p95, p99)

    def write_csv(self, path: str | Path, until: float) -> None:
        """One row per second: second, users, requests/s, failures/s, p50/p95/p99 in ms (empty when idle)."""
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["second", "users", "requests_per_s", "failures_per_s", "p50_ms", "p95_ms", "p99_ms"])
            for s in self.seconds(until):
                latencies = ["" if np.isnan(v) else f"{v:.3f}" for v in (s.p50_ms, s.p95_ms, s.p99_ms)]
                writer.writerow([s.second, s.users, s.requests, s.failures, *latencies])

    def write_chart(self, path: str | Path, until: float, title: str, p95_gate_ms: float | None = None) -> None:
        """A PNG with throughput (and failures, users) on top and latency percentiles below, over time.

        It draws ``chart_seconds``: second 0, while the users start, is left out (the CSV keeps it).
        ``p95_gate_ms`` draws the p95 gate as a dashed red line.
        """
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
        from matplotlib.ticker import MaxNLocator

        rows = self.chart_seconds(until)
        x = [s.second for s in rows]
        figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 7), constrained_layout=True)
        top.plot(x, [s.requests for s in rows], label="requests/s", color="tab:blue")
        top.plot(x, [s.failures for s in rows], label="failures/s", color="tab:red")
        top.set_ylabel("per second")
        users = top.twinx()
        users.step(x, [s.users for s in rows], where="post", label="users", color="tab:gray", linestyle="--")
        users.set_ylabel("users")
        users.set_ylim(bottom=0)
        users.yaxis.set_major_locator(MaxNLocator(integer=True))
        handles = top.get_legend_handles_labels()[0] + users.get_legend_handles_labels()[0]
        top.legend(handles=handles, loc="upper left")
        top.set_title(title)
        for name, color in (("p50_ms", "tab:green"), ("p95_ms", "tab:orange"), ("p99_ms", "tab:purple")):
            bottom.plot(x, [getattr(s, name) for s in rows], marker=".", label=name[:3], color=color)
        if p95_gate_ms is not None:
            bottom.axhline(p95_gate_ms, color="tab:red", linestyle="--", label=f"p95 gate ({p95_gate_ms:g} ms)")
        bottom.set_ylabel("latency (ms)")
        bottom.set_xlabel("seconds since start")
        bottom.set_ylim(bottom=0)
        bottom.legend(loc="upper left")
        for axis in (top, bottom):
            axis.grid(alpha=0.3)
        figure.savefig(path, dpi=100)
        plt.close(figure)
