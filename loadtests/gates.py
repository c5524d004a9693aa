"""SLO gates: thresholds from options, environment variables or the project's ``slo.env``, checked against a run's
figures.

Example::

    slo = read_env_file(DEFAULT_SLO_ENV)                          # {"LOADTEST_P95_MS": "100", ...}
    gates = Gates.from_sources({"p95_ms": 50.0}, os.environ, slo, str(DEFAULT_SLO_ENV))
    checks = evaluate(gates, Figures(requests=900, failures=0, p50_ms=3, p95_ms=9, p99_ms=14, rps=30.0))
    print(render_table(checks))
    passed = all(c.passed for c in checks)

Each gate comes from its option, else its ``LOADTEST_*`` environment variable, else the same variable's line in
``slo.env`` (a generated project's ``deploy/k8s/base/slo.env``, where the service's objectives are set once),
else its default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from loadtests.errors import LoadTestSetupError

__all__ = [
    "DEFAULT_SLO_ENV",
    "ENV_VARS",
    "Check",
    "Figures",
    "Gates",
    "evaluate",
    "passed",
    "read_env_file",
    "render_table",
]

# A generated project's objectives, relative to its root (where `make loadtest` and `python -m loadtests` run).
DEFAULT_SLO_ENV = Path("deploy/k8s/base/slo.env")

ENV_VARS: dict[str, str] = {
    "p50_ms": "LOADTEST_P50_MS",
    "p95_ms": "LOADTEST_P95_MS",
    "p99_ms": "LOADTEST_P99_MS",
    "max_failure_ratio": "LOADTEST_MAX_FAILURE_RATIO",
    "min_rps": "LOADTEST_MIN_RPS",
}


@dataclasses.dataclass(frozen=True)
class Gates:
    """Thresholds; None means not gated. Failures are gated at 0 unless loosened. ``origins``: where each gate
    that did not come from an option or the environment was read (field -> file)."""

    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_failure_ratio: float | None = 0.0
    min_rps: float | None = None
    origins: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)

    @classmethod
    def from_sources(
        cls,
        options: Mapping[str, float | None],
        environ: Mapping[str, str],
        slo: Mapping[str, str] | None = None,
        slo_name: str = "slo.env",
    ) -> Gates:
        """Each gate from ``options`` when given there, else from its ``LOADTEST_*`` variable, else from that
        variable in ``slo`` (the lines of ``slo_name``, see :func:`read_env_file`), else the default."""
        values: dict[str, float | None] = {}
        origins: dict[str, str] = {}
        for field, variable in ENV_VARS.items():
            value = options.get(field)
            if value is None and environ.get(variable, "").strip():
                value = _parse_env(variable, environ[variable])
            elif value is None and slo is not None and slo.get(variable, "").strip():
                value = _parse_env(variable, slo[variable], f" in {slo_name}")
                origins[field] = slo_name
            if value is not None:
                _check_range(field, value)
                values[field] = value
        return cls(**values, origins=origins)


def read_env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines of an env file such as slo.env (comments and blank lines skipped)."""
    if not path.is_file():
        raise LoadTestSetupError(f"no {path}: run from the project root or pass --slo-env PATH")
    values = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, equals, value = line.partition("=")
        if equals and not name.lstrip().startswith("#"):
            values[name.strip()] = value.strip()
    return values


def _parse_env(variable: str, text: str, where: str = "") -> float:
    try:
        return float(text)
    except ValueError:
        raise LoadTestSetupError(f"{variable}={text!r}{where} is not a number; set it like {variable}=50") from None


def _check_range(field: str, value: float) -> None:
    if value < 0 or (field == "max_failure_ratio" and value > 1):
        limits = "between 0 and 1" if field == "max_failure_ratio" else ">= 0"
        raise LoadTestSetupError(f"gate {field} must be {limits}, got {value}")


@dataclasses.dataclass(frozen=True)
class Figures:
    """What a run measured: request counts, latency percentiles (ms), throughput, errors raised by user code."""

    requests: int
    failures: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    rps: float
    user_errors: int = 0

    @property
    def failure_ratio(self) -> float:
        return self.failures / self.requests if self.requests else 0.0


@dataclasses.dataclass(frozen=True)
class Check:
    """One row of the gate table; ``passed`` is None for a figure shown without a threshold."""

    name: str
    threshold: str
    actual: str
    passed: bool | None


def evaluate(gates: Gates, figures: Figures) -> list[Check]:
    """Every figure against its gate. Two checks always apply: some requests completed, user code raised nothing."""
    checks = [
        _at_most(f"p{p} latency", getattr(gates, f"p{p}_ms"), getattr(figures, f"p{p}_ms"), "{:.1f} ms")
        for p in (50, 95, 99)
    ]
    checks.append(_at_most("failure ratio", gates.max_failure_ratio, figures.failure_ratio, "{:.2%}"))
    rps = figures.rps
    if gates.min_rps is None:
        checks.append(Check("throughput", "-", f"{rps:.1f} rps", None))
    else:
        checks.append(Check("throughput", f">= {gates.min_rps:g} rps", f"{rps:.1f} rps", rps >= gates.min_rps))
    checks.append(Check("requests completed", ">= 1", str(figures.requests), figures.requests >= 1))
    checks.append(Check("errors in user code", "= 0", str(figures.user_errors), figures.user_errors == 0))
    return checks


def _at_most(name: str, threshold: float | None, actual: float, fmt: str) -> Check:
    if threshold is None:
        return Check(name, "-", fmt.format(actual), None)
    return Check(name, "<= " + fmt.format(threshold), fmt.format(actual), actual <= threshold)


def passed(checks: list[Check]) -> bool:
    """True when no check failed."""
    return all(check.passed is not False for check in checks)


def render_table(checks: list[Check]) -> str:
    """The gate table as aligned text, one row per check, with PASS/FAIL (or "-" when not gated)."""
    rows = [("gate", "threshold", "actual", "result")]
    for check in checks:
        result = "-" if check.passed is None else ("PASS" if check.passed else "FAIL")
        rows.append((check.name, check.threshold, check.actual, result))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
