"""The tuning report: a table on the terminal, ``tune.png`` (throughput against p95 per candidate, the SLO
line, the winner marked), ``tune.html`` (the chart, the table, the diff and the reasoning) and ``tune.json``.

Example::

    print(render_table(measurements, winner))
    paths = write_reports(Path("reports"), TuneOutcome(measurements, winner, baseline, diff, reasoning, notes))
"""

from __future__ import annotations

import base64
import dataclasses
import html
import json
from pathlib import Path

from loadtests.tune.measure import Measurement, Slo
from loadtests.tune.space import Candidate

__all__ = ["TuneOutcome", "render_table", "write_reports"]

PREFIX = "tune"


@dataclasses.dataclass(frozen=True, slots=True)
class TuneOutcome:
    """Everything a finished (or stopped) tuning run reports."""

    measurements: tuple[Measurement, ...]
    slo: Slo
    baseline: Candidate | None
    winner: Candidate | None
    diff: str
    reasoning: tuple[str, ...]
    notes: tuple[str, ...]


def _status(measurement: Measurement) -> str:
    if measurement.error is not None:
        return "failed" if not measurement.steps else "cut"
    if not measurement.complete:
        return "cut"
    return "ok" if measurement.sustained is not None else "missed SLO"


def render_table(outcome: TuneOutcome) -> str:
    """One row per measured candidate: the throughput it sustained within the SLO, at what load and latency."""
    rows = [("", "candidate", "status", "users", "req/s", "p95 ms", "queue ms", "seconds", "served by")]
    for measurement in outcome.measurements:
        sustained = measurement.sustained
        mark = "*" if measurement.candidate == outcome.winner else ""
        mark += "b" if measurement.candidate == outcome.baseline else ""
        figures = (
            (str(sustained.users), f"{sustained.rps:.1f}", f"{sustained.p95_ms:g}", _ms(sustained.queue_ms))
            if sustained is not None
            else ("-", "0", "-", "-")
        )
        served = "-" if measurement.served_by == "-" else f"{measurement.served_by} {measurement.ready_s:.2f} s"
        rows.append(
            (mark, measurement.candidate.label, _status(measurement), *figures, f"{measurement.seconds:.0f}", served)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines.append(
        f"(* the winner, b the baseline: the project's current settings; SLO p95 <= {outcome.slo.p95_ms:g} ms; "
        "served by: a start of the service or a reload of its model, and the seconds until it served)"
    )
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def write_chart(path: Path, outcome: TuneOutcome) -> None:
    """Throughput against p95 latency, one line per candidate through its load steps."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(10, 6), constrained_layout=True)
    for measurement in outcome.measurements:
        if not measurement.steps:
            continue
        steps = measurement.steps
        is_winner = measurement.candidate == outcome.winner
        axes.plot(
            [step.p95_ms for step in steps],
            [step.rps for step in steps],
            marker="o",
            linewidth=2.5 if is_winner else 1,
            label=measurement.candidate.label + (" (winner)" if is_winner else ""),
        )
        sustained = measurement.sustained
        if is_winner and sustained is not None:
            axes.scatter(
                [sustained.p95_ms], [sustained.rps], marker="*", s=400, color="gold", edgecolor="black", zorder=5
            )
    axes.axvline(outcome.slo.p95_ms, color="red", linestyle="--", label=f"SLO p95 {outcome.slo.p95_ms:g} ms")
    axes.set_xlabel("p95 latency (ms)")
    axes.set_ylabel("throughput (req/s)")
    axes.set_title("make tune: throughput against p95 latency at rising users, per candidate")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small", loc="best")
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _document(outcome: TuneOutcome) -> dict[str, object]:
    def measured(measurement: Measurement) -> dict[str, object]:
        return {
            "candidate": dataclasses.asdict(measurement.candidate),
            "label": measurement.candidate.label,
            "score_rps": measurement.score,
            "error": measurement.error,
            "complete": measurement.complete,
            "seconds": measurement.seconds,
            "served_by": measurement.served_by,
            "ready_s": measurement.ready_s,
            "steps": [dataclasses.asdict(step) for step in measurement.steps],
        }

    return {
        "slo": dataclasses.asdict(outcome.slo),
        "baseline": None if outcome.baseline is None else dataclasses.asdict(outcome.baseline),
        "winner": None if outcome.winner is None else dataclasses.asdict(outcome.winner),
        "measurements": [measured(m) for m in outcome.measurements],
        "diff": outcome.diff,
        "reasoning": list(outcome.reasoning),
        "notes": list(outcome.notes),
    }


def write_reports(folder: Path, outcome: TuneOutcome) -> list[Path]:
    """Write ``tune.png``, ``tune.html`` and ``tune.json`` into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    chart = folder / f"{PREFIX}.png"
    write_chart(chart, outcome)
    image = base64.b64encode(chart.read_bytes()).decode("ascii")
    sections = [
        "<h1>make tune</h1>",
        f'<img alt="throughput against p95 per candidate" src="data:image/png;base64,{image}">',
        "<h2>Candidates</h2>",
        f"<pre>{html.escape(render_table(outcome))}</pre>",
        "<h2>The winner, as a diff</h2>",
        f"<pre>{html.escape(outcome.diff or '(no change: the current settings are the best found)')}</pre>",
        "<h2>Queue-time target</h2>",
        "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in outcome.reasoning) + "</ul>",
    ]
    if outcome.notes:
        sections += ["<h2>Notes</h2>", "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in outcome.notes) + "</ul>"]
    page = folder / f"{PREFIX}.html"
    page.write_text(
        '<!doctype html>\n<html><head><meta charset="utf-8"><title>make tune</title></head><body>\n'
        + "\n".join(sections)
        + "\n</body></html>\n",
        encoding="utf-8",
    )
    summary = folder / f"{PREFIX}.json"
    summary.write_text(json.dumps(_document(outcome), indent=2) + "\n", encoding="utf-8")
    return [chart, page, summary]
