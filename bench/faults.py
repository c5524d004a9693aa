"""Faults and how long tritonrt takes to repair them, watched by readiness and inference probes.

    python bench/faults.py [--rounds 3]

For each fault (the connection between the model's instance and its worker closed; kill -9 of tritonserver;
the HTTP request with shape [1, 2^40] that aborts tritonserver; the one with 100k nested brackets that
segfaults it), on a fresh
tritonrt server serving an FP32 doubling model: two threads probe ``/v2/health/ready`` and inference
back to back; the script prints, from the fault on, when readiness first said not ready (tritonrt noticed, or
the server was gone), when it said ready again, when an inference sent after that first succeeded, how many
inferences failed, and how many readiness answers of 200 given after readiness first said not ready were
followed by a failing request (should be 0; before it, the server had not failed yet or tritonrt had not
noticed). Then a batched model that raises for bad rows gets
10% bad requests from 16 client threads (HTTP and gRPC): how many good requests failed, with tritonrt's
per-request retry and with @no_retry.

Worker faults (``--workers-only`` runs just these): kill -9 of one of two worker processes under load (failed
inferences, readiness answers that were not 200, when the instance served again), and a hung callable past a
``--timeout`` (default 10 s) execution timeout in each mode: when its request failed, then (processes) when
the replaced worker served again, or (threads) when readiness said not ready and when the service stopped.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import logging
import os
import re
import signal
import socket
import statistics
import threading
import time

import numpy as np
import psutil
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from tritonrt.decorators import batch, no_retry
from tritonrt.model_config import DynamicBatcher, ModelConfig, Tensor
from tritonrt.models.host import HostState
from tritonrt.ports import free_ports
from tritonrt.triton import RecoveryPolicy, Triton, TritonConfig, WorkerMode, WorkerOptions

X = Tensor(name="x", dtype=np.float32, shape=(-1,))
Y = Tensor(name="y", dtype=np.float32, shape=(-1,))
BODY = json.dumps({"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]})
ABORT = json.dumps({"inputs": [{"name": "x", "shape": [1, 2**40], "datatype": "FP32", "data": [1, 2, 3, 4]}]})
SEGFAULT = (
    '{"inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","data":' + "[" * 100_000 + "1" + "]" * 100_000 + "}]}"
)


def new_triton() -> Triton:
    http_port, grpc_port, metrics_port = free_ports(3)
    config = TritonConfig(http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, exit_timeout_secs=1)
    return Triton(config=config, recovery=RecoveryPolicy(server_restarts=100, model_reloads=100))


def status(port: int, method: str, path: str, body: str | None = None) -> int | None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body)
        response = connection.getresponse()
        response.read()
        return response.status
    except OSError:
        return None
    finally:
        connection.close()


def probe(port: int, method: str, path: str, body: str | None, log: list, stop: threading.Event) -> None:
    while not stop.is_set():
        sent = time.monotonic()
        log.append((sent, time.monotonic(), status(port, method, path, body)))
        time.sleep(0.002)


def tritonserver_of(triton: Triton) -> psutil.Process:
    flag = f"--http-port={triton.config.http_port}"
    return next(p for p in psutil.Process().children(recursive=True) if flag in " ".join(p.cmdline()))


def cause(fault: str, triton: Triton) -> None:
    port = triton.config.http_port
    server = tritonserver_of(triton)
    if fault == "lost connection":  # the instance lives in tritonserver: close the worker's end
        connection = triton._models["double"]._workers[0].listener.current
        if connection is not None:
            connection.link.sock.shutdown(socket.SHUT_RDWR)
    elif fault == "kill -9 tritonserver":
        os.kill(server.pid, signal.SIGKILL)
    else:
        status(port, "POST", "/v2/models/double/infer", ABORT if fault == "abort request" else SEGFAULT)


def one_fault(fault: str) -> dict[str, float]:
    triton = new_triton()
    triton.bind("double", batch(lambda x: {"y": x * 2}), [X], [Y], config=ModelConfig(max_batch_size=8))
    triton.run()
    port = triton.config.http_port
    ready: list = []
    inferences: list = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=probe, args=(port, "GET", "/v2/health/ready", None, ready, stop)),
        threading.Thread(target=probe, args=(port, "POST", "/v2/models/double/infer", BODY, inferences, stop)),
    ]
    try:
        for thread in threads:
            thread.start()
        time.sleep(0.3)
        start = time.monotonic()
        cause(fault, triton)
        deadline = start + 120
        while time.monotonic() < deadline:
            time.sleep(0.05)
            after = [p for p in inferences if p[0] > start + 0.1]
            if sum(1 for p in after[-20:] if p[2] == 200) == 20:
                break
        stop.set()
        for thread in threads:
            thread.join()
    finally:
        triton.stop()
    noticed = next((p[1] for p in ready if p[0] >= start and p[2] != 200), float("nan"))
    failed = [p for p in inferences if p[0] >= start and p[2] != 200]
    last_failure = max((p[0] for p in failed), default=start)
    ready_again = next((p for p in ready if p[0] > noticed and p[2] == 200), None)
    again = ready_again[1] if ready_again else float("nan")
    served = next((p[1] for p in inferences if p[0] > noticed and p[2] == 200), float("nan"))
    ready_then_failed = sum(1 for p in ready if noticed <= p[0] and p[1] <= last_failure and p[2] == 200)
    not_ready, again, served = noticed - start, again - start, served - start
    return {
        "not ready after ms": not_ready * 1000,
        "ready again after s": again,
        "serving again after s": served,
        "failed inferences": len(failed),
        "ready, then a request failed": ready_then_failed,
    }


def isolation(retry: bool) -> tuple[int, int, int]:
    """(good requests, good requests that failed, failed requests whose error names another request)."""
    seen: list[list[int]] = []

    def model(x: np.ndarray) -> dict[str, np.ndarray]:
        ids = [int(v) for v in x[:, 0]]
        seen.append(ids)
        bad = [-i for i in ids if i < 0]
        if bad:
            raise ValueError(f"bad id(s) {bad}")
        return {"y": x * 2}

    callable_ = batch(model) if retry else no_retry(batch(model))
    one = Tensor(name="x", dtype=np.float32, shape=(1,))
    config = ModelConfig(max_batch_size=16, batcher=DynamicBatcher(max_queue_delay_microseconds=20_000))
    triton = new_triton()
    triton.bind("m", callable_, [one], [Tensor(name="y", dtype=np.float32, shape=(1,))], config=config)
    triton.run()

    def client(protocol: str, index: int) -> list[tuple[int, bool, str | None]]:
        results = []
        if protocol == "http":
            connection = httpclient.InferenceServerClient(f"127.0.0.1:{triton.config.http_port}")
            module = httpclient
        else:
            connection = grpcclient.InferenceServerClient(f"127.0.0.1:{triton.config.grpc_port}")
            module = grpcclient
        for number in range(40):
            request = (1 if protocol == "http" else 2) * 1_000_000 + index * 1000 + number + 1
            bad = (number + 3 * index + 5 * (protocol == "grpc")) % 10 == 0
            tensor = module.InferInput("x", [1, 1], "FP32")
            tensor.set_data_from_numpy(np.array([[-request if bad else request]], np.float32))
            try:
                connection.infer("m", [tensor])
                results.append((request, bad, None))
            except InferenceServerException as error:
                results.append((request, bad, error.message()))
        connection.close()
        return results

    try:
        jobs = [(protocol, index) for protocol in ("http", "grpc") for index in range(8)]
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            outcomes = [o for result in pool.map(lambda job: client(*job), jobs) for o in result]
    finally:
        triton.stop()
    good = [o for o in outcomes if not o[1]]
    good_failed = sum(1 for o in good if o[2] is not None)
    foreign = sum(
        1 for request, _, message in outcomes if message and set(re.findall(r"\d{7}", message)) - {str(request)}
    )
    return len(good), good_failed, foreign


def hang_or_double(x: np.ndarray) -> dict[str, np.ndarray]:
    """Doubles; a row below 0 hangs the call for -x seconds (a deadlock, a stuck GPU call)."""
    if float(x.min()) < 0:
        time.sleep(-float(x.min()))
    return {"y": x * 2}


def killed_worker() -> dict[str, float]:
    """kill -9 of instance 0's worker process (of two) under load from 4 clients and the probes."""
    triton = new_triton()
    workers = WorkerOptions(mode=WorkerMode.PROCESS)
    config = ModelConfig(max_batch_size=8)
    triton.bind("double", [batch(hang_or_double)] * 2, [X], [Y], config=config, workers=workers)
    triton.run()
    port = triton.config.http_port
    ready: list = []
    inferences: list = []
    stop = threading.Event()
    threads = [threading.Thread(target=probe, args=(port, "GET", "/v2/health/ready", None, ready, stop))]
    threads += [
        threading.Thread(target=probe, args=(port, "POST", "/v2/models/double/infer", BODY, inferences, stop))
        for _ in range(4)
    ]
    model = triton._models["double"]
    try:
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        victim = model.worker_pids()[0]
        start = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        while model.worker_pids()[0] == victim or not model.connected():
            time.sleep(0.005)
            if time.monotonic() > start + 60:
                break
        serving = time.monotonic() - start
        time.sleep(0.5)
        stop.set()
        for thread in threads:
            thread.join()
    finally:
        triton.stop()
    return {
        "instance serving again after s": serving,
        "failed inferences": sum(1 for p in inferences if p[0] >= start and p[2] != 200),
        "inferences after the kill": sum(1 for p in inferences if p[0] >= start),
        "readiness not 200": sum(1 for p in ready if p[0] >= start and p[2] != 200),
    }


def hung_callable(mode: WorkerMode, timeout_s: float) -> dict[str, float]:
    """One request that hangs past the execution timeout, with the probes running."""
    triton = new_triton()
    workers = WorkerOptions(mode=mode, execution_timeout_s=timeout_s)
    triton.bind("double", batch(hang_or_double), [X], [Y], config=ModelConfig(max_batch_size=8), workers=workers)
    triton.run()
    if mode is WorkerMode.THREAD:  # as serve() does: stop once not alive
        threading.Thread(target=triton.serve, kwargs={"monitoring_period_s": 0.05}, daemon=True).start()
    port = triton.config.http_port
    ready: list = []
    inferences: list = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=probe, args=(port, "GET", "/v2/health/ready", None, ready, stop)),
    ]
    hang = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [-3 * timeout_s]}]})
    try:
        for thread in threads:
            thread.start()
        start = time.monotonic()
        code = status(port, "POST", "/v2/models/double/infer", hang)
        failed = time.monotonic() - start
        served = float("nan")
        if mode is WorkerMode.PROCESS:
            threads.append(
                threading.Thread(target=probe, args=(port, "POST", "/v2/models/double/infer", BODY, inferences, stop))
            )
            threads[-1].start()
            while time.monotonic() < start + failed + 60 and not any(p[2] == 200 for p in inferences):
                time.sleep(0.01)
            served = next((p[1] for p in inferences if p[2] == 200), float("nan")) - start - failed
        else:
            while triton.state is not HostState.STOPPED and time.monotonic() < start + failed + 60:
                time.sleep(0.01)  # serve() sees it not alive and stops; stop() drains the other requests
        stopped = time.monotonic() - start - failed
        time.sleep(0.2)
        stop.set()
        for thread in threads:
            thread.join()
    finally:
        triton.stop()
    not_ready = next((p[1] for p in ready if p[0] >= start + failed - 0.5 and p[2] != 200), float("nan"))
    figures = {"request failed after s": failed, "its HTTP status": float(code or 0)}
    if mode is WorkerMode.PROCESS:
        figures["serving again after the failure s"] = served
        figures["readiness not 200"] = sum(1 for p in ready if p[0] >= start and p[2] != 200)
    else:
        figures["not ready after the failure s"] = not_ready - start - failed
        figures["stopped after the failure s"] = stopped
        figures["failure recorded"] = float("execution timeout" in (triton.failure or ""))
    return figures


def report(name: str, rounds: list[dict[str, float]]) -> None:
    print(f"{name}:")
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        print(f"  {key:36} median {statistics.median(values):8.3f}  (all: {', '.join(f'{v:.3f}' for v in values)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=10.0, help="the execution timeout of the hung-callable drill")
    parser.add_argument("--workers-only", action="store_true", help="only the worker faults")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    report("kill -9 of a worker process (1 of 2)", [killed_worker() for _ in range(args.rounds)])
    for mode in WorkerMode:
        rounds = [hung_callable(mode, args.timeout) for _ in range(args.rounds)]
        kind = "worker threads" if mode is WorkerMode.THREAD else "worker processes"
        report(f"hung callable, {kind}, {args.timeout:g} s timeout", rounds)
    if args.workers_only:
        return
    for fault in ("lost connection", "kill -9 tritonserver", "abort request", "segfault request"):
        report(fault, [one_fault(fault) for _ in range(args.rounds)])
    for retry in (True, False):
        good, failed, foreign = isolation(retry)
        label = "per-request retry" if retry else "@no_retry"
        print(
            f"10% bad rows, 16 clients, {label}: {failed} of {good} good requests failed; {foreign} errors named "
            "another request"
        )


if __name__ == "__main__":
    main()
