"""The image run the way the kubelet runs the Deployment's pod: a contract test, with Docker in its place.

No cluster runs here; what a kubelet would do with the pod is done with Docker, every setting read from
the manifest ``make k8s`` renders (the cpu overlay; gpu where the engine has the NVIDIA runtime), none
restated: a read-only root with a tmpfs for each emptyDir, ``/dev/shm`` sized by its emptyDir's limit, the
uid and gid, no capabilities, no privilege escalation, the memory and CPU limits, the environment with the
Secret's value. The token comes from a copy of deploy/ where the placeholder is replaced, as the README says.

Then the probes, as the kubelet sends them (paths, ports, periods, timeouts, thresholds): ready within the
startup probe's budget, inference through the published ports, probes answered under load; then the
preStop pause and SIGTERM under load: every request sent before SIGTERM is answered, and the container
exits 0 within terminationGracePeriodSeconds.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import docker
import pytest
import requests
from conftest import MODEL_NAMES, assert_outputs_close, expected_outputs, outputs_of
from load import Load
from manifests import container, deploy_copy, environment, find, quantity, render
from test_container import engine, image, report  # noqa: F401 (fixtures: the engine, the image built here)

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.client import Client
from {{ cookiecutter.package }}.settings import PREFIX

pytestmark = [pytest.mark.container, pytest.mark.k8s, pytest.mark.timeout(1800)]

LOAD_USERS = 8
LOADED_PROBE_ROUNDS = 2  # liveness periods during which the probes are sent under load


@dataclasses.dataclass
class Pod:
    """The container started under the Deployment's settings, and where its named ports are published."""

    container: docker.models.containers.Container
    urls: dict[str, str]  # port name -> http://127.0.0.1:<published port>
    spec: dict[str, Any]  # the Deployment's container
    pod_spec: dict[str, Any]
    started: float
    token: str


@pytest.fixture(scope="module")
def objects(engine: docker.DockerClient, image: str, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:  # noqa: F811
    """The overlay for this engine, rendered for the test image from a copy of deploy/ with a real token."""
    copy = deploy_copy(tmp_path_factory.mktemp("project"))
    (copy / "deploy" / "k8s" / "base" / "access-token").write_text(secrets.token_urlsafe(32) + "\n")
    overlay = "gpu" if "nvidia" in engine.info().get("Runtimes", {}) else "cpu"
    return render(copy / "build", image, project=copy)[overlay]


def docker_settings(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """docker run's settings for the Deployment's pod, and the ones adapted to this host (to report)."""
    pod_spec = find(objects, "Deployment")["spec"]["template"]["spec"]
    main, notes = container(find(objects, "Deployment")), []
    pod_security, security = pod_spec["securityContext"], main["securityContext"]
    assert pod_security["runAsNonRoot"] and pod_security["runAsUser"] != 0
    volumes = {volume["name"]: volume["emptyDir"] for volume in pod_spec["volumes"]}
    tmpfs, shm_size = {}, None
    for mount in main["volumeMounts"]:
        empty_dir = volumes[mount["name"]]
        size = int(quantity(empty_dir["sizeLimit"]))
        if mount["mountPath"] == "/dev/shm":
            assert empty_dir["medium"] == "Memory"
            shm_size = size
        else:  # an emptyDir on the node's disk: writable, executable, at most sizeLimit
            tmpfs[mount["mountPath"]] = f"rw,exec,nosuid,nodev,size={size}"
    limits = main["resources"]["limits"]
    cpus = quantity(limits["cpu"])
    if cpus > (os.cpu_count() or 1):
        notes.append(f"CPU limit {limits['cpu']} lowered to this host's {os.cpu_count()} CPUs")
        cpus = os.cpu_count() or 1
    settings = {
        "read_only": security["readOnlyRootFilesystem"],
        "user": f"{pod_security['runAsUser']}:{pod_security['runAsGroup']}",
        "group_add": [str(pod_security["fsGroup"])],
        "cap_drop": security["capabilities"]["drop"],
        "security_opt": [] if security["allowPrivilegeEscalation"] else ["no-new-privileges"],
        "tmpfs": tmpfs,
        "shm_size": shm_size,
        "mem_limit": int(quantity(limits["memory"])),
        "nano_cpus": int(cpus * 1e9),
        "environment": environment(objects),
        "ports": {f"{port['containerPort']}/tcp": ("127.0.0.1", None) for port in main["ports"]},
    }
    if "nvidia.com/gpu" in limits:
        gpus = int(limits["nvidia.com/gpu"])
        settings["device_requests"] = [docker.types.DeviceRequest(count=gpus, capabilities=[["gpu"]])]
    return settings, notes


@pytest.fixture(scope="module")
def pod(
    engine: docker.DockerClient,  # noqa: F811
    image: str,  # noqa: F811
    objects: list[dict[str, Any]],
    pytestconfig: pytest.Config,
) -> Iterator[Pod]:
    main = container(find(objects, "Deployment"))
    assert main["image"] == image
    settings, notes = docker_settings(objects)
    for note in notes:
        report(pytestconfig, f"kubelet contract: {note}")
    started = time.monotonic()
    running = engine.containers.run(image, detach=True, **settings)
    try:
        running.reload()
        urls = {}
        for port in main["ports"]:
            published = running.ports[f"{port['containerPort']}/tcp"][0]["HostPort"]
            urls[port["name"]] = f"http://127.0.0.1:{published}"
        token = settings["environment"][f"{PREFIX}ACCESS_TOKEN"].strip()
        pod_spec = find(objects, "Deployment")["spec"]["template"]["spec"]
        yield Pod(running, urls, main, pod_spec, started, token)
    finally:
        running.remove(force=True)


def probe(pod: Pod, kind: str) -> bool:
    """One probe, as the kubelet sends it: GET on the named port, within timeoutSeconds, 200-399 passes."""
    settings = pod.spec[kind]
    get = settings["httpGet"]
    try:
        with urllib.request.urlopen(
            pod.urls[get["port"]] + get["path"], timeout=settings["timeoutSeconds"]
        ) as r:
            return 200 <= r.status < 400
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


@pytest.fixture(scope="module")
def ready(pod: Pod, pytestconfig: pytest.Config) -> float:
    """The startup probe's loop: seconds from the container's start to its first success."""
    startup = pod.spec["startupProbe"]
    time.sleep(startup.get("initialDelaySeconds", 0))
    for _ in range(startup["failureThreshold"]):
        if probe(pod, "startupProbe"):
            seconds = time.monotonic() - pod.started
            report(
                pytestconfig, f"kubelet contract: the startup probe passed {seconds:.1f} s after the start"
            )
            return seconds
        pod.container.reload()
        assert pod.container.status == "running", pod.container.logs().decode(errors="replace")[-5000:]
        time.sleep(startup["periodSeconds"])
    budget = startup.get("initialDelaySeconds", 0) + startup["periodSeconds"] * startup["failureThreshold"]
    pytest.fail(f"not ready within the startup budget ({budget} s): the kubelet would restart the container")


def test_ready_within_the_startup_budget_then_ready_and_live(pod: Pod, ready: float) -> None:
    startup = pod.spec["startupProbe"]
    assert (
        ready
        <= startup.get("initialDelaySeconds", 0) + startup["periodSeconds"] * startup["failureThreshold"]
    )
    assert probe(pod, "readinessProbe") and probe(pod, "livenessProbe")


@pytest.mark.parametrize("port", ["http", "grpc"])
def test_inference_through_the_named_ports(pod: Pod, ready: float, port: str) -> None:
    url = pod.urls[port].replace("http://", "grpc://") if port == "grpc" else pod.urls[port]
    with Client(url) as client:
        assert_outputs_close(outputs_of(client.predict(**spec.example_inputs())), expected_outputs())
        if spec.BATCHING:  # the largest batch fits in the memory the pod is given
            batch = client.predict_batch(**spec.example_inputs(spec.MAX_BATCH_SIZE))
            assert_outputs_close(outputs_of(batch), expected_outputs(spec.MAX_BATCH_SIZE))


def test_the_secrets_token_unlocks_the_restricted_endpoints(pod: Pod, ready: float) -> None:
    url = f"{pod.urls['http']}/v2/models/{MODEL_NAMES[0]}/stats"
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(url, timeout=10)
    request = urllib.request.Request(url, headers={"triton-access-token": pod.token})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_probes_pass_under_load_and_sigterm_drains_it(
    pod: Pod, ready: float, pytestconfig: pytest.Config
) -> None:
    readiness_period = pod.spec["readinessProbe"]["periodSeconds"]
    liveness_period = pod.spec["livenessProbe"]["periodSeconds"]
    pause = pod.spec["lifecycle"]["preStop"]["sleep"]["seconds"]
    grace = pod.pod_spec["terminationGracePeriodSeconds"]
    with Load(pod.urls["http"], users=LOAD_USERS) as load:
        for elapsed in range(0, LOADED_PROBE_ROUNDS * liveness_period, readiness_period):
            assert probe(pod, "readinessProbe"), "not ready under load: the pod would leave the Service"
            if elapsed % liveness_period == 0:
                assert probe(pod, "livenessProbe"), "not live under load: the kubelet would count a failure"
            time.sleep(readiness_period)
        # Deletion: the kubelet runs preStop (traffic still arrives meanwhile), then sends SIGTERM. The pod
        # has left the Service's endpoints by then: no request is sent after SIGTERM.
        time.sleep(pause)
        load.halt()
        signalled = time.monotonic()
        pod.container.kill(signal="SIGTERM")
    in_flight = [request for request in load.requests if request.started < signalled < request.ended]
    before = [request for request in load.requests if request.started < signalled]
    assert [request for request in before if request.error] == []
    try:
        exit_status = pod.container.wait(timeout=grace - pause)["StatusCode"]
    except requests.exceptions.RequestException:  # how docker-py reports the timeout
        pytest.fail(f"still running {grace - pause} s after SIGTERM: the kubelet would have sent SIGKILL")
    exit_s = time.monotonic() - signalled
    report(
        pytestconfig,
        f"kubelet contract: {len(before)} requests answered, {len(in_flight)} of them in flight at SIGTERM; "
        f"exit {exit_status} {exit_s:.1f} s after SIGTERM (grace period {grace} s, preStop {pause} s)",
    )
    assert exit_status == 0, pod.container.logs().decode(errors="replace")[-5000:]
    assert exit_s <= grace - pause
    assert in_flight, "no request was in flight at SIGTERM: the drain was not tested"
