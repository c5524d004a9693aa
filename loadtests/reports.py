"""Write a finished run's reports: Locust's CSV and HTML, the per-second timeline CSV and PNG chart,
and a JSON summary of the gates.

Example::

    paths = write_reports(Path("reports"), environment, timeline, until, checks, figures, title="identity")
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

from locust.env import Environment
from locust.html import get_html_report
from locust.stats import PERCENTILES_TO_REPORT, StatsCSV

from loadtests.gates import Check, Figures, passed
from loadtests.timeline import Timeline

PREFIX = "loadtest"


def write_reports(
    folder: Path,
    environment: Environment,
    timeline: Timeline,
    until: float,
    checks: list[Check],
    figures: Figures,
    title: str,
    p95_gate_ms: float | None = None,
) -> list[Path]:
    """Write every report file into ``folder`` (created if needed) and return their paths; the chart draws
    ``p95_gate_ms``, the p95 latency gate, when there is one."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = _write_locust_csv(folder, environment)

    html = folder / f"{PREFIX}_report.html"
    html.write_text(get_html_report(environment, show_download_link=False), encoding="utf-8")
    timeline_csv = folder / f"{PREFIX}_timeline.csv"
    timeline.write_csv(timeline_csv, until)
    chart = folder / f"{PREFIX}_chart.png"
    timeline.write_chart(chart, until, title, p95_gate_ms)

    summary = folder / f"{PREFIX}_summary.json"
    document = {
        "passed": passed(checks),
        "figures": dataclasses.asdict(figures) | {"failure_ratio": figures.failure_ratio},
        "checks": [dataclasses.asdict(check) for check in checks],
    }
    summary.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return [*paths, html, timeline_csv, chart, summary]


def _write_locust_csv(folder: Path, environment: Environment) -> list[Path]:
    """Locust's final request, failure and exception tables, in its usual CSV layout."""
    writer = StatsCSV(environment, PERCENTILES_TO_REPORT)
    tables = {
        "stats": writer.requests_csv,
        "failures": writer.failures_csv,
        "exceptions": writer.exceptions_csv,
    }
    paths = []
    for suffix, write in tables.items():
        path = folder / f"{PREFIX}_{suffix}.csv"
        with open(path, "w", newline="") as handle:
            write(csv.writer(handle))
        paths.append(path)
    return paths
