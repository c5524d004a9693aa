"""Rollouts lose nothing: the image behind a real balancer, replaced and scaled under checked load.

What a Kubernetes rollout and an autoscaler do to the Deployment's pods, done with Docker and HAProxy
(``balancer.py``: it plays the Service's endpoints, health-checking each pod with the readiness probe), every
setting read from the manifest ``make k8s`` renders: the containers run as the kubelet runs the pod
(``test_k8s_kubelet.docker_settings``), and a pod is deleted as the kubelet and the endpoints controller
delete it: the balancer stops routing to it ``ENDPOINTS_LAG_S`` after the deletion (the time Kubernetes
takes to tell every node), while the kubelet runs the preStop pause and then sends SIGTERM, with SIGKILL at
the end of ``terminationGracePeriodSeconds`` (``docker stop -t``). Under steady load over HTTP and gRPC
(``USERS`` client threads each, through the balancer, each sending its own inputs and checking its own
answers):

- rolling replacement: a new pod starts, is ready (the balancer routes to it), then the old one is deleted;
- scale-up from one replica to two (the new one answers requests), then back down to one.

Every request of each phase is answered right (0 failed), requests were answered on both protocols in each
phase, and every deleted pod exits 0 within its grace period. The figures are printed, never asserted.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import numpy as np
import pytest
from balancer import Balancer, Slot
from conftest import assert_outputs_close, outputs_of
from test_container import engine, image, report  # noqa: F401 (fixtures: the engine, the image built here)
from test_k8s_kubelet import docker_settings, objects  # noqa: F401 (fixture: the rendered overlay)
from tritonrt.ports import free_ports

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.client import Client
from {{ cookiecutter.package }}.model import Model

pytestmark = [pytest.mark.container, pytest.mark.k8s, pytest.mark.timeout(900)]

PROTOCOLS = ("http", "grpc")
SLOTS = 3  # the first pod, its replacement, the replica the scale-up adds
USERS = 3  # client threads per protocol
# How long after a pod's deletion the balancer stops routing to it: kube-proxy's default
# --iptables-min-sync-period (1 s); larger clusters and ingress controllers take longer.
ENDPOINTS_LAG_S = 1.0
PROGRESS = 20  # answers per protocol after each change, before the next phase
MAX_REQUESTS = 100_000  # per thread: the load ends even if the test hangs
PROGRESS_TIMEOUT_S = 120  # guards against hanging, not measurements


def own_inputs(k: int) -> dict[str, np.ndarray]:
    """The example request with every number set to ``k % 8`` (booleans to ``k % 2``, bytes as they are):
    one client thread's own request, within the values the example uses."""
    inputs = {}
    for name, value in spec.example_inputs().items():
        if value.dtype.kind == "b":
            inputs[name] = np.full_like(value, k % 2 == 1)
        elif value.dtype.kind in "iuf":
            inputs[name] = np.full_like(value, k % 8)
        else:
            inputs[name] = value
    return inputs


def outputs_for(model: Model, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What the model answers to one sample, computed here without a server."""
    if spec.BATCHING:
        outputs = model.predict(**{name: value[np.newaxis] for name, value in inputs.items()})
        return {name: value[0] for name, value in outputs.items()}
    return model.predict(**inputs)


class CheckedLoad:
    """``USERS`` threads per protocol, each predicting its own inputs back to back and checking the answer;
    answers counted per phase (the phase when the request was sent) and protocol."""

    def __init__(self, urls: dict[str, str]) -> None:
        self.phase = "warm-up"
        self.counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.errors: collections.Counter[str] = collections.Counter()  # "phase, protocol: error" -> times
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        model = Model()
        self._threads = []
        for number, protocol in enumerate(protocol for protocol in PROTOCOLS for _ in range(USERS)):
            inputs = own_inputs(number + 1)
            arguments = (urls[protocol], protocol, inputs, outputs_for(model, inputs))
            self._threads.append(threading.Thread(target=self._run, args=arguments, daemon=True))

    def __enter__(self) -> CheckedLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join()

    def answered(self) -> dict[str, int]:
        """Right answers so far, per protocol, all phases."""
        with self._lock:
            return {p: sum(c[f"{p} ok"] for c in self.counts.values()) for p in PROTOCOLS}

    def wait_progress(self, alive: Callable[[], None]) -> None:
        """Wait until each protocol has ``PROGRESS`` more right answers."""
        start, deadline = self.answered(), time.monotonic() + PROGRESS_TIMEOUT_S
        while any(now < start[p] + PROGRESS for p, now in self.answered().items()):
            alive()
            assert time.monotonic() < deadline, f"no progress in {PROGRESS_TIMEOUT_S} s: {self.errors}"
            time.sleep(0.05)

    def _run(self, url: str, protocol: str, inputs: dict[str, Any], expected: dict[str, np.ndarray]) -> None:
        with Client(url) as client:
            for _ in range(MAX_REQUESTS):
                if self._stopping.is_set():
                    return
                phase, error = self.phase, None
                try:
                    assert_outputs_close(outputs_of(client.predict(**inputs)), expected)
                except Exception as failure:  # a wrong answer too: counted, not raised in this thread
                    error = f"{phase}, {protocol}: {failure!r}"[:600]
                with self._lock:
                    self.counts[phase][f"{protocol} {'failed' if error else 'ok'}"] += 1
                    if error:
                        self.errors[error] += 1


@dataclasses.dataclass
class Pods:
    """The Deployment's pods, one per slot: created as the kubelet runs them, deleted as Kubernetes deletes
    them."""

    engine: docker.DockerClient
    image: str
    settings: dict[str, Any]
    slots: list[Slot]
    balancer: Balancer
    grace_s: int
    pause_s: int  # the preStop sleep
    running: dict[int, docker.models.containers.Container] = dataclasses.field(default_factory=dict)
    exits: list[float] = dataclasses.field(default_factory=list)  # seconds from SIGTERM to exit

    def create(self, slot: int) -> None:
        """Start the slot's pod; return once the balancer routes to it (the readiness probe passed)."""
        ports = {**self.settings["ports"], "8000/tcp": ("127.0.0.1", self.slots[slot].http_port),
                 "8001/tcp": ("127.0.0.1", self.slots[slot].grpc_port)}  # fmt: skip
        self.running[slot] = self.engine.containers.run(
            self.image, detach=True, **{**self.settings, "ports": ports}
        )
        self.balancer.wait_state(slot, "UP", alive=self.alive)

    def delete(self, slot: int) -> None:
        """Out of the endpoints ``ENDPOINTS_LAG_S`` from now; meanwhile the preStop pause, then SIGTERM, then
        SIGKILL at the end of the grace period. The pod must exit 0."""
        container = self.running[slot]
        endpoints = threading.Timer(ENDPOINTS_LAG_S, self.balancer.remove, args=(slot,))
        endpoints.start()
        try:
            time.sleep(self.pause_s)
            signalled = time.monotonic()
            container.stop(timeout=max(self.grace_s - self.pause_s, 1))  # SIGTERM, SIGKILL when it ends
            status = container.wait(timeout=60)["StatusCode"]
            self.exits.append(time.monotonic() - signalled)
            log = container.logs().decode(errors="replace")[-5000:]
        finally:
            endpoints.join()
            container.remove(force=True)
            del self.running[slot]
        assert status == 0, f"the deleted pod exited {status} (137: killed at the grace period's end):\n{log}"

    def alive(self) -> None:
        """Fails the test when a pod's container exited."""
        for slot, container in self.running.items():
            container.reload()
            assert container.status == "running", (
                f"pod{slot} {container.status}:\n{container.logs().decode(errors='replace')[-5000:]}"
            )

    def close(self) -> None:
        for container in self.running.values():
            container.remove(force=True)


@pytest.fixture
def pods(
    engine: docker.DockerClient,  # noqa: F811
    image: str,  # noqa: F811
    objects: list[dict[str, Any]],  # noqa: F811
    tmp_path: Path,
) -> Iterator[Pods]:
    settings, _ = docker_settings(objects)
    deployment = next(item for item in objects if item["kind"] == "Deployment")
    pod_spec = deployment["spec"]["template"]["spec"]
    (main,) = pod_spec["containers"]
    pre_stop = main.get("lifecycle", {}).get("preStop", {})
    pause_s = pre_stop.get("sleep", {}).get("seconds", 0)
    assert set(pre_stop) <= {"sleep"}, f"this test runs a preStop sleep only, not {pre_stop}"
    ports = free_ports(2 * SLOTS + 2)
    slots = [Slot(ports[2 * i], ports[2 * i + 1]) for i in range(SLOTS)]
    with Balancer(tmp_path, slots, main["readinessProbe"], (ports[-2], ports[-1])) as balancer:
        grace_s = pod_spec["terminationGracePeriodSeconds"]
        running = Pods(engine, image, settings, slots, balancer, grace_s, pause_s)
        try:
            yield running
        finally:
            running.close()


def test_a_rolling_replacement_and_a_scale_up_and_down_lose_no_request(
    pods: Pods, pytestconfig: pytest.Config
) -> None:
    balancer = pods.balancer
    for slot in range(SLOTS):  # no pod yet: every slot out of rotation before the load starts
        balancer.wait_state(slot, "DOWN")
    pods.create(0)
    with CheckedLoad({"http": balancer.http_url, "grpc": balancer.grpc_url}) as load:
        load.wait_progress(pods.alive)
        load.phase = "rolling replacement"
        pods.create(1)
        pods.delete(0)
        load.wait_progress(pods.alive)
        load.phase = "scale-up"
        pods.create(2)
        load.wait_progress(pods.alive)
        scaled = balancer.served(2)
        load.phase = "scale-down"
        pods.delete(2)
        load.wait_progress(pods.alive)
    phases = ["rolling replacement", "scale-up", "scale-down"]
    for phase in phases:
        counts = load.counts[phase]
        tally = (f"{p.upper()} {counts[f'{p} ok']} ok {counts[f'{p} failed']} failed" for p in PROTOCOLS)
        report(pytestconfig, f"rollout figures: {phase}: {', '.join(tally)}")
    report(
        pytestconfig,
        f"rollout figures: deleted pods exited {', '.join(f'{s:.1f}' for s in pods.exits)} s after SIGTERM "
        f"(preStop {pods.pause_s} s, grace {pods.grace_s} s); the added replica answered {scaled}",
    )
    failed = {phase: {p: load.counts[phase][f"{p} failed"] for p in PROTOCOLS} for phase in phases}
    assert all(count == 0 for by in failed.values() for count in by.values()), (
        f"requests failed: {failed}; their errors:\n"
        + "\n".join(f"{times} x {error}" for error, times in load.errors.most_common(10))
    )
    for phase in phases:
        assert all(load.counts[phase][f"{p} ok"] > 0 for p in PROTOCOLS), (phase, load.counts[phase])
    assert all(count > 0 for count in scaled.values()), f"the added replica answered nothing: {scaled}"
