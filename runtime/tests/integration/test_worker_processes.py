"""Worker processes against a real tritonserver: instances in processes of their own, a setup hook inside
each, a killed worker that fails only its own requests and serves again, and no worker left behind."""

from __future__ import annotations

import concurrent.futures
import gc
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tritonrt.decorators import batch
from tritonrt.exceptions import PyTritonValidationError
from tritonrt.model_config import ModelConfig, Tensor
from tritonrt.model_config.common import ModelWarmup, WarmupInput
from tritonrt.triton import RecoveryPolicy, RemoteTriton, WorkerInfo, WorkerMode, WorkerOptions

pytestmark = pytest.mark.integration

WAIT_S = 60  # a guard against hanging, not a measurement
FORKS_UNDER_GRPC = 10  # workers forked while gRPC calls are in flight in this process
SETUP_VALUE: list[float] = []  # filled by setup() inside each worker process, never in this one
CALLS: list[bool] = []  # one entry per call of counted(): whether setup() had run before it


def setup(info: WorkerInfo) -> None:
    SETUP_VALUE.append(100.0 + info.instance_index)


@batch
def whoami(x: np.ndarray) -> dict[str, np.ndarray]:
    """Answers with its process id, CUDA_VISIBLE_DEVICES and what setup() left (after sleeping x seconds)."""
    time.sleep(float(x.ravel()[0]))
    rows = x.shape[0]
    return {
        "pid": np.full((rows, 1), os.getpid(), dtype=np.int64),
        "device": np.full((rows, 1), int(os.environ.get("CUDA_VISIBLE_DEVICES", "-1")), dtype=np.int64),
        "setup": np.full((rows, 1), SETUP_VALUE[-1] if SETUP_VALUE else -1.0, dtype=np.float32),
    }


@batch
def counted(x: np.ndarray) -> dict[str, np.ndarray]:
    """Answers with how many calls this process saw before (warm-up included) and whether setup ran before each."""
    CALLS.append(bool(SETUP_VALUE))
    rows = x.shape[0]
    return {
        "pid": np.full((rows, 1), len(CALLS) - 1, dtype=np.int64),
        "device": np.full((rows, 1), int(all(CALLS)), dtype=np.int64),
        "setup": np.zeros((rows, 1), dtype=np.float32),
    }


INPUTS = [Tensor(name="x", dtype=np.float32, shape=(1,))]
OUTPUTS = [
    Tensor(name="pid", dtype=np.int64, shape=(1,)),
    Tensor(name="device", dtype=np.int64, shape=(1,)),
    Tensor(name="setup", dtype=np.float32, shape=(1,)),
]


# A model made of Python objects (a vocabulary, a tree): objects the garbage collector tracks, built before the fork.
TABLE: list[list[int]] = []
TABLE_ROWS = 500_000  # about 35 MiB of small lists


@batch
def collect(x: np.ndarray) -> dict[str, np.ndarray]:
    """Reads TABLE after a full collection, as the worker's own allocations bring one sooner or later."""
    gc.collect()
    rows = x.shape[0]
    return {
        "pid": np.full((rows, 1), len(TABLE), dtype=np.int64),
        "device": np.full((rows, 1), TABLE[-1][0], dtype=np.int64),
        "setup": np.zeros((rows, 1), dtype=np.float32),
    }


def sleep_for(seconds: float) -> dict[str, np.ndarray]:
    return {"x": np.array([[seconds]], dtype=np.float32)}


@pytest.fixture(scope="module")
def server(start_triton):
    server = start_triton()
    options = WorkerOptions(mode=WorkerMode.PROCESS, setup=setup, devices=(3, 5))
    server.triton.bind(
        "procs", [whoami, whoami], INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4), workers=options
    )
    timeout = WorkerOptions(mode=WorkerMode.PROCESS, execution_timeout_s=2.0)
    server.triton.bind("stuck", whoami, INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4), workers=timeout)
    warmup = ModelWarmup(name="w", batch_size=1, inputs={"x": WarmupInput(np.float32, (1,), zero_data=True)}, count=2)
    warm = ModelConfig(max_batch_size=4, model_warmup=[warmup])
    server.triton.bind("warm", counted, INPUTS, OUTPUTS, config=warm, workers=WorkerOptions(WorkerMode.PROCESS, setup))
    TABLE.extend([row] for row in range(TABLE_ROWS))
    process = WorkerOptions(mode=WorkerMode.PROCESS)
    server.triton.bind("table", collect, INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4), workers=process)
    yield server
    TABLE.clear()


def pids(server, model: str) -> list[int]:
    return server.triton._models[model].worker_pids()


def test_what_a_worker_inherited_stays_shared_after_a_full_collection(server):
    answer = server.infer("http", "table", sleep_for(0))
    assert (int(answer["pid"][0, 0]), int(answer["device"][0, 0])) == (TABLE_ROWS, TABLE_ROWS - 1)  # it read TABLE
    [pid] = pids(server, "table")
    memory = psutil.Process(pid).memory_full_info()
    # Without gc.freeze() in the worker, the collection writes to the header of every object it inherited (TABLE's
    # lists and the rest of this process's heap): 62 MiB became its own where this measured 9.5 MiB with it.
    assert memory.uss < 24 << 20, f"the worker holds {memory.uss >> 20} MiB of its own (PSS {memory.pss >> 20} MiB)"


def test_each_instance_runs_in_its_own_process_after_its_setup_on_its_device(server, protocol):
    seen = {}
    deadline = time.monotonic() + WAIT_S
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        while len(seen) < 2 and time.monotonic() < deadline:
            clients = [server.http_client() if protocol == "http" else server.grpc_client() for _ in range(4)]
            answers = pool.map(lambda c: server.infer(protocol, "procs", sleep_for(0.05), client=c), clients)
            for answer in answers:
                seen[int(answer["pid"][0, 0])] = (int(answer["device"][0, 0]), float(answer["setup"][0, 0]))
            for client in clients:
                client.close()
    workers = pids(server, "procs")
    assert sorted(seen) == sorted(workers) and os.getpid() not in seen
    by_instance = [seen[pid] for pid in workers]
    assert by_instance == [(3, 100.0), (5, 101.0)]  # instance i: devices[i], setup run inside with its index
    assert SETUP_VALUE == []  # never run in this process


def test_a_killed_worker_fails_only_its_requests_and_serves_again(server, recoveries):
    victim, survivor = pids(server, "procs")
    failures: list[str] = []
    answered: list[int] = []
    stop = threading.Event()

    def load() -> None:
        with server.http_client() as client:
            while not stop.is_set():
                try:
                    answer = server.infer("http", "procs", sleep_for(0.02), client=client)
                    answered.append(int(answer["pid"][0, 0]))
                except InferenceServerException as error:
                    failures.append(error.message())

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while victim not in answered and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(victim, signal.SIGKILL)
        recoveries.wait_recovered()
        replacement = pids(server, "procs")[0]
        assert replacement != victim
        while replacement not in answered[-200:] and time.monotonic() < deadline:  # the instance serves again
            time.sleep(0.01)
        assert replacement in answered
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert survivor in answered
    # Only the victim's requests failed: its batch, and one sent to it in the moment before tritonrt noticed,
    # each saying whose and why; in the rare case a batch reached the connection after that, the backend's own
    # error (the connection of instance 0, the only one that broke) names the model.
    ours = [message for message in failures if "'procs' instance 0" in message and "SIGKILL" in message]
    backend = [message for message in failures if 'lost the process serving model "procs"' in message]
    assert len(ours) + len(backend) == len(failures), failures
    assert len(failures) <= 8, failures  # at most two batches of up to max_batch_size requests


def test_workers_forked_while_this_process_has_grpc_calls_in_flight_serve(new_triton, recoveries):
    """A replacement worker is forked from this process while its other threads have gRPC calls in flight (a
    service that is its own client, a test): gRPC's threads and fork handlers must not break the child."""
    server = new_triton(recovery=RecoveryPolicy(worker_restarts=FORKS_UNDER_GRPC, backoff_s=0.0))
    options = WorkerOptions(mode=WorkerMode.PROCESS)
    server.triton.bind("procs", whoami, INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4), workers=options)
    server.triton.run()
    failures: list[str] = []
    answered: list[int] = []
    stop = threading.Event()

    def load() -> None:
        client = server.grpc_client()
        try:
            while not stop.is_set():
                try:
                    answered.append(int(server.infer("grpc", "procs", sleep_for(0.001), client=client)["pid"][0, 0]))
                except InferenceServerException as error:
                    failures.append(error.message())
        finally:
            client.close()

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        for kills in range(1, FORKS_UNDER_GRPC + 1):
            victim = pids(server, "procs")[0]
            os.kill(victim, signal.SIGKILL)
            recoveries.wait_recovered(kills)
            replacement = pids(server, "procs")[0]
            assert replacement != victim
            deadline = time.monotonic() + WAIT_S
            while replacement not in answered[-200:] and time.monotonic() < deadline:  # forked and serving
                time.sleep(0.005)
            assert replacement in answered, f"the worker forked after kill {kills} never answered"
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert all("SIGKILL" in message or "lost the process" in message for message in failures), failures


@pytest.mark.parametrize("protocol", ["http"])
def test_a_batch_past_the_timeout_fails_and_the_worker_is_replaced(server, protocol):
    before = pids(server, "stuck")
    message = server.infer_error(protocol, "stuck", sleep_for(30))
    assert "execution timeout" in message and "'stuck' instance 0" in message
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            answer = server.infer(protocol, "stuck", sleep_for(0))
            break
        except InferenceServerException:
            time.sleep(0.1)
    assert int(answer["pid"][0, 0]) not in before


def test_a_thread_past_the_timeout_fails_its_batch_and_stops_the_service(new_triton):
    server = new_triton()
    options = WorkerOptions(mode=WorkerMode.THREAD, execution_timeout_s=2.0)
    server.triton.bind("slow", whoami, INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4), workers=options)
    server.triton.run()
    assert server.infer("http", "slow", sleep_for(0))["pid"][0, 0] == os.getpid()
    message = server.infer_error("http", "slow", sleep_for(8))
    assert "execution timeout" in message and "'slow' instance 0" in message
    deadline = time.monotonic() + WAIT_S
    while server.triton.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server.triton.is_alive()
    assert "execution timeout" in (server.triton.failure or "")


_SERVICE = textwrap.dedent(
    """
    import sys, numpy as np
    from tritonrt.model_config import ModelConfig, Tensor
    from tritonrt.triton import Triton, TritonConfig, WorkerMode, WorkerOptions
    def f(requests):
        return [{"y": r["x"]} for r in requests]
    ports = [int(p) for p in sys.argv[1:4]]
    triton = Triton(config=TritonConfig(http_port=ports[0], grpc_port=ports[1], metrics_port=ports[2]))
    triton.bind("echo", [f, f], [Tensor(name="x", dtype=np.float32, shape=(1,))],
                [Tensor(name="y", dtype=np.float32, shape=(1,))], config=ModelConfig(batching=False),
                workers=WorkerOptions(mode=WorkerMode.PROCESS))
    triton.run()
    print(*triton._models["echo"].worker_pids(), flush=True)
    triton.serve()
    """
)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1].startswith("Z")  # a zombie waits for init to reap it: gone
    except FileNotFoundError:
        return True


def test_no_worker_outlives_a_killed_service(free_triton_config, server_dir):
    config = free_triton_config()
    ports = [str(config.http_port), str(config.grpc_port), str(config.metrics_port)]
    service = subprocess.Popen([sys.executable, "-c", _SERVICE, *ports], stdout=subprocess.PIPE, text=True)
    try:
        line = service.stdout.readline()
        workers = [int(pid) for pid in line.split()]
        assert len(workers) == 2 and all(not _gone(pid) for pid in workers)
    finally:
        service.kill()
        service.wait()
    deadline = time.monotonic() + WAIT_S
    while not all(_gone(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in workers)


def test_the_warm_up_runs_inside_the_worker_after_its_setup(server):
    answer = server.infer("http", "warm", sleep_for(0))
    assert int(answer["pid"][0, 0]) == 2  # the worker's two warm-up calls came first
    assert int(answer["device"][0, 0]) == 1  # setup had run before each of them
    assert CALLS == []  # none in this process


def test_a_fork_after_cuda_was_initialised_is_refused_and_the_server_serves_on(server, monkeypatch):
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: True)  # the one thing faked: CUDA's state
    monkeypatch.setitem(sys.modules, "torch", torch)
    options = WorkerOptions(mode=WorkerMode.PROCESS)
    with pytest.raises(PyTritonValidationError, match="CUDA was initialised.*setup"):
        server.triton.bind("gpu", whoami, INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4), workers=options)
    monkeypatch.setenv("TRITONRT_WORKERS", "process")  # the service-wide switch is checked too
    with pytest.raises(PyTritonValidationError, match="CUDA was initialised"):
        server.triton.bind("gpu", whoami, INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4))
    assert "gpu" not in server.triton._models  # not bound: it can be bound again once fixed
    assert server.infer("http", "procs", sleep_for(0))["pid"][0, 0] in pids(server, "procs")


def failing_setup(info: WorkerInfo) -> None:
    raise RuntimeError(f"no weights for instance {info.instance_index}")


def test_a_setup_that_fails_refuses_the_bind_with_its_error_and_the_server_serves_on(server):
    options = WorkerOptions(mode=WorkerMode.PROCESS, setup=failing_setup)
    with pytest.raises(Exception, match="'broken' instance 0.*RuntimeError: no weights for instance 0"):
        server.triton.bind("broken", whoami, INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4), workers=options)
    assert "broken" not in server.triton._models
    assert server.infer("http", "procs", sleep_for(0))["pid"][0, 0] in pids(server, "procs")


def slow_stream(requests):
    """Three responses 1.5 s apart: each step is within a 2 s timeout, the whole stream is not."""
    for step in range(3):
        time.sleep(1.5)
        yield [{"step": np.array([step], dtype=np.int32)} for _ in requests]


def test_a_stream_times_out_per_step_not_as_a_whole(server):
    step = Tensor(name="step", dtype=np.int32, shape=(1,))
    count = Tensor(name="count", dtype=np.int32, shape=(1,))
    options = WorkerOptions(mode=WorkerMode.PROCESS, execution_timeout_s=2.0)
    config = ModelConfig(batching=False, decoupled=True)
    server.triton.bind("slow_stream", slow_stream, [count], [step], config=config, workers=options)
    events: queue.Queue = queue.Queue()
    with server.grpc_client() as client:
        client.start_stream(callback=lambda result, error: events.put((result, error)))
        tensor = grpcclient.InferInput("count", [1], "INT32")
        tensor.set_data_from_numpy(np.array([3], dtype=np.int32))
        client.async_stream_infer("slow_stream", [tensor])
        steps = []
        for _ in range(3):
            result, error = events.get(timeout=WAIT_S)
            assert error is None, error
            steps.append(int(result.as_numpy("step")[0]))
        client.stop_stream()
    assert steps == [0, 1, 2]


def test_stopping_ends_every_worker_process(new_triton):
    server = new_triton()
    options = WorkerOptions(mode=WorkerMode.PROCESS)
    server.triton.bind("short", [whoami] * 2, INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4), workers=options)
    server.triton.run()
    workers = pids(server, "short")
    assert all(not _gone(pid) for pid in workers)
    server.triton.stop()
    assert all(_gone(pid) for pid in workers)  # stop() waited for them


def test_a_remote_triton_serves_from_worker_processes_too(server, tmp_path):
    with RemoteTriton(f"http://{server.http_url}", tmp_path, server.token) as remote:
        options = WorkerOptions(mode=WorkerMode.PROCESS, setup=setup)
        remote.bind("remote_procs", whoami, INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4), workers=options)
        answer = server.infer("grpc", "remote_procs", sleep_for(0))
        worker = remote._models["remote_procs"].worker_pids()[0]
        assert int(answer["pid"][0, 0]) == worker != os.getpid() and float(answer["setup"][0, 0]) == 100.0
    assert _gone(worker)  # leaving the RemoteTriton stopped its worker


def test_with_threads_the_setup_runs_here_once_per_instance_before_serving(server):
    seen: list[WorkerInfo] = []
    options = WorkerOptions(mode=WorkerMode.THREAD, setup=seen.append, devices=(3, 5))
    server.triton.bind("threads", [whoami] * 2, INPUTS, OUTPUTS, config=ModelConfig(max_batch_size=4), workers=options)
    assert seen == [WorkerInfo("threads", 0, 3, "cuda:3"), WorkerInfo("threads", 1, 5, "cuda:5")]
    assert int(server.infer("http", "threads", sleep_for(0))["pid"][0, 0]) == os.getpid()
