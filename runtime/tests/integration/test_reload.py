"""Model control without a restart: a load with a config override changes a bound model's max_batch_size,
dynamic batcher and instance count while it serves, in both worker modes; the new instances connect while
the old ones finish; an override the callables cannot serve is refused and the model serves on as it was."""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import threading
import time

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tritonrt.decorators import batch
from tritonrt.model_config import ModelConfig, Tensor

# tritonserver 2.51 crashes now and then when models are loaded and unloaded in quick succession (tests/crash_rerun.py)
pytestmark = [pytest.mark.integration, pytest.mark.rerun_on_tritonserver_crash]

WORKER_MODES = ("thread", "process")
INSTANCES = 2
INPUTS = [Tensor(name="x", dtype=np.float32, shape=(-1,))]
OUTPUTS = [Tensor(name="y", dtype=np.float32, shape=(-1,)), Tensor(name="who", dtype=np.int32, shape=(1,))]
HELD_S = 120  # a guard against hanging, not a measurement: how long a held call waits for its release
CLIENTS = 4
REQUESTS_AFTER = 20  # each client's requests after the last reload
RELOAD_ROUNDS = 10  # each round: 5 reloads (max_batch_size, instance count, an override without a backend)


def instance(index: int, release: pathlib.Path):
    """Instance ``index``: echoes ``x`` and says who answered; a request whose first value is -1 creates the
    file ``started`` beside ``release``, then waits until ``release`` exists (files: seen by worker processes
    too)."""

    @batch
    def infer(x):
        if x[0, 0] == -1:
            release.with_name("started").touch()
        deadline = time.monotonic() + HELD_S
        while x[0, 0] == -1 and not release.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return {"y": x, "who": np.full((x.shape[0], 1), index, dtype=np.int32)}

    return infer


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("reload") / "release"


@pytest.fixture(scope="module")
def server(start_triton, release):
    server = start_triton()
    callables = [instance(index, release) for index in range(INSTANCES)]
    server.triton.bind("reloaded", callables, INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=8))
    server.triton.bind("held", instance(0, release), INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4))
    return server


def headers(server) -> dict[str, str]:
    return {"triton-access-token": server.token} if server.token else {}


def reload(server, model: str, **changes) -> dict:
    """Load ``model`` with its current config changed by ``changes`` (``count``: the instance group's); return
    the config the server then reports."""
    config = server.http.get_model_config(model)
    config["backend"] = "tritonrt"  # after an override without one it reads "python" (see test_model_control)
    count = changes.pop("count", None)
    if count is not None:
        config["instance_group"] = [{"count": count, "kind": "KIND_CPU"}]
    if "max_batch_size" in changes and "dynamic_batching" in config:  # Triton's default: max_batch_size
        config["dynamic_batching"].pop("preferred_batch_size", None)
    config.update(changes)
    server.http.load_model(model, config=json.dumps(config), headers=headers(server))
    return server.http.get_model_config(model)


def rows(server, model: str, count: int, client=None) -> np.ndarray:
    """Infer ``count`` rows; return who answered."""
    x = np.arange(count * 2, dtype=np.float32).reshape(count, 2)
    result = server.infer("http", model, {"x": x}, client=client)
    assert result["y"].tolist() == x.tolist()
    return result["who"].ravel()


@pytest.fixture
def bound_config(server):
    """Each test starts from the model as bound and leaves it so."""
    yield
    for model, max_batch_size in (("reloaded", 8), ("held", 4)):
        reload(server, model, max_batch_size=max_batch_size, count=1 if model == "held" else INSTANCES)


def test_a_reload_serves_the_new_max_batch_size_and_instance_count(server, bound_config):
    with pytest.raises(InferenceServerException, match="batch-size must be <= 8"):
        rows(server, "reloaded", 16)
    config = reload(server, "reloaded", max_batch_size=16, count=1)
    assert config["max_batch_size"] == 16 and config["instance_group"][0]["count"] == 1
    assert set(rows(server, "reloaded", 16)) == {0}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # one instance left: instance 0 answers everything
        answered = set(
            np.concatenate(list(pool.map(lambda _: rows(server, "reloaded", 3, server.http_client()), range(16))))
        )
    assert answered == {0}
    config = reload(
        server, "reloaded", max_batch_size=4, count=2, dynamic_batching={"max_queue_delay_microseconds": 500}
    )
    assert config["max_batch_size"] == 4 and config["instance_group"][0]["count"] == 2
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 500
    assert len(rows(server, "reloaded", 4)) == 4
    with pytest.raises(InferenceServerException, match="batch-size must be <= 4"):
        rows(server, "reloaded", 5)


def test_the_new_instance_connects_while_the_old_one_finishes_a_call(server, release, bound_config):
    """A new max_batch_size makes Triton create the model anew: its instance connects to the worker that is
    still in a call of the old instance, and both are answered."""
    started = release.with_name("started")
    release.unlink(missing_ok=True)
    started.unlink(missing_ok=True)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        x = np.full((1, 2), -1, dtype=np.float32)
        held = pool.submit(server.infer, "http", "held", {"x": x}, client=server.http_client())
        try:
            deadline = time.monotonic() + HELD_S
            while not started.exists() and time.monotonic() < deadline:  # the old instance is in the call
                time.sleep(0.01)
            config = reload(server, "held", max_batch_size=2)
            assert config["max_batch_size"] == 2
            assert not held.done()
        finally:
            release.touch()
        assert held.result(HELD_S)["y"].tolist() == x.tolist()
    assert len(rows(server, "held", 2)) == 2
    with pytest.raises(InferenceServerException, match="batch-size must be <= 2"):
        rows(server, "held", 3)


def test_reloads_under_load_fail_no_request(server, bound_config):
    """Clients infer without pause while the model is reloaded again and again; before each reload they
    must have made new requests (progress, not time, paces the reloads)."""
    failures: list[str] = []
    counts = [0] * CLIENTS
    reloads_done = threading.Event()

    def wait_for_requests() -> None:
        wanted, deadline = sum(counts) + 2 * CLIENTS, time.monotonic() + HELD_S
        while sum(counts) < wanted and time.monotonic() < deadline:
            time.sleep(0.001)

    def client(index: int) -> None:
        with server.http_client() as http:
            after = 0
            while after < REQUESTS_AFTER:
                try:
                    rows(server, "reloaded", 1 + index % 3, http)
                except Exception as error:  # every failure counts, whatever it is
                    failures.append(f"{type(error).__name__}: {error}")
                counts[index] += 1
                after += reloads_done.is_set()

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        running = [pool.submit(client, index) for index in range(CLIENTS)]
        try:
            for _ in range(RELOAD_ROUNDS):
                for max_batch_size, count in ((16, 1), (8, 2), (4, 1), (16, 2)):
                    wait_for_requests()
                    config = reload(server, "reloaded", max_batch_size=max_batch_size, count=count)
                    assert config["max_batch_size"] == max_batch_size
                wait_for_requests()  # NVIDIA's examples' override: no backend, no tensors
                server.http.load_model("reloaded", config=json.dumps({"max_batch_size": 8}), headers=headers(server))
        finally:
            reloads_done.set()
        for future in running:
            future.result()
    assert failures == []
    assert all(count > REQUESTS_AFTER for count in counts)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"count": 3}, "serve at most 2 instance(s)"),
        ({"max_batch_size": 0}, "keep max_batch_size above 0"),
        ({"input": [{"name": "z", "data_type": "TYPE_FP32", "dims": [-1]}]}, 'input "z" is not one of'),
        (
            {"output": [{"name": "y", "data_type": "TYPE_INT64", "dims": [-1]}]},
            'output "who" TYPE_INT32 [1] is missing',
        ),
        ({"model_transaction_policy": {"decoupled": True}}, "decoupled is true"),
    ],
)
def test_an_override_the_callables_cannot_serve_is_refused_and_the_model_serves_on(server, change, reason):
    before = server.http.get_model_config("reloaded")
    with pytest.raises(InferenceServerException) as refused:
        reload(server, "reloaded", **change)
    assert reason in refused.value.message()
    assert server.http.get_model_config("reloaded") == before
    assert len(rows(server, "reloaded", 8)) == 8
