"""Server lifecycle: several models, bind after run, run -> stop -> run, busy ports, the server or the
owning process dying."""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient

from tritonrt.exceptions import PyTritonBadParameterError
from tritonrt.model_config import Tensor
from tritonrt.triton import RecoveryPolicy, RemoteTriton, Triton

pytestmark = pytest.mark.integration

X = Tensor(name="x", dtype=np.float32, shape=(-1,))
Y = Tensor(name="y", dtype=np.float32, shape=(-1,))
ONES = {"x": np.ones((1, 2), dtype=np.float32)}
LARGE = {"x": np.ones((1, 1 << 18), dtype=np.float32)}  # 1 MiB: travels through shared memory both ways
# Deadlines for things that must happen "soon"; the tests wait for them, they do not time them.
GONE_WITHIN_S = 30
SERVE_JOIN_S = 60


def times(factor: float):
    def infer(requests):
        return [{"y": request["x"] * factor} for request in requests]

    return infer


def descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def server_tree(triton: Triton) -> dict[str, list[psutil.Process]]:
    """The processes this Triton started, by kind (found as children of this process; the guard is
    tritonserver's parent)."""
    tree: dict[str, list[psutil.Process]] = {"guard": [], "tritonserver": []}
    for process in descendants(os.getpid()):
        cmdline = " ".join(process.cmdline())
        if "bin/tritonserver" in cmdline and f"--http-port={triton.config.http_port}" in cmdline:
            tree["tritonserver"].append(process)
            tree["guard"].append(process.parent())
    return tree


def cleanup_of(tritonserver: psutil.Process, owner: psutil.Process) -> list[str]:
    """The folders the guard removes: the owner's socket folder (from the sockets its workers listen on) and the
    workspace."""
    sockets = {str(pathlib.Path(c.laddr).parent) for c in owner.net_connections("unix") if c.laddr.endswith(".sock")}
    return [*sockets, str(server_workspace(tritonserver))]


def tritonrt_mappings(process: psutil.Process) -> list[str]:
    """The files under /dev/shm that ``process`` maps (tritonrt's regions are memfds: none of them)."""
    return sorted({m.path for m in process.memory_maps() if m.path.startswith("/dev/shm/")})


def server_workspace(tritonserver: psutil.Process) -> pathlib.Path:
    """The workspace tritonrt made for the server (the parent of its model repository)."""
    args = tritonserver.cmdline()
    repository = next(arg.split("=", 1)[1] for arg in args if arg.startswith("--model-repository="))
    workspace = pathlib.Path(repository).parent
    assert workspace.name.startswith("tritonrt-workspace-") and workspace.is_dir()
    return workspace


def test_several_models_on_one_server(new_triton):
    server = new_triton()
    server.triton.bind("twice", times(2), [X], [Y])
    server.triton.bind("thrice", times(3), [X], [Y])
    server.triton.run()
    for protocol in ("http", "grpc"):
        assert server.infer(protocol, "twice", ONES)["y"].tolist() == [[2, 2]]
        assert server.infer(protocol, "thrice", ONES)["y"].tolist() == [[3, 3]]
    index = server.http.get_model_repository_index(headers={"triton-access-token": server.token})
    assert {(model["name"], model["state"]) for model in index} == {("twice", "READY"), ("thrice", "READY")}


def test_bind_after_run_loads_into_the_running_server(new_triton):
    server = new_triton()
    server.triton.bind("first", times(2), [X], [Y])
    server.triton.run()
    assert not server.http.is_model_ready("late")
    server.triton.bind("late", times(5), [X], [Y])
    assert server.http.is_model_ready("late")
    assert server.infer("grpc", "late", ONES)["y"].tolist() == [[5, 5]]
    assert server.infer("http", "first", ONES)["y"].tolist() == [[2, 2]]


def test_run_stop_run_again(new_triton):
    server = new_triton()
    server.triton.bind("twice", times(2), [X], [Y])
    pids = []
    for _ in range(2):
        server.triton.run()
        assert server.triton.is_alive()
        pids.append(server_tree(server.triton)["tritonserver"][0].pid)
        assert server.infer("http", "twice", ONES)["y"].tolist() == [[2, 2]]
        assert server.infer("grpc", "twice", ONES)["y"].tolist() == [[2, 2]]
        server.close_clients()
        server.triton.stop()
        assert not server.triton.is_alive()
    assert pids[0] != pids[1]


def test_stop_leaves_nothing_behind(new_triton):
    server = new_triton()
    server.triton.bind("twice", times(2), [X], [Y])
    server.triton.run()
    assert server.infer("grpc", "twice", LARGE)["y"].sum() == 2 * LARGE["x"].size
    tree = server_tree(server.triton)
    assert [len(tree[kind]) for kind in ("guard", "tritonserver")] == [1, 1]
    for process in (tree["guard"][0], tree["tritonserver"][0]):  # this session, a process group of their own
        assert os.getsid(process.pid) == os.getsid(0) and os.getpgid(process.pid) != os.getpgid(0)
    cleanup = cleanup_of(tree["tritonserver"][0], psutil.Process())
    assert len(cleanup) == 2, cleanup
    workspace = server_workspace(tree["tritonserver"][0])
    assert tritonrt_mappings(tree["tritonserver"][0]) == [] and tritonrt_mappings(psutil.Process()) == []
    server.close_clients()
    server.triton.stop()
    assert not any(alive(process) for processes in tree.values() for process in processes)
    assert not any(pathlib.Path(path).exists() for path in cleanup)
    assert not workspace.exists()


def test_model_repository_from_the_config(new_triton, tmp_path):
    repository = tmp_path / "repository"
    server = new_triton(model_repository=repository)
    server.triton.bind("twice", times(2), [X], [Y])
    server.triton.run()
    assert (repository / "twice" / "config.pbtxt").is_file()
    assert server.infer("http", "twice", ONES)["y"].tolist() == [[2, 2]]


def test_remote_triton_binds_into_a_server_started_elsewhere(new_triton, tmp_path, protocol):
    repository = tmp_path / "repository"
    server = new_triton(model_repository=repository)
    server.triton.run()
    url = f"http://{server.http_url}" if protocol == "http" else f"grpc://{server.grpc_url}"
    with RemoteTriton(url, model_repository=repository, access_token=server.token) as remote:
        remote.bind("remote", times(4), [X], [Y])
        remote.run()
        assert remote.is_alive()
        assert server.infer(protocol, "remote", ONES)["y"].tolist() == [[4, 4]]
    assert not server.http.is_model_ready("remote")
    assert not (repository / "remote").exists()


def test_context_manager_stops_the_server(server_dir, free_triton_config):
    with Triton(config=free_triton_config()) as triton:
        triton.bind("twice", times(2), [X], [Y])
        triton.run()
        processes = [p for kind in server_tree(triton).values() for p in kind]
        assert triton.is_alive()
    assert processes and not any(alive(process) for process in processes)
    assert not triton.is_alive()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("setting", ["http_port", "grpc_port", "metrics_port"])
def test_a_port_in_use_is_named(server_dir, free_triton_config, setting):
    config = free_triton_config()
    port = getattr(config, setting)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        triton = Triton(config=config)
        triton.bind("twice", times(2), [X], [Y])
        with pytest.raises(PyTritonBadParameterError) as caught:
            triton.run()
        triton.stop()
    message = str(caught.value)
    assert str(port) in message and setting in message
    assert not triton.is_alive()


def test_stop_lets_in_flight_requests_finish(new_triton, caplog):
    entered, release = threading.Event(), threading.Event()

    def slow(requests):
        entered.set()
        release.wait(SERVE_JOIN_S)
        return [{"y": request["x"]} for request in requests]

    caplog.set_level(logging.INFO, logger="tritonrt.server")
    server = new_triton(exit_timeout_secs=SERVE_JOIN_S)
    server.triton.bind("slow", slow, [X], [Y])
    server.triton.run()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        request = pool.submit(server.infer, "grpc", "slow", ONES)
        assert entered.wait(SERVE_JOIN_S)
        stopping = pool.submit(server.triton.stop)
        # release the callable only once the stop began (tritonrt unloads the models: tritonrt.server.drain)
        assert wait_until(lambda: "Stopping: unloading the models" in caplog.text, SERVE_JOIN_S), caplog.text[-2000:]
        assert not stopping.done()
        release.set()
        assert request.result(SERVE_JOIN_S)["y"].tolist() == [[1, 1]]
        stopping.result(SERVE_JOIN_S)
    assert not server.triton.is_alive()


def test_server_killed_makes_serve_return_with_failure_when_restarts_are_off(new_triton):
    server = new_triton(recovery=RecoveryPolicy(server_restarts=0))
    server.triton.bind("twice", times(2), [X], [Y])
    server.triton.run()
    tree = server_tree(server.triton)
    cleanup = cleanup_of(tree["tritonserver"][0], psutil.Process())
    serving = threading.Thread(target=server.triton.serve, kwargs={"monitoring_period_sec": 0.5}, daemon=True)
    serving.start()
    tree["tritonserver"][0].send_signal(signal.SIGKILL)
    serving.join(SERVE_JOIN_S)
    assert not serving.is_alive(), "serve() did not return after tritonserver was killed"
    assert server.triton.failure and "tritonserver" in server.triton.failure
    assert not server.triton.is_alive()
    assert not any(alive(process) for processes in tree.values() for process in processes)
    assert not any(pathlib.Path(path).exists() for path in cleanup[:-1])  # the socket folder


OWNER_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from tritonrt.model_config import Tensor
    from tritonrt.triton import Triton, TritonConfig

    def echo(requests):
        return [{"y": request["x"]} for request in requests]

    http_port, grpc_port, metrics_port = map(int, sys.argv[1:4])
    triton = Triton(config=TritonConfig(http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port))
    tensor = Tensor(name="x", dtype=np.float32, shape=(-1,))
    triton.bind("echo", echo, [tensor], [Tensor(name="y", dtype=np.float32, shape=(-1,))])
    triton.run()
    print("ready", flush=True)
    time.sleep(600)
    """
)


def test_kill_9_of_the_owner_leaves_nothing_behind(server_dir, free_triton_config):
    config = free_triton_config()
    ports = [str(port) for port in (config.http_port, config.grpc_port, config.metrics_port)]
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT, *ports], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert owner.stdout.readline().strip() == "ready"
        with grpcclient.InferenceServerClient(f"127.0.0.1:{config.grpc_port}") as client:
            tensor = grpcclient.InferInput("x", list(LARGE["x"].shape), "FP32")
            tensor.set_data_from_numpy(LARGE["x"])
            assert client.infer("echo", [tensor]).as_numpy("y").shape == LARGE["x"].shape
        tree = descendants(owner.pid)
        kinds = [" ".join(process.cmdline()) for process in tree]
        assert any("tritonrt.server.guard" in cmd for cmd in kinds)
        tritonserver = next(p for p in tree if p.cmdline()[0].endswith("bin/tritonserver"))
        cleanup = cleanup_of(tritonserver, psutil.Process(owner.pid))
        assert len(cleanup) == 2, cleanup
        workspace = server_workspace(tritonserver)
    finally:
        owner.kill()
        owner.wait()
    assert wait_until(lambda: not any(alive(process) for process in tree), GONE_WITHIN_S), json.dumps(
        [" ".join(p.cmdline()) for p in tree if alive(p)]
    )
    assert not any(pathlib.Path(path).exists() for path in cleanup)
    assert not workspace.exists()
