"""The monitoring objects of deploy/k8s against the real pieces: promtool, and a live Prometheus.

- ``promtool check rules`` and ``promtool test rules`` (tests/k8s/alerts.test.yaml: every alert firing and
  quiet) on the rendered PrometheusRule.
- A Prometheus started here on loopback scrapes the service (configured with the Deployment's environment,
  labelled as the PodMonitor makes the Prometheus Operator label it, every second instead of every 15 s),
  evaluates the rendered rules, and answers every recording rule, every dashboard query and the query of the
  prometheus-adapter rule that the HorizontalPodAutoscaler reads. The service's model is slowed down
  (tests/slow_service.py) so that an overload makes requests queue: the autoscaling signal must rise above
  the HPA's target, then fall back once the load stops.

Skipped, naming the package, without promtool or prometheus (Debian's and Ubuntu's ``prometheus``).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ACCESS_TOKEN, MODEL_NAMES, Service, start_service
from load import Load
from manifests import DEPLOY_DIR, container, environment, find, render, require_tool
from test_container import report
from tritonrt.ports import free_ports

from {{ cookiecutter.package }}.settings import PREFIX

pytestmark = pytest.mark.k8s

TESTS_DIR = Path(__file__).resolve().parent
# Triton exports these only where it sees a GPU (DCGM): without one their queries return nothing.
GPU_ONLY_METRICS = {
    "nv_gpu_utilization",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_power_usage",
    "nv_gpu_power_limit",
    "nv_energy_consumption",
}
# The metrics the dashboard, the rules and the adapter read: Triton's, tritonrt's and the model's own.
METRIC_NAME = r"\b(?:nv|tritonrt|{{ cookiecutter.package }})_[a-z_]+\b"
# tritonrt's metrics that a model's worker publishes (at 0 with its first answer); the backend's exist once
# the model loads.
WORKER_METRICS = ("tritonrt_batch_reruns_total", "tritonrt_worker_restarts_total")
POD_SUFFIX = "-5d8f7c9b4-x2k7q"  # a pod name as a ReplicaSet makes them
SCRAPE_INTERVAL = "1s"  # the PodMonitor's 15 s, shortened so that the test takes seconds
GRAFANA_RATE_INTERVAL = "1m"  # Grafana's $__rate_interval for a 15 s scrape interval (4 x 15 s)
OVERLOAD_USERS = 8
SIGNAL_TIMEOUT_S = 60  # guards against hanging, not measurements
REST_TIMEOUT_S = 150  # the adapter's 1-minute window must slide past the overload


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render(tmp_path_factory.mktemp("k8s"))["cpu"]


@pytest.fixture(scope="module")
def rules_dir(objects: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rules.yaml (the PrometheusRule's groups, as the Operator hands them to Prometheus) + the unit tests."""
    directory = tmp_path_factory.mktemp("rules")
    (directory / "rules.yaml").write_text(
        yaml.safe_dump(find(objects, "PrometheusRule")["spec"], sort_keys=False)
    )
    shutil.copy(TESTS_DIR / "k8s" / "alerts.test.yaml", directory)
    return directory


def alerts(objects: list[dict[str, Any]]) -> list[str]:
    groups = find(objects, "PrometheusRule")["spec"]["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_checks_the_rules(rules_dir: Path) -> None:
    result = subprocess.run(
        [require_tool("promtool"), "check", "rules", "rules.yaml"],
        cwd=rules_dir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_that_fires_and_one_that_does_not(objects: list[dict[str, Any]]) -> None:
    tests = yaml.safe_load((TESTS_DIR / "k8s" / "alerts.test.yaml").read_text())["tests"]
    cases = [case for test in tests for case in test["alert_rule_test"]]
    fired = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert sorted(fired) == sorted(alerts(objects)) == sorted(quiet)


def test_the_alerts_unit_tests_pass(rules_dir: Path) -> None:
    result = subprocess.run(
        [require_tool("promtool"), "test", "rules", "alerts.test.yaml"],
        cwd=rules_dir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- a live Prometheus ------------------------------------------------------------------------------


@dataclasses.dataclass
class Live:
    """What the live Prometheus answered: at the end of an overload, and the signal over time."""

    exported: set[str]  # the metric names the service exports
    answers: dict[str, list[dict[str, Any]]]  # query -> its result vector, at the end of the overload
    series: dict[str, list[dict[str, str]]]  # series selector -> the series Prometheus holds
    target: float  # the HPA's target for the signal
    overload_signal: float
    rest_signal: float
    failures: list[Any]


class Prometheus:
    """A Prometheus server on a loopback port with the given configuration; queried over its HTTP API."""

    def __init__(self, directory: Path, config: dict[str, Any]) -> None:
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        (port,) = free_ports(1)
        self.url = f"http://127.0.0.1:{port}"
        self.log = directory / "prometheus.log"
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                [
                    require_tool("prometheus"),
                    f"--config.file={directory / 'prometheus.yml'}",
                    f"--storage.tsdb.path={directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                cwd=directory,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while not self._ready():
            assert self.process.poll() is None and time.monotonic() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        with urllib.request.urlopen(
            f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=10
        ) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        return self.api("query", query=promql)["result"]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def dashboard(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (config_map,) = [item for item in objects if item["kind"] == "ConfigMap"]
    return json.loads(next(iter(config_map["data"].values())))


def dashboard_queries(objects: list[dict[str, Any]], namespace: str) -> list[str]:
    """Every panel's query, its variables filled in as Grafana fills them (all models)."""
    values = {"$namespace": namespace, "$model": ".*", "$__rate_interval": GRAFANA_RATE_INTERVAL}
    queries = [target["expr"] for panel in dashboard(objects)["panels"] for target in panel["targets"]]
    return [re.sub(r"\$[_a-z]+", lambda match: values[match.group(0)], query) for query in queries]


def adapter_rule() -> dict[str, Any]:
    (rule,) = yaml.safe_load((DEPLOY_DIR / "prometheus-adapter" / "values.yaml").read_text())["rules"][
        "custom"
    ]
    return rule


def adapter_query(namespace: str, pod: str) -> str:
    """The rule's metricsQuery, filled in as prometheus-adapter fills it for one pod of the namespace."""
    matchers = f'namespace="{namespace}",pod=~"{pod}"'
    return (
        adapter_rule()["metricsQuery"].replace("<<.LabelMatchers>>", matchers).replace("<<.GroupBy>>", "pod")
    )


def recording_rules(objects: list[dict[str, Any]]) -> list[str]:
    groups = find(objects, "PrometheusRule")["spec"]["groups"]
    return [rule["record"] for group in groups for rule in group["rules"] if "record" in rule]


def variable_selectors(objects: list[dict[str, Any]], namespace: str) -> dict[str, str]:
    """The dashboard's query variables: variable name -> the series selector of its label_values()."""
    selectors = {}
    for variable in dashboard(objects)["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"])
            assert match, variable["query"]
            selectors[match.group(2)] = match.group(1).replace("$namespace", namespace)
    return selectors


def exported_metrics(url: str) -> set[str]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    return {re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0) for line in lines if line and line[0] != "#"}


def signal(prometheus: Prometheus, query: str) -> float | None:
    """The autoscaler's signal for the pod now (None before Prometheus has two scrapes to compare)."""
    answer = prometheus.query(query)
    return float(answer[0]["value"][1]) if answer else None


def wait_for(prometheus: Prometheus, query: str, condition: Any, timeout_s: float) -> float | None:
    """Poll the signal until ``condition(value)``; the last value seen (None if there was none)."""
    deadline, value = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        value = signal(prometheus, query)
        if value is not None and condition(value):
            break
        time.sleep(1)
    return value


def start_slow_service(objects: list[dict[str, Any]], directory: Path, batch_s: float) -> Service:
    """The service under the Deployment's environment, its model slowed to ``batch_s`` per batch.

    The token is the tests': the shipped placeholder is refused on purpose."""
    env = {name: value for name, value in environment(objects).items() if name != f"{PREFIX}ACCESS_TOKEN"}
    settings = {name.removeprefix(PREFIX): value for name, value in env.items() if name.startswith(PREFIX)}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            if not name.startswith(PREFIX):
                patch.setenv(name, value)
        patch.setenv("SLOW_SERVICE_BATCH_S", str(batch_s))
        command = [sys.executable, str(TESTS_DIR / "slow_service.py")]
        return start_service(directory / "service.log", command, ACCESS_TOKEN=ACCESS_TOKEN, **settings)


def scrape_config(objects: list[dict[str, Any]], pod: str, metrics_port: int) -> dict[str, Any]:
    """A scrape job for the service, labelled as the Prometheus Operator labels the PodMonitor's targets."""
    deployment, podmonitor = find(objects, "Deployment"), find(objects, "PodMonitor")
    endpoint = podmonitor["spec"]["podMetricsEndpoints"][0]
    namespace = deployment["metadata"]["namespace"]
    labels = {
        "job": deployment["spec"]["template"]["metadata"]["labels"][podmonitor["spec"]["jobLabel"]],
        "namespace": namespace,
        "pod": pod,
        "container": container(deployment)["name"],
        "endpoint": endpoint["port"],
    }
    return {
        "job_name": f"podMonitor/{namespace}/{podmonitor['metadata']['name']}/0",
        "metrics_path": endpoint["path"],
        "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"], "labels": labels}],
    }


@pytest.fixture(scope="module")
def live(
    objects: list[dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
    rules_dir: Path,
    pytestconfig: pytest.Config,
) -> Iterator[Live]:
    directory = tmp_path_factory.mktemp("prometheus")
    require_tool("prometheus")
    deployment = find(objects, "Deployment")
    namespace, pod = deployment["metadata"]["namespace"], deployment["metadata"]["name"] + POD_SUFFIX
    hpa = find(objects, "HorizontalPodAutoscaler")["spec"]
    target = float(hpa["metrics"][0]["pods"]["target"]["averageValue"])
    # Each batch takes 4 x the target: under the overload, requests wait for the batches before theirs.
    service = start_slow_service(objects, directory, batch_s=4 * target / 1000)
    prometheus = None
    try:
        prometheus = Prometheus(directory, {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "rule_files": [str(rules_dir / "rules.yaml")],
            "scrape_configs": [scrape_config(objects, pod, service.metrics_port)],
        })  # fmt: skip
        query = adapter_query(namespace, pod)
        with Load(service.http_url, users=1) as light:  # every series gets samples and rates
            time.sleep(3)
        with Load(service.http_url, users=OVERLOAD_USERS) as overload:
            started = time.monotonic()
            peak = wait_for(prometheus, query, lambda value: value > target, SIGNAL_TIMEOUT_S)
            rise_s = time.monotonic() - started
            time.sleep(3)  # the recording rules and the dashboard's queries see the overload too
            queries = recording_rules(objects) + dashboard_queries(objects, namespace) + [query]
            answers = {promql: prometheus.query(promql) for promql in queries}
            selectors = [adapter_rule()["seriesQuery"], *variable_selectors(objects, namespace).values()]
            series = {selector: prometheus.api("series", **{"match[]": selector}) for selector in selectors}
        stopped = time.monotonic()
        rest = wait_for(prometheus, query, lambda value: value < target, REST_TIMEOUT_S)
        fall_s = time.monotonic() - stopped
        rest_signal = rest if rest is not None else float("inf")
        report(
            pytestconfig,
            f"monitoring figures: queue time {peak or 0:.1f} ms per request {rise_s:.0f} s into an overload, "
            f"{rest_signal:.1f} ms {fall_s:.0f} s after it (target {target:g} ms)",
        )
        failures = light.failures() + overload.failures()
        exported = exported_metrics(f"http://127.0.0.1:{service.metrics_port}")
        yield Live(exported, answers, series, target, peak or 0.0, rest_signal, failures)
    finally:
        if prometheus:
            prometheus.stop()
        assert service.stop() == 0, service.output()


def model_metrics_defined() -> bool:
    """Whether model.py still defines the stub's own metric (a model that replaced it may publish none: the
    dashboard's model panel is then empty)."""
    return hasattr(importlib.import_module("{{ cookiecutter.package }}.model"), "PREDICT_SECONDS")


def is_model_own(query: str) -> bool:
    return "{{ cookiecutter.package }}_" in query


def is_published_by_the_worker(query: str) -> bool:
    """Metrics a model's worker sends with its answers (tritonrt's reruns and restarts, the model's own): a
    model that has answered nothing yet has none of them."""
    return is_model_own(query) or any(name in query for name in WORKER_METRICS)


def is_gpu_only(query: str) -> bool:
    return bool(set(re.findall(r"nv_[a-z_]+", query)) & GPU_ONLY_METRICS)


@pytest.mark.integration
def test_every_request_of_the_load_was_answered(live: Live) -> None:
    assert live.failures == []


@pytest.mark.integration
def test_every_metric_the_queries_read_is_one_triton_exports(
    live: Live, objects: list[dict[str, Any]]
) -> None:
    texts = [
        json.dumps(find(objects, "PrometheusRule")["spec"]),
        json.dumps(dashboard(objects)),
        json.dumps(adapter_rule()),
    ]
    named = {name for text in texts for name in re.findall(METRIC_NAME, text)}
    assert {"nv_inference_queue_duration_us", "tritonrt_instance_busy_seconds_total"} <= named
    if not model_metrics_defined():
        named -= {name for name in named if name.startswith("{{ cookiecutter.package }}_")}
    gpu = bool(live.exported & GPU_ONLY_METRICS)
    missing = {name for name in named - live.exported if gpu or name not in GPU_ONLY_METRICS}
    assert missing == set(), f"not exported by the service: {sorted(missing)}"


@pytest.mark.integration
def test_every_recording_rule_returns_a_series_for_each_model(
    live: Live, objects: list[dict[str, Any]]
) -> None:
    for record in recording_rules(objects):
        assert sorted(series["metric"]["model"] for series in live.answers[record]) == sorted(MODEL_NAMES), (
            record
        )


@pytest.mark.integration
def test_every_dashboard_query_returns_a_series(live: Live, objects: list[dict[str, Any]]) -> None:
    gpu = bool(live.exported & GPU_ONLY_METRICS)
    namespace = find(objects, "Deployment")["metadata"]["namespace"]
    for query in dashboard_queries(objects, namespace):
        if is_gpu_only(query) and not gpu:  # excepted: no GPU here, so Triton exports no GPU metric
            assert live.answers[query] == [], query
            continue
        if is_model_own(query) and not model_metrics_defined():  # excepted: the model has none of its own
            continue
        assert live.answers[query], query
        models = {series["metric"]["model"] for series in live.answers[query] if "model" in series["metric"]}
        if is_published_by_the_worker(query):  # only by models that answered: the load drives MODEL_NAMES[0]
            assert MODEL_NAMES[0] in models and models <= set(MODEL_NAMES), query
        else:
            assert models in (set(), set(MODEL_NAMES)), query


@pytest.mark.integration
def test_the_dashboards_variables_find_the_namespace_and_the_models(
    live: Live, objects: list[dict[str, Any]]
) -> None:
    namespace = find(objects, "Deployment")["metadata"]["namespace"]
    for label, selector in variable_selectors(objects, namespace).items():
        found = {series[label] for series in live.series[selector]}
        assert found == ({namespace} if label == "namespace" else set(MODEL_NAMES)), selector


@pytest.mark.integration
def test_the_adapter_rule_finds_the_pods_series(live: Live, objects: list[dict[str, Any]]) -> None:
    pod = find(objects, "Deployment")["metadata"]["name"] + POD_SUFFIX
    found = live.series[adapter_rule()["seriesQuery"]]
    assert {series["pod"] for series in found} == {pod}
    assert all(series["namespace"] for series in found)


@pytest.mark.integration
def test_the_autoscaling_signal_rises_under_overload_and_falls_back_at_rest(live: Live) -> None:
    assert live.overload_signal > live.target, (
        f"queue time {live.overload_signal:.1f} ms, target {live.target} ms"
    )
    assert live.rest_signal < live.target, (
        f"queue time at rest {live.rest_signal:.1f} ms, target {live.target} ms"
    )
