"""deploy/k8s rendered by ``make k8s``: valid against the Kubernetes and CRD schemas, consistent, scanned.

Every core object is validated against the OpenAPI schema of Kubernetes ``KUBERNETES_VERSION`` in strict
mode (kubernetes-validate), the PodMonitor and the PrometheusRule against prometheus-operator's CRD schemas;
checkov scans the manifests and the Dockerfile. Skipped, naming the tool, without kubectl or checkov.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from manifests import (
    CRD_KINDS,
    DEPLOY_DIR,
    IMAGE,
    KUBERNETES_VERSION,
    NAME,
    OVERLAYS,
    PROJECT,
    PROJECT_DIR,
    container,
    crd_schema,
    deploy_copy,
    environment,
    find,
    quantity,
    render,
    require_tool,
    slo,
)

from {{ cookiecutter.package }}.settings import PREFIX, Settings, SettingsError

pytestmark = pytest.mark.k8s

KINDS = {
    "Namespace",
    "ServiceAccount",
    "Secret",
    "ConfigMap",
    "Service",
    "Deployment",
    "PodDisruptionBudget",
    "NetworkPolicy",
    "HorizontalPodAutoscaler",
    "PodMonitor",
    "PrometheusRule",
}


@pytest.fixture(scope="module")
def overlays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return render(tmp_path_factory.mktemp("k8s"))


@pytest.fixture(scope="module", params=OVERLAYS)
def objects(
    request: pytest.FixtureRequest, overlays: dict[str, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    return overlays[request.param]


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return find(objects, "Deployment")["spec"]["template"]["spec"]


def test_make_k8s_renders_each_overlay_with_the_image(objects: list[dict[str, Any]]) -> None:
    assert {item["kind"] for item in objects} == KINDS
    assert all(item["metadata"].get("namespace", NAME) == NAME for item in objects)
    assert container(find(objects, "Deployment"))["image"] == IMAGE


@pytest.mark.parametrize(
    ("image", "expected"),
    [(f"registry.example.com:5000/team/{PROJECT}:1.2.3", None), (PROJECT, f"{PROJECT}:latest")],
)
def test_make_k8s_takes_a_tag_or_no_tag(tmp_path: Path, image: str, expected: str | None) -> None:
    for objects in render(tmp_path, image).values():
        assert container(find(objects, "Deployment"))["image"] == (expected or image)


def test_core_objects_validate_against_the_kubernetes_schema(objects: list[dict[str, Any]]) -> None:
    for item in objects:
        if item["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(item, KUBERNETES_VERSION, strict=True)
    # Strict means strict: a misspelled field is refused.
    misspelled = copy.deepcopy(find(objects, "Deployment"))
    misspelled["spec"]["template"]["spec"]["terminationGracePeriod"] = 45
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelled, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("kind", CRD_KINDS)
def test_custom_resources_validate_against_their_crd_schemas(
    objects: list[dict[str, Any]], kind: str
) -> None:
    validator = jsonschema.Draft202012Validator(crd_schema(kind))
    resource = find(objects, kind)
    errors = [error.message for error in validator.iter_errors(resource)]
    assert errors == []
    misspelled = copy.deepcopy(resource)
    misspelled["spec"]["selectr" if kind == "PodMonitor" else "group"] = {}
    assert not validator.is_valid(misspelled)


def test_the_pod_runs_as_the_images_user_read_only_without_privileges(objects: list[dict[str, Any]]) -> None:
    match = re.search(r"^USER (\d+):(\d+)$", (PROJECT_DIR / "Dockerfile").read_text(), re.MULTILINE)
    assert match, "the Dockerfile has no numeric USER uid:gid"
    pod = pod_spec(objects)["securityContext"]
    assert (pod["runAsNonRoot"], pod["runAsUser"], pod["runAsGroup"]) == (True, int(match[1]), int(match[2]))
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container(find(objects, "Deployment"))["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}


def test_probes_ask_the_health_endpoints_on_named_ports(objects: list[dict[str, Any]]) -> None:
    main = container(find(objects, "Deployment"))
    assert [port["name"] for port in main["ports"]] == ["http", "grpc", "metrics"]
    assert main["startupProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert main["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    startup = main["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120, (
        "the model gets too little time to load"
    )


def test_every_selector_selects_the_pods(objects: list[dict[str, Any]]) -> None:
    deployment = find(objects, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selectors = [
        deployment["spec"]["selector"]["matchLabels"],
        find(objects, "Service")["spec"]["selector"],
        find(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        find(objects, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"],
        find(objects, "PodMonitor")["spec"]["selector"]["matchLabels"],
        *(
            spread["labelSelector"]["matchLabels"]
            for spread in pod_spec(objects)["topologySpreadConstraints"]
        ),
    ]
    assert all(selector.items() <= labels.items() for selector in selectors), (selectors, labels)
    target = find(objects, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert find(objects, "PodMonitor")["spec"]["jobLabel"] in labels


def test_ports_are_reached_by_name(objects: list[dict[str, Any]]) -> None:
    names = {port["name"] for port in container(find(objects, "Deployment"))["ports"]}
    assert {port["targetPort"] for port in find(objects, "Service")["spec"]["ports"]} == names
    rules = find(objects, "NetworkPolicy")["spec"]["ingress"]
    assert [sorted(port["port"] for port in rule["ports"]) for rule in rules] == [
        ["grpc", "http"],
        ["metrics"],
    ]
    assert rules[1]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    assert find(objects, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["port"] in names


def test_the_grace_period_outlasts_the_prestop_pause_and_the_drain(objects: list[dict[str, Any]]) -> None:
    pod = pod_spec(objects)
    pause = container(find(objects, "Deployment"))["lifecycle"]["preStop"]["sleep"]["seconds"]
    drain = int(environment(objects)[f"{PREFIX}EXIT_TIMEOUT_S"])
    assert pod["terminationGracePeriodSeconds"] > pause + drain


def test_shared_memory_is_memory_backed_and_within_the_memory_limit(objects: list[dict[str, Any]]) -> None:
    pod = pod_spec(objects)
    mounts = {
        mount["mountPath"]: mount["name"] for mount in container(find(objects, "Deployment"))["volumeMounts"]
    }
    volumes = {volume["name"]: volume["emptyDir"] for volume in pod["volumes"]}
    assert set(mounts) == {"/tmp", "/dev/shm"} and set(volumes) == set(mounts.values())
    shm = volumes[mounts["/dev/shm"]]
    assert shm["medium"] == "Memory"
    limits = container(find(objects, "Deployment"))["resources"]["limits"]
    # The tensors' regions are memfds, counted in the memory limit: /dev/shm takes little of it, but at least
    # Docker's default.
    assert 64 * 2**20 <= quantity(shm["sizeLimit"]) <= quantity(limits["memory"]) / 8
    assert all("sizeLimit" in volume for volume in volumes.values())


def test_the_gpu_overlay_asks_for_a_gpu_and_the_cpu_overlay_for_none(
    overlays: dict[str, list[dict[str, Any]]],
) -> None:
    gpu, cpu = (container(find(overlays[name], "Deployment"))["resources"] for name in ("gpu", "cpu"))
    assert gpu["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in cpu["limits"] and "nvidia.com/gpu" not in cpu.get("requests", {})
    tolerations = find(overlays["gpu"], "Deployment")["spec"]["template"]["spec"]["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert "tolerations" not in find(overlays["cpu"], "Deployment")["spec"]["template"]["spec"]


def test_the_objectives_come_from_slo_env(objects: list[dict[str, Any]]) -> None:
    objectives = slo()
    hpa = find(objects, "HorizontalPodAutoscaler")["spec"]
    assert hpa["metrics"][0]["pods"]["target"]["averageValue"] == objectives["QUEUE_TARGET_MS"]
    assert 1 <= hpa["minReplicas"] <= hpa["maxReplicas"]
    alerts = {
        rule["alert"]: rule["expr"]
        for group in find(objects, "PrometheusRule")["spec"]["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert alerts["TritonLatencyOverSLO"].endswith(f" > {objectives['LOADTEST_P95_MS']}")
    assert alerts["TritonQueueTimeHigh"].endswith(f" > {objectives['QUEUE_TARGET_MS']}")


def test_the_load_test_gates_on_the_latency_objective_of_slo_env() -> None:
    # make loadtest and python -m loadtests, run from the project, take their gates from slo.env themselves.
    program = (
        "from loadtests.gates import DEFAULT_SLO_ENV, Gates, read_env_file\n"
        "print(Gates.from_sources({}, {}, read_env_file(DEFAULT_SLO_ENV)).p95_ms)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert float(result.stdout) == float(slo()["LOADTEST_P95_MS"])


def test_make_k8s_writes_a_random_token_when_there_is_none(tmp_path: Path) -> None:
    # The token is never in git (.gitignore): make k8s writes one the service accepts, and keeps it after.
    require_tool("kubectl")
    assert "deploy/k8s/base/access-token" in (PROJECT_DIR / ".gitignore").read_text().splitlines()
    project = deploy_copy(tmp_path / "project")
    token_file = project / "deploy" / "k8s" / "base" / "access-token"
    token_file.unlink(missing_ok=True)
    command = ["make", "--no-print-directory", "k8s", f"IMAGE={IMAGE}", f"K8S_DIR={tmp_path / 'out'}"]
    first = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "wrote a random token to deploy/k8s/base/access-token" in first.stderr
    token = token_file.read_text()
    Settings.from_env({f"{PREFIX}ACCESS_TOKEN": token})  # raises SettingsError for a token it refuses
    for objects in render(tmp_path / "again", project=project).values():
        assert environment(objects)[f"{PREFIX}ACCESS_TOKEN"] == token
        assert token not in json.dumps(find(objects, "Deployment")), "the Deployment must read the Secret"
    assert token_file.read_text() == token


def test_an_old_placeholder_token_is_refused_by_the_service() -> None:
    # Projects generated before the token left git hold this placeholder: the service fails closed on it.
    placeholder = "REPLACE ME: write a random token here (see README, Deploy to Kubernetes)"
    with pytest.raises(SettingsError, match="ACCESS_TOKEN"):
        Settings.from_env({f"{PREFIX}ACCESS_TOKEN": placeholder})


def test_the_dashboard_is_a_configmap_for_grafanas_sidecar(objects: list[dict[str, Any]]) -> None:
    (config_map,) = [item for item in objects if item["kind"] == "ConfigMap"]
    assert config_map["metadata"]["labels"] == {"grafana_dashboard": "1"}
    (text,) = config_map["data"].values()
    dashboard = json.loads(text)
    assert 0 < len(dashboard["uid"]) <= 40
    assert [variable["name"] for variable in dashboard["templating"]["list"]] == [
        "datasource",
        "namespace",
        "model",
    ]
    titles = [panel["title"] for panel in dashboard["panels"]]
    for wanted in (
        "Throughput",
        "Latency",
        "Queue time",
        "Failure",
        "Batch size",
        "GPU utilisation",
        "GPU memory",
    ):
        assert any(wanted in title for title in titles), wanted
    assert all(target["expr"].strip() for panel in dashboard["panels"] for target in panel["targets"])


def checkov(binary: str, path: Path, framework: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [
            binary,
            "--file",
            str(path),
            "--framework",
            framework,
            "--output",
            "json",
            "--skip-download",
            "--quiet",
            "--soft-fail",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reports = json.loads(result.stdout)
    return reports if isinstance(reports, list) else [reports]


def test_checkov_fails_no_check_and_every_skip_says_why(tmp_path: Path) -> None:
    binary = require_tool("checkov")
    render(tmp_path)
    scans = [(tmp_path / f"{overlay}.yaml", "kubernetes") for overlay in OVERLAYS]
    scans.append((PROJECT_DIR / "Dockerfile", "dockerfile"))
    for path, framework in scans:
        for report in checkov(binary, path, framework):
            summary, results = report["summary"], report["results"]
            assert summary["parsing_errors"] == 0 and summary["passed"] > 0, (path, summary)
            failed = [(check["check_id"], check["check_name"]) for check in results.get("failed_checks", [])]
            assert failed == [], path
            skipped = results.get("skipped_checks", [])
            assert all(check.get("suppress_comment", "").strip() for check in skipped), skipped


def test_the_secret_is_never_a_literal_in_the_manifests() -> None:
    for path in DEPLOY_DIR.rglob("*.yaml"):
        text = path.read_text()
        assert "kind: Secret" not in text, (
            f"{path}: the Secret comes from the kustomization's secretGenerator"
        )
        assert not re.search(r"ACCESS_TOKEN\n\s+value:", text), f"{path}: the token must come from the Secret"
