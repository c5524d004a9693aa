"""Write the objectives of deploy/k8s/base/slo.env into the manifests that act on them.

slo.env holds each objective once; ``make slo`` writes them where Kubernetes and Prometheus read them:
the HorizontalPodAutoscaler's target (hpa.yaml), the thresholds of the PrometheusRule's SLO alerts
(prometheusrule.yaml) and the service's execution timeout (deployment.yaml's EXECUTION_TIMEOUT_S). The
YAML is parsed to find each value, and only that value's text is replaced: comments and layout stay.
``--check`` changes nothing and fails when a file is not as slo.env says (the project's tests run it).

Example::

    python -m tools.slo            # after editing slo.env
    python -m tools.slo --check    # exit status 1, naming the files to rewrite, when they differ
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import yaml

__all__ = [
    "ALERTS",
    "BASE_DIR",
    "EXECUTION_TIMEOUT",
    "HPA_OBJECTIVE",
    "SloAlert",
    "SloError",
    "main",
    "read_objectives",
    "render",
]

BASE_DIR = Path(__file__).resolve().parent.parent / "deploy" / "k8s" / "base"
_NUMBER = re.compile(r"\d+(\.\d+)?")
_HPA_TARGET = ("spec", "metrics", 0, "pods", "target", "averageValue")


class _Edit(NamedTuple):
    """A value of a manifest to write: its node (where its text lies) and the new value."""

    node: yaml.Node
    value: str


class SloError(Exception):
    """slo.env or a manifest is not as this tool expects; the message says where and how to fix it."""


@dataclasses.dataclass(frozen=True, slots=True)
class SloAlert:
    """An alert of the PrometheusRule that fires while ``series`` (seconds, per model) times 1000 stays
    above the objective ``objective`` of slo.env, in milliseconds."""

    alert: str
    series: str
    objective: str

    def expression(self, job: str, threshold: str) -> str:
        """The alert's PromQL for the service's scrape job ``job``."""
        selector = '{job="' + job + '"}'  # built, not formatted: this file is a cookiecutter template
        return f"{self.series}{selector} * 1000 > {threshold}"


ALERTS = (
    SloAlert(
        "TritonLatencyOverSLO", "namespace_model:triton_request_duration_seconds:p95_max", "LOADTEST_P95_MS"
    ),
    SloAlert(
        "TritonQueueTimeHigh", "namespace_model:triton_queue_duration_seconds:mean1m", "QUEUE_TARGET_MS"
    ),
)
"""The PrometheusRule's alerts on an objective of slo.env."""
HPA_OBJECTIVE = "QUEUE_TARGET_MS"
"""The objective the HorizontalPodAutoscaler's target (average queue time per request, ms) comes from."""
EXECUTION_TIMEOUT = "EXECUTION_TIMEOUT_S"
"""The setting (seconds) written into the Deployment's environment variable of the same name."""
_ENV_PREFIX = "{{ cookiecutter.package | upper }}_"
_CONTAINERS = ("spec", "template", "spec", "containers")


def read_objectives(path: Path) -> dict[str, str]:
    """slo.env's objectives, name -> value (a number, as written: milliseconds, or seconds for
    EXECUTION_TIMEOUT_S)."""
    objectives: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, equals, value = line.partition("=")
        if not equals or not _NUMBER.fullmatch(value.strip()):
            raise SloError(
                f"{path}:{number}: expected NAME=<number> (as QUEUE_TARGET_MS=20), got {line!r}: "
                "write a positive number after the name and '='"
            )
        objectives[name.strip()] = value.strip()
    needed = sorted({alert.objective for alert in ALERTS} | {HPA_OBJECTIVE, EXECUTION_TIMEOUT})
    missing = [name for name in needed if name not in objectives]
    if missing:
        raise SloError(f"{path} does not set {', '.join(missing)}: add a line NAME=<number> for each")
    return objectives


def render(base: Path = BASE_DIR) -> dict[Path, str]:
    """The text hpa.yaml, prometheusrule.yaml and deployment.yaml should have under ``base``."""
    objectives = read_objectives(base / "slo.env")
    hpa = base / "hpa.yaml"
    rule = base / "prometheusrule.yaml"
    hpa_node = _node(_compose(hpa), _HPA_TARGET, hpa)
    rule_root = _compose(rule)
    job = _scalar(_node(rule_root, ("metadata", "name"), rule))  # the PodMonitor's job: the service's name
    edits = {
        rule: [
            _Edit(
                _alert_expression(rule_root, alert.alert, rule),
                alert.expression(job, objectives[alert.objective]),
            )
            for alert in ALERTS
        ],
        hpa: [_Edit(hpa_node, objectives[HPA_OBJECTIVE])],
    }
    deployment = base / "deployment.yaml"
    timeout = _container_env(_compose(deployment), _ENV_PREFIX + EXECUTION_TIMEOUT, deployment)
    edits[deployment] = [_Edit(timeout, objectives[EXECUTION_TIMEOUT])]
    return {path: _replace(path.read_text(), changes) for path, changes in edits.items()}


def _compose(path: Path) -> yaml.Node:
    node = yaml.compose(path.read_text())
    if node is None:
        raise SloError(f"{path} is empty: restore it from the template (make update) or version control")
    return node


def _scalar(node: yaml.Node) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise SloError(f"expected a single value at line {node.start_mark.line + 1}, found a {node.id}")
    return str(node.value)


def _children(node: yaml.Node) -> Iterator[tuple[str | int, yaml.Node]]:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield _scalar(key), value
    elif isinstance(node, yaml.SequenceNode):
        yield from enumerate(node.value)


def _node(root: yaml.Node, path: tuple[str | int, ...], file: Path) -> yaml.Node:
    node = root
    for step in path:
        found = dict(_children(node)).get(step)
        if found is None:
            where = ".".join(map(str, path))
            raise SloError(
                f"{file} has no {where}: restore that field (the template's file shows where it goes)"
            )
        node = found
    return node


def _alert_expression(root: yaml.Node, alert: str, file: Path) -> yaml.Node:
    for _, group in _children(_node(root, ("spec", "groups"), file)):
        for _, rule in _children(_node(group, ("rules",), file)):
            fields = dict(_children(rule))
            if "alert" in fields and _scalar(fields["alert"]) == alert and "expr" in fields:
                return fields["expr"]
    raise SloError(
        f"{file} has no alert {alert} with an expr: restore it (tools/slo.py writes its threshold)"
    )


def _container_env(root: yaml.Node, name: str, file: Path) -> yaml.Node:
    for _, container in _children(_node(root, _CONTAINERS, file)):
        for _, variable in _children(dict(_children(container)).get("env") or yaml.SequenceNode("", [])):
            fields = dict(_children(variable))
            if "name" in fields and _scalar(fields["name"]) == name and "value" in fields:
                return fields["value"]
    raise SloError(
        f"{file} sets no {name} with a value in its container's env: restore it (tools/slo.py writes it)"
    )


def _yaml_scalar(value: str, quoted: bool) -> str:
    """``value`` as YAML: plain when it reads back as the same string (and ``quoted`` is false)."""
    if not quoted and yaml.safe_load(f"key: {value}") == {"key": value}:
        return value
    return json.dumps(value)  # a JSON string is a YAML double-quoted scalar


def _replace(text: str, edits: list[_Edit]) -> str:
    """``text`` with each edit's value written over its node's text, last first (offsets stay valid)."""
    for node, value in sorted(edits, key=lambda edit: edit.node.start_mark.index, reverse=True):
        if not isinstance(node, yaml.ScalarNode) or node.style in ("|", ">"):
            raise SloError(
                f"expected a one-line value at line {node.start_mark.line + 1}: write it on one line"
            )
        start, end = node.start_mark.index, node.end_mark.index
        text = text[:start] + _yaml_scalar(value, quoted=node.style is not None) + text[end:]
    return text


def main(argv: list[str] | None = None) -> int:
    """Write slo.env's objectives into hpa.yaml, prometheusrule.yaml and deployment.yaml; with --check, only
    compare."""
    parser = argparse.ArgumentParser(prog="python -m tools.slo", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; fail when a file differs")
    parser.add_argument("--base", type=Path, default=BASE_DIR, help="the manifests' folder (deploy/k8s/base)")
    arguments = parser.parse_args(argv)
    try:
        rendered = render(arguments.base)
    except (SloError, yaml.YAMLError) as error:
        print(f"tools.slo: {error}", file=sys.stderr)
        return 1
    stale = [path for path, text in rendered.items() if path.read_text() != text]
    if arguments.check:
        if stale:
            names = ", ".join(str(path) for path in stale)
            print(
                f"{names}: not as slo.env says; run make slo (python -m tools.slo) to write them",
                file=sys.stderr,
            )
            return 1
        return 0
    for path in stale:
        path.write_text(rendered[path])
        print(f"{path}: written from slo.env")
    return 0


if __name__ == "__main__":
    sys.exit(main())
