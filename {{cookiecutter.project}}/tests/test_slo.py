"""tools/slo.py: slo.env's objectives written into the HorizontalPodAutoscaler and the SLO alerts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tools.slo import ALERTS, BASE_DIR, SloError, read_objectives, render

PROJECT_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """A copy of deploy/k8s/base to edit."""
    return Path(shutil.copytree(BASE_DIR, tmp_path / "base"))


def set_objectives(base: Path, **values: str) -> None:
    env = base / "slo.env"
    lines = env.read_text().splitlines()
    for name, value in values.items():
        lines = [f"{name}={value}" if line.startswith(f"{name}=") else line for line in lines]
    env.write_text("\n".join(lines) + "\n")


def thresholds(base: Path) -> dict[str, str]:
    """The HPA's target and each SLO alert's expression, as a YAML reader sees them."""
    hpa = yaml.safe_load((base / "hpa.yaml").read_text())
    rules = yaml.safe_load((base / "prometheusrule.yaml").read_text())
    found = {"hpa": hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"]}
    for group in rules["spec"]["groups"]:
        found.update({rule["alert"]: rule["expr"] for rule in group["rules"] if "alert" in rule})
    return found


def test_the_committed_manifests_are_as_slo_env_says() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tools.slo", "--check"],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_new_objectives_are_written_and_nothing_else_changes(base: Path) -> None:
    before = {path: (base / path).read_text() for path in ("hpa.yaml", "prometheusrule.yaml")}
    set_objectives(base, LOADTEST_P95_MS="250", QUEUE_TARGET_MS="7.5")
    assert (
        subprocess.run(
            [sys.executable, "-m", "tools.slo", "--check", "--base", str(base)],
            cwd=PROJECT_DIR,
            capture_output=True,
        ).returncode
        == 1
    )
    for path, text in render(base).items():
        path.write_text(text)
    found = thresholds(base)
    assert found["hpa"] == "7.5"
    assert found["TritonLatencyOverSLO"].endswith(" * 1000 > 250")
    assert found["TritonQueueTimeHigh"].endswith(" * 1000 > 7.5")
    for name, text in before.items():  # only the values' text changed: comments and every other line stay
        old, new = text.splitlines(), (base / name).read_text().splitlines()
        changed = [line for line, was in zip(new, old, strict=True) if line != was]
        assert len(changed) == (1 if name == "hpa.yaml" else 2), changed
    assert render(base) == {path: path.read_text() for path in render(base)}  # written once, stable after


def test_each_alert_compares_its_series_in_ms_for_the_services_job(base: Path) -> None:
    job = yaml.safe_load((base / "prometheusrule.yaml").read_text())["metadata"]["name"]
    objectives = read_objectives(base / "slo.env")
    found = thresholds(base)
    for alert in ALERTS:
        selector = '{job="' + job + '"}'
        assert found[alert.alert] == f"{alert.series}{selector} * 1000 > {objectives[alert.objective]}"


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("QUEUE_TARGET_MS=fast", "expected NAME=<number>"),
        ("QUEUE_TARGET_MS=-3", "expected NAME=<number>"),
    ],
)
def test_a_bad_objective_is_refused_naming_its_line(base: Path, line: str, error: str) -> None:
    (base / "slo.env").write_text(f"LOADTEST_P95_MS=100\n{line}\n")
    with pytest.raises(SloError, match=f"slo.env:2: {error}"):
        render(base)


def test_a_missing_objective_or_alert_is_named(base: Path) -> None:
    (base / "slo.env").write_text("LOADTEST_P95_MS=100\n")
    with pytest.raises(SloError, match="does not set EXECUTION_TIMEOUT_S, QUEUE_TARGET_MS"):
        render(base)
    shutil.copy(BASE_DIR / "slo.env", base / "slo.env")
    rule = base / "prometheusrule.yaml"
    rule.write_text(rule.read_text().replace("alert: TritonQueueTimeHigh", "alert: TritonQueueSlow"))
    with pytest.raises(SloError, match="no alert TritonQueueTimeHigh"):
        render(base)


def test_the_execution_timeout_is_written_into_the_deployment(base: Path) -> None:
    set_objectives(base, EXECUTION_TIMEOUT_S="90")
    for path, text in render(base).items():
        path.write_text(text)
    deployment = yaml.safe_load((base / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    values = {variable["name"]: variable.get("value") for variable in container["env"]}
    assert values["{{ cookiecutter.package | upper }}_EXECUTION_TIMEOUT_S"] == "90"
