"""Container tests: build the service image and run it the way an orchestrator would.

Builds the Dockerfile (``BASE_IMAGE`` from the environment, else the Dockerfile's default; the runtime
from its platform wheel in ``dist/``, made first by ``make runtime-wheel`` when missing; with no network
at all when ``wheels/`` holds wheels, which proves the wheelhouse is complete), starts the image with
shared memory, its ports published and all GPUs when the engine has the NVIDIA runtime, waits for
``/v2/health/ready``, then checks the runtime's backend library in the image, inference over HTTP and
gRPC through the client, a short load test with its gates, the non-root user, the HEALTHCHECK, draining
on SIGTERM, the exit when the service dies, the restart of a tritonserver that died and the access token
kept off every command line.
Prints the image build time, the image size above the base and the time from start to ready. The image
stays tagged ``{{ cookiecutter.project }}:test``, so the next run reuses its layers.

Skipped when no Docker engine answers. Run only these::

    BASE_IMAGE=nvcr.io/nvidia/tritonserver:<tag>-py3 python -m pytest tests/test_container.py
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest
import requests
from conftest import MODEL_NAMES, assert_outputs_close, expected_outputs, skip_or_fail_under_ci
from docker.errors import APIError, DockerException, ImageNotFound
from packaging.utils import canonicalize_name
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.client import Client
from {{ cookiecutter.package }}.settings import PREFIX

pytestmark = [pytest.mark.container, pytest.mark.timeout(1800)]

PROJECT_DIR = Path(__file__).resolve().parents[1]
IMAGE = "{{ cookiecutter.project }}:test"
HTTP, GRPC, METRICS = 8000, 8001, 8002
SHM_SIZE = "256m"  # as make run and the Deployment give
# Guards against hanging, not measurements.
READY_TIMEOUT_S = 300
HEALTHY_TIMEOUT_S = 120
DRAIN_EXIT_TIMEOUT_S = 20  # the service's EXIT_TIMEOUT_S in the drain test
QUEUE_DELAY_US = 3_000_000  # holds requests in the batcher's queue: they are in flight at SIGTERM
IN_FLIGHT = 3


@dataclasses.dataclass
class Running:
    """A started container of the image and its published endpoints."""

    container: DockerContainer
    http_url: str
    grpc_url: str
    metrics_url: str
    ready_s: float

    @property
    def wrapped(self) -> docker.models.containers.Container:
        """The docker-py container, its state refreshed."""
        wrapped = self.container.get_wrapped_container()
        wrapped.reload()
        return wrapped

    def logs(self) -> str:
        return self.wrapped.logs().decode(errors="replace")[-6000:]

    def wait_exit(self, timeout_s: float) -> int:
        """The container's exit code; fails the test if it is still running after ``timeout_s``."""
        try:
            return self.wrapped.wait(timeout=timeout_s)["StatusCode"]
        except requests.exceptions.RequestException as error:  # how docker-py reports the timeout
            pytest.fail(f"the container still runs {timeout_s} s later ({error!r}); its log:\n{self.logs()}")


def report(config: pytest.Config, line: str) -> None:
    """Print ``line`` on the terminal now, even while pytest captures the output of tests and fixtures."""
    capture = config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print(line, flush=True)


@pytest.fixture(scope="module")
def engine() -> docker.DockerClient:
    try:
        client = docker.from_env()
        client.ping()
    except DockerException as error:
        skip_or_fail_under_ci(f"no Docker engine answers ({error}); start Docker to run the container tests")
    # No reaper (Ryuk): it is an image to pull, impossible offline; the fixtures remove their containers.
    testcontainers_config.ryuk_disabled = True
    return client


def base_image() -> str:
    """``$BASE_IMAGE``, else the default of the Dockerfile's ``ARG BASE_IMAGE``."""
    if os.environ.get("BASE_IMAGE"):
        return os.environ["BASE_IMAGE"]
    match = re.search(r"^ARG BASE_IMAGE=(\S+)", (PROJECT_DIR / "Dockerfile").read_text(), re.MULTILINE)
    assert match, "the Dockerfile declares no default for ARG BASE_IMAGE"
    return match.group(1)


def ensure_base(engine: docker.DockerClient, config: pytest.Config, base: str) -> docker.models.images.Image:
    """``base`` from the local engine, else pulled with its progress shown; skips when it cannot be had.

    "pulling" is printed once the registry answers: a name that does not resolve, or a registry that refuses
    the pull, skips at once with the reason, never after a promise of several GB."""
    try:
        return engine.images.get(base)
    except ImageNotFound:
        pass
    layers: dict[str, tuple[int, int]] = {}  # layer -> (bytes downloaded, size)
    done: set[str] = set()
    shown = time.monotonic()
    announced = False
    try:
        for event in engine.api.pull(base, stream=True, decode=True):
            if "error" in event:
                raise APIError(event["error"], explanation=event["error"])
            if not announced:  # the registry answered: the pull is under way
                report(config, f"pulling {base} (once; NGC images are several GB)")
                announced = True
            layer, status = event.get("id"), event.get("status", "")
            detail = event.get("progressDetail") or {}
            if layer and status == "Downloading" and detail.get("total"):
                layers[layer] = (detail.get("current", 0), detail["total"])
            elif layer and status == "Pull complete":
                done.add(layer)
                report(config, f"  layer {layer} done ({len(done)} of {len(layers)} layers)")
            elif not layer:
                report(config, f"  {status}")
            if layers and time.monotonic() - shown > 10:
                shown = time.monotonic()
                current, total = (sum(values) for values in zip(*layers.values(), strict=True))
                report(config, f"  {current / 1e6:.0f} of {total / 1e6:.0f} MB in {len(layers)} layers")
        return engine.images.get(base)
    except (APIError, ImageNotFound) as error:
        why = getattr(error, "explanation", None) or error
        skip_or_fail_under_ci(
            f"the base image {base} is not here and cannot be pulled ({why}). "
            "Offline, build the stand-in base with the template's docker/build_stand_in_base.py "
            "(sudo python docker/build_stand_in_base.py prints its tag) and run again with "
            "BASE_IMAGE=<that tag>; or docker pull / docker load the image where a registry is reachable."
        )


def ensure_runtime_wheel(config: pytest.Config, base: str) -> None:
    """The runtime's platform wheel in dist/, which the Dockerfile installs: ``make runtime-wheel`` when
    there is none (cargo builds tritonrt's backend library; the target says what to do without cargo)."""
    if any((PROJECT_DIR / "dist").glob("tritonrt-*.whl")):
        return
    report(config, "dist/ has no runtime wheel: make runtime-wheel")
    command = ["make", "runtime-wheel", f"PY={sys.executable}", f"BASE_IMAGE={base}"]
    result = subprocess.run(command, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=900)
    output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, f"make runtime-wheel failed:\n{output}"


@pytest.fixture(scope="module")
def image(engine: docker.DockerClient, pytestconfig: pytest.Config) -> str:
    """The service image, built from the Dockerfile; prints build time and size above the base."""
    base = base_image()
    base_size = ensure_base(engine, pytestconfig, base).attrs["Size"]
    ensure_runtime_wheel(pytestconfig, base)
    offline = any((PROJECT_DIR / "wheels").glob("*.whl"))
    report(
        pytestconfig, f"building {IMAGE} on {base}" + (" with no network, from wheels/" if offline else "")
    )
    started = time.monotonic()
    tail: list[str] = []
    for chunk in engine.api.build(
        path=str(PROJECT_DIR),
        tag=IMAGE,
        buildargs={"BASE_IMAGE": base},
        network_mode="none" if offline else None,
        forcerm=True,  # no containers left behind by a failed step
        decode=True,
    ):
        if "error" in chunk:
            pytest.fail(f"docker build failed: {chunk['error']}\n{''.join(tail[-30:])}")
        line = chunk.get("stream", "")
        tail.append(line)
        if line.startswith("Step "):
            report(pytestconfig, "  " + line.strip())
    build_s = time.monotonic() - started
    above_mb = (engine.images.get(IMAGE).attrs["Size"] - base_size) / 1e6
    report(
        pytestconfig,
        f"container figures: image build {build_s:.1f} s, image size above the base {above_mb:.1f} MB",
    )
    return IMAGE


def start(engine: docker.DockerClient, image: str, **settings: str) -> Running:
    """Start ``image`` (``settings``: the service's variables without the prefix) and wait until ready."""
    kwargs = {"shm_size": SHM_SIZE}
    if "nvidia" in engine.info().get("Runtimes", {}):
        kwargs["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    container = DockerContainer(image).with_exposed_ports(HTTP, GRPC, METRICS).with_kwargs(**kwargs)
    for name, value in settings.items():
        container.with_env(PREFIX + name, value)
    started = time.monotonic()
    container.start()
    host = container.get_container_host_ip()
    urls = {port: f"{host}:{container.get_exposed_port(port)}" for port in (HTTP, GRPC, METRICS)}
    running = Running(
        container, f"http://{urls[HTTP]}", f"grpc://{urls[GRPC]}", f"http://{urls[METRICS]}", 0.0
    )
    deadline = started + READY_TIMEOUT_S
    while not _ready(running.http_url):
        status = running.wrapped.status
        if status == "exited" or time.monotonic() > deadline:
            log = running.logs()
            container.stop()
            pytest.fail(f"the container did not become ready ({status}); its log:\n{log}")
        time.sleep(0.2)
    running.ready_s = time.monotonic() - started
    return running


def _ready(http_url: str) -> bool:
    """Server ready (what the HEALTHCHECK asks) and every model ready (the server is ready a moment before
    tritonrt has loaded the models)."""
    paths = ["/v2/health/ready", *(f"/v2/models/{name}/ready" for name in MODEL_NAMES)]
    try:
        for path in paths:
            with urllib.request.urlopen(http_url + path, timeout=2) as response:
                if response.status != 200:
                    return False
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False
    return True


@pytest.fixture(scope="module")
def service(engine: docker.DockerClient, image: str, pytestconfig: pytest.Config) -> Iterator[Running]:
    running = start(engine, image)
    report(pytestconfig, f"container figures: start to ready {running.ready_s:.1f} s")
    try:
        yield running
    finally:
        running.container.stop()


@pytest.fixture
def fresh(engine: docker.DockerClient, image: str) -> Iterator[Callable[..., Running]]:
    """Starts containers of their own, for tests that end them: ``fresh(EXIT_TIMEOUT_S="20")``."""
    started: list[Running] = []

    def start_fresh(**settings: str) -> Running:
        started.append(start(engine, image, **settings))
        return started[-1]

    yield start_fresh
    for running in started:
        running.container.stop()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_client_gets_the_model_outputs(service: Running, protocol: str) -> None:
    url = service.http_url if protocol == "http" else service.grpc_url
    with Client(url) as client:
        prediction = client.predict(**spec.example_inputs())
    assert_outputs_close(dataclasses.asdict(prediction), expected_outputs())


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_short_load_holds_the_gates(service: Running, protocol: str, tmp_path: Path) -> None:
    url = service.http_url if protocol == "http" else service.grpc_url
    command = [sys.executable, "-m", "loadtests", "--url", url, "--protocol", protocol, "--users", "2",
               "--duration", "5s", "--max-failure-ratio", "0", "--reports", str(tmp_path)]  # fmt: skip
    result = subprocess.run(command, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"the load test missed a gate or failed:\n{result.stdout}\n{result.stderr}"


def test_the_runtime_is_installed_with_its_backend_library(service: Running) -> None:
    # From the platform wheel in dist/: the library comes in the package, built outside the image.
    show = "import tritonrt.proxy.native_files as n; print(n.library_path())"
    status, output = service.wrapped.exec_run(["python", "-c", show])
    path = output.decode(errors="replace").strip()
    assert status == 0, path
    shipped = r"/opt/venv/lib/python3\.\d+/site-packages/tritonrt/_native/libtriton_tritonrt\.so"
    assert re.fullmatch(shipped, path), path


def test_the_image_installs_the_locked_versions(service: Running) -> None:
    # The Dockerfile installs within requirements.txt: every package of the image's venv is the lock's, at the
    # version the lock pins for the image's Python (the runtime and the service come from this checkout).
    from tools.image_lock import marker_environment, pins

    listing = (
        "import importlib.metadata as m, json, platform, sysconfig; "
        "site = sysconfig.get_paths()['purelib']; "
        "print(json.dumps({'python': platform.python_version(), 'machine': platform.machine(), "
        "'installed': {d.metadata['Name']: d.version for d in m.distributions(path=[site])}}))"
    )
    status, output = service.wrapped.exec_run(["python", "-c", listing])
    assert status == 0, output.decode(errors="replace")
    image = json.loads(output)
    lock = (PROJECT_DIR / "requirements.txt").read_text()
    locked = pins(lock, marker_environment(image["python"], image["machine"]))
    ours = {"tritonrt", canonicalize_name("{{ cookiecutter.project }}")}
    installed = {canonicalize_name(name): version for name, version in image["installed"].items()}
    differ = {
        name: f"{version} in the image, {locked.get(name, 'not in the lock')}"
        for name, version in sorted(installed.items())
        if name not in ours and locked.get(name) != version
    }
    assert differ == {}, f"the image's packages differ from requirements.txt (make image again): {differ}"
    assert ours <= set(installed), sorted(installed)


def test_the_image_serves_with_the_packaged_weights(service: Running) -> None:
    # The service's wheel carries src/<package>/weights/: the model in the image loads the files from there
    # (the outputs equal those of the model run here, test_the_client_gets_the_model_outputs).
    listing = (
        "import hashlib; from {{ cookiecutter.package }}.model_files import model_dir; "
        "d = model_dir(); print(d); "
        "[print(p.relative_to(d).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest()) "
        "for p in sorted(d.rglob('*')) if p.is_file()]"
    )
    status, output = service.wrapped.exec_run(["python", "-c", listing])
    lines = output.decode(errors="replace").splitlines()
    assert status == 0, lines
    installed = r"/opt/venv/lib/python3\.\d+/site-packages/{{ cookiecutter.package }}/weights"
    assert re.fullmatch(installed, lines[0]), lines[0]
    weights = PROJECT_DIR / "src" / "{{ cookiecutter.package }}" / "weights"
    local = [f"{path.relative_to(weights).as_posix()} {hashlib.sha256(path.read_bytes()).hexdigest()}"
             for path in sorted(weights.rglob("*")) if path.is_file()]  # fmt: skip
    assert lines[1:] == local


def test_every_process_runs_as_non_root(engine: docker.DockerClient, service: Running) -> None:
    top = engine.api.top(service.wrapped.id)
    uid = top["Titles"].index("UID")
    commands = [" ".join(process[top["Titles"].index("CMD") :]) for process in top["Processes"]]
    assert any("tritonserver" in command for command in commands), commands
    assert all(process[uid] not in ("0", "root") for process in top["Processes"]), top["Processes"]


def test_the_healthcheck_reports_healthy(service: Running) -> None:
    deadline = time.monotonic() + HEALTHY_TIMEOUT_S
    while (status := service.wrapped.attrs["State"]["Health"]["Status"]) == "starting":
        assert time.monotonic() < deadline, f"still 'starting' after {HEALTHY_TIMEOUT_S} s"
        time.sleep(1)
    assert status == "healthy", service.wrapped.attrs["State"]["Health"]


def _pending_requests(metrics_url: str) -> float:
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    pattern = (
        r'^nv_inference_pending_request_count\{model="' + re.escape(spec.MODEL_NAME) + r'",[^}]*\} (\S+)$'
    )
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_sigterm_drains_in_flight_requests_and_exits_0(fresh: Callable[..., Running]) -> None:
    if not spec.BATCHING:
        pytest.skip(
            "the dynamic batcher's queue delay holds the requests in flight; this model does not batch"
        )
    running = fresh(MAX_QUEUE_DELAY_US=str(QUEUE_DELAY_US), EXIT_TIMEOUT_S=str(DRAIN_EXIT_TIMEOUT_S))
    inputs = spec.example_inputs()
    with contextlib.ExitStack() as stack:
        clients = [stack.enter_context(Client(running.http_url)) for _ in range(IN_FLIGHT)]
        pool = stack.enter_context(concurrent.futures.ThreadPoolExecutor(IN_FLIGHT))
        # Connected and warm (one batch, one queue delay): the requests below go out at once.
        list(pool.map(lambda client: client.predict(**inputs), clients))
        futures = [pool.submit(client.predict, **inputs) for client in clients]
        while _pending_requests(running.metrics_url) < IN_FLIGHT:
            assert not any(future.done() for future in futures), "a request finished before all were queued"
            time.sleep(0.05)
        running.wrapped.kill(signal="SIGTERM")
        for future in futures:
            assert_outputs_close(dataclasses.asdict(future.result()), expected_outputs())
    assert running.wait_exit(DRAIN_EXIT_TIMEOUT_S + 30) == 0, running.logs()


def test_the_container_exits_non_zero_when_the_service_dies(fresh: Callable[..., Running]) -> None:
    running = fresh()
    module = "{{ cookiecutter.package }}"
    kill = (
        "import os, signal\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        with open(f'/proc/{pid}/cmdline', 'rb') as f:\n"
        "            command = f.read().split(b'\\0')\n"
        "    except OSError:  # gone meanwhile\n"
        "        continue\n"
        f"    if command[:3] == [b'python', b'-m', b'{module}']:\n"
        "        os.kill(int(pid), signal.SIGKILL)\n"
        "        print(pid)\n"
    )
    # Its exit status does not count: the container may end, and take it along, before it exits.
    _, output = running.wrapped.exec_run(["python", "-c", kill])
    assert re.fullmatch(rb"\d+\s*", output), f"no `python -m {module}` process was killed: {output!r}"
    assert running.wait_exit(60) != 0, running.logs()
    assert running.wrapped.status == "exited"


def test_no_command_line_in_the_container_shows_the_access_token(
    engine: docker.DockerClient, service: Running
) -> None:
    # Docker's default seccomp profile lets a process trace its child: the guard hides the token's argument.
    top = engine.api.top(service.wrapped.id, ps_args="-eo pid,args")
    commands = [" ".join(process[top["Titles"].index("COMMAND") :]) for process in top["Processes"]]
    server = [command for command in commands if "bin/tritonserver" in command]
    hidden = "--http-restricted-api=(hidden by tritonrt)"
    assert server and all(hidden in command for command in server), commands
    assert not any("triton-access-token=" in command for command in commands), commands


def test_a_dead_tritonserver_is_restarted_in_the_container(fresh: Callable[..., Running]) -> None:
    running = fresh()
    kill = (
        "import os, signal\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        with open(f'/proc/{pid}/cmdline', 'rb') as f:\n"
        "            command = f.read().split(b'\\0')\n"
        "    except OSError:  # gone meanwhile\n"
        "        continue\n"
        "    if command[0].endswith(b'/bin/tritonserver'):\n"
        "        os.kill(int(pid), signal.SIGKILL)\n"
        "        print(pid)\n"
    )
    _, output = running.wrapped.exec_run(["python", "-c", kill])
    assert re.fullmatch(rb"\d+\s*", output), f"no tritonserver was killed: {output!r}"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while "tritonserver restarted" not in running.logs() or not _ready(running.http_url):
        assert running.wrapped.status == "running", running.logs()
        assert time.monotonic() < deadline, running.logs()
        time.sleep(0.2)
    with Client(running.http_url) as client:
        assert_outputs_close(dataclasses.asdict(client.predict(**spec.example_inputs())), expected_outputs())
