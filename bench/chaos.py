"""Chaos soak: a service with worker processes under checked load while faults come in turn.

    python bench/chaos.py [--duration 60] [--interval 15] [--window 15] [--clients 8]     (make chaos)

The service (this script with ``--serve``, in a process of its own, with the default RecoveryPolicy unless the
TRITONRT_* variables say otherwise) serves one batched FP32 model from two worker processes, with a dynamic
batcher that puts concurrent requests into one batch and an execution timeout (``--hang-timeout``). Clients,
half over HTTP and half over gRPC, send good requests back to back and check each answer (y = 2 x, on values
of their own). After ``--warmup`` seconds a fault comes every ``--interval`` seconds, in turn:

- ``tritonserver killed``: kill -9 of tritonserver;
- ``raising burst``: 16 requests at once whose callable raises;
- ``worker killed``: kill -9 of one worker process;
- ``oversized request``: the HTTP request with shape [1, 2^40] (tritonserver 2.51 aborts on it);
- ``hung request``: a request whose callable never returns (its worker is killed past the execution timeout);
- ``segfaulting request``: a request whose callable segfaults its worker.

The table counts good requests ok, wrong (an answer that is not theirs) and failed, by the fault whose window
(``--window`` seconds from the fault on) their answer fell in, or "outside any window". It then prints the RSS
of the service's processes after warm-up and at the end, whether the service still serves, and tritonrt's own
counters from /metrics. The service's log goes to ``--log``.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable

import numpy as np
import psutil
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from tritonrt.ports import free_ports

MODEL = "chaos"
RAISE, SEGFAULT, HANG = -1.0, -2.0, -3.0  # the first value of a bad request's row
OVERSIZED = json.dumps({"inputs": [{"name": "x", "shape": [1, 2**40], "datatype": "FP32", "data": [1, 2, 3, 4]}]})
FAULTS = (
    "tritonserver killed",
    "raising burst",
    "worker killed",
    "oversized request",
    "hung request",
    "segfaulting request",
)
READY_WAIT_S = 180.0


# -- the service (--serve) -----------------------------------------------------------------------------------------


def serve(ports: list[int], hang_timeout_s: float, instances: int) -> int:
    from tritonrt.decorators import batch
    from tritonrt.model_config import DynamicBatcher, ModelConfig, Tensor
    from tritonrt.triton import Triton, TritonConfig, WorkerMode, WorkerOptions

    @batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        first = x[:, 0]
        if (first == SEGFAULT).any():
            os.kill(os.getpid(), signal.SIGSEGV)
        if (first == HANG).any():
            time.sleep(3600)
        if (first == RAISE).any():
            raise ValueError("chaos: a request that raises")
        return {"y": x * 2}

    tensor = Tensor(name="x", dtype=np.float32, shape=(4,))
    config = ModelConfig(max_batch_size=16, batcher=DynamicBatcher(max_queue_delay_microseconds=2000))
    workers = WorkerOptions(mode=WorkerMode.PROCESS, execution_timeout_s=hang_timeout_s)
    triton_config = TritonConfig(http_port=ports[0], grpc_port=ports[1], metrics_port=ports[2], exit_timeout_secs=5)
    triton = Triton(config=triton_config)
    out = Tensor(name="y", dtype=np.float32, shape=(4,))
    triton.bind(MODEL, [infer] * instances, [tensor], [out], config=config, workers=workers)
    signal.signal(signal.SIGTERM, lambda *_: triton.stop())
    triton.serve(monitoring_period_s=1.0)
    print(f"chaos service: stopped; failure: {triton.failure}", flush=True)
    return 1 if triton.failure else 0


# -- the driver ----------------------------------------------------------------------------------------------------


class Outcomes:
    """Good requests' outcomes: (answered at, "ok" | "wrong" | "failed", error message)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: list[tuple[float, str, str]] = []

    def add(self, at: float, outcome: str, message: str = "") -> None:
        with self.lock:
            self.records.append((at, outcome, message))


def infer(protocol: str, url: str, x: np.ndarray, timeout_s: float = 120.0) -> np.ndarray:
    """One request; its output (raises InferenceServerException or OSError when it fails)."""
    if protocol == "http":
        client = httpclient.InferenceServerClient(url, connection_timeout=timeout_s, network_timeout=timeout_s)
        tensor = httpclient.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        try:
            return client.infer(MODEL, [tensor]).as_numpy("y")
        finally:
            client.close()
    client = grpcclient.InferenceServerClient(url)
    tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    try:
        return client.infer(MODEL, [tensor], client_timeout=timeout_s).as_numpy("y")
    finally:
        client.close()


def client_loop(protocol: str, url: str, seed: int, outcomes: Outcomes, stop: threading.Event) -> None:
    """Send good requests back to back, each checked against its own values."""
    rng = np.random.default_rng(seed)
    while not stop.is_set():
        x = rng.uniform(1, 1000, (1, 4)).astype(np.float32)
        try:
            y = infer(protocol, url, x)
        except Exception as error:  # noqa: BLE001 - every failure counts, whatever raised it
            message = error.message() if isinstance(error, InferenceServerException) else repr(error)
            outcomes.add(time.monotonic(), "failed", f"{protocol}: {message}")
            time.sleep(0.05)  # a refused connection fails at once: do not spin
            continue
        outcomes.add(time.monotonic(), "ok" if y is not None and np.array_equal(y, x * 2) else "wrong")


def bad_request(url: str, value: float) -> str:
    """Send one request whose row starts with ``value``; what came back (it should fail)."""
    try:
        infer("http", url, np.array([[value, 1, 2, 3]], np.float32))
        return "answered (!)"
    except InferenceServerException as error:
        return error.message()[:200]
    except OSError as error:
        return repr(error)[:200]


class Service:
    """The service's process and what belongs to it."""

    def __init__(self, args: argparse.Namespace):
        self.ports = free_ports(3)
        self.http = f"127.0.0.1:{self.ports[0]}"
        self.grpc = f"127.0.0.1:{self.ports[1]}"
        command = [sys.executable, __file__, "--serve", ",".join(map(str, self.ports))]
        command += ["--hang-timeout", str(args.hang_timeout), "--instances", str(args.instances)]
        os.makedirs(os.path.dirname(os.path.abspath(args.log)), exist_ok=True)
        self.log = open(args.log, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        self.psutil = psutil.Process(self.process.pid)

    def ready(self) -> bool:
        connection = http.client.HTTPConnection(self.http, timeout=5)
        try:
            connection.request("GET", "/v2/health/ready")
            return connection.getresponse().status == 200
        except OSError:
            return False
        finally:
            connection.close()

    def wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.process.poll() is None:
            if self.ready():
                return True
            time.sleep(0.2)
        return False

    def processes(self) -> dict[str, list[psutil.Process]]:
        """The service's processes: the owner, its worker processes, tritonserver (with its guard)."""
        groups: dict[str, list[psutil.Process]] = {"owner": [self.psutil], "workers": [], "tritonserver": []}
        try:
            own = self.psutil.cmdline()
            for child in self.psutil.children(recursive=True):
                try:
                    groups["workers" if child.cmdline() == own else "tritonserver"].append(child)
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        return groups

    def rss_mib(self) -> dict[str, float]:
        sizes = {}
        for group, members in self.processes().items():
            total = 0
            for member in members:
                try:
                    total += member.memory_info().rss
                except psutil.Error:
                    pass
            sizes[group] = total / 2**20
        return sizes

    def kill(self, group: str) -> str:
        found = [p for p in self.processes()[group] if group != "tritonserver" or "tritonserver" in p.name()]
        if not found:
            return f"no {group} process found"
        os.kill(found[0].pid, signal.SIGKILL)
        return f"killed pid {found[0].pid}"

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
        code = self.process.wait()
        self.log.close()
        return code


def cause(kind: str, service: Service) -> str:
    """Bring fault ``kind`` about; what happened (the requests that must fail, and their errors)."""
    if kind == "tritonserver killed":
        return service.kill("tritonserver")
    if kind == "worker killed":
        return service.kill("workers")
    if kind == "oversized request":
        connection = http.client.HTTPConnection(service.http, timeout=30)
        try:
            connection.request("POST", f"/v2/models/{MODEL}/infer", body=OVERSIZED)
            return f"HTTP {connection.getresponse().status}"
        except OSError as error:
            return f"no answer ({error!r}): tritonserver died"
        finally:
            connection.close()
    if kind == "raising burst":
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            errors = list(pool.map(lambda _: bad_request(service.http, RAISE), range(16)))
        return f"{sum('chaos: a request that raises' in e for e in errors)} of 16 failed with their own error"
    return bad_request(service.http, HANG if kind == "hung request" else SEGFAULT)


def metrics(port: int) -> dict[str, float]:
    """tritonrt's own counters for the model, from /metrics."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return {}
    found: dict[str, float] = collections.defaultdict(float)
    for line in text.splitlines():
        match = re.match(r"^(tritonrt_\w+_total)\{([^}]*)\} (\S+)$", line)
        if match and f'model="{MODEL}"' in match.group(2):
            found[match.group(1)] += float(match.group(3))
    return dict(found)


class Counters:
    """tritonrt's counters summed over tritonserver's lives (the backend's reset when it restarts): /metrics is
    read every half second, and a value that went down started again from 0."""

    def __init__(self, port: int):
        self._port = port
        self._base: dict[str, float] = collections.defaultdict(float)
        self._last: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            self.read()

    def read(self) -> None:
        for name, value in metrics(self._port).items():
            if value < self._last.get(name, 0.0):
                self._base[name] += self._last[name]
            self._last[name] = value

    def totals(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self.read()
        return {name: self._base[name] + value for name, value in self._last.items()}


def attribute(at: float, faults: list[tuple[float, str, list[str]]], window_s: float) -> str:
    """The fault whose window holds ``at``, else "before the first fault" or "outside any window"."""
    for start, kind, _ in reversed(faults):
        if start <= at < start + window_s:
            return kind
        if start <= at:
            break
    return "before the first fault" if not faults or at < faults[0][0] else "outside any window"


def report(outcomes: Outcomes, faults: list[tuple[float, str, list[str]]], window_s: float, began: float) -> None:
    table: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    messages: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for at, outcome, message in outcomes.records:
        place = attribute(at, faults, window_s)
        table[place][outcome] += 1
        if outcome == "failed":
            messages[place][re.sub(r"\d+", "N", message)[:160]] += 1
    counts = collections.Counter(kind for _, kind, _ in faults)
    print(f"\n{'good requests, by where they were answered':46} {'ok':>8} {'wrong':>7} {'failed':>7}")
    rows = ["before the first fault", *FAULTS, "outside any window"]
    for row in rows:
        if row in table or row in counts:
            label = f"{row} (x{counts[row]})" if row in counts else row
            print(f"  {label:44} {table[row]['ok']:8} {table[row]['wrong']:7} {table[row]['failed']:7}")
    total = sum((table[row] for row in table), collections.Counter())
    print(f"  {'total':44} {total['ok']:8} {total['wrong']:7} {total['failed']:7}")
    print("\nfaults (time from the first fault; what the fault's own requests got):")
    for start, kind, detail in faults:
        print(f"  +{start - began:7.1f} s  {kind:22} {detail[0] if detail else '...'}")
    for place, counter in messages.items():
        print(f"\nwhy good requests failed, {place}:")
        for message, count in counter.most_common(4):
            print(f"  {count:5} x {message}")


def run_faults(
    service: Service, args: argparse.Namespace, began: float, kinds: list[str], stop: Callable[[], bool]
) -> list[tuple[float, str, list[str]]]:
    faults: list[tuple[float, str, list[str]]] = []
    threads = []
    number = 0
    while not stop():
        start = began + number * args.interval
        if start > began + args.duration - args.interval / 2:
            break
        while time.monotonic() < start and not stop():
            time.sleep(0.05)
        kind = kinds[number % len(kinds)]
        detail: list[str] = []
        faults.append((time.monotonic(), kind, detail))
        print(f"  fault {number + 1}: {kind}", flush=True)
        thread = threading.Thread(target=lambda k=kind, d=detail: d.append(cause(k, service)), daemon=True)
        thread.start()
        threads.append(thread)
        number += 1
    for thread in threads:
        thread.join(timeout=args.hang_timeout * 3 + 30)
    return faults


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of faults after the warm-up")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between faults")
    parser.add_argument("--window", type=float, default=15.0, help="seconds after a fault that its failures count")
    parser.add_argument("--clients", type=int, default=8, help="checking clients, half HTTP, half gRPC")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds of load before the first fault")
    parser.add_argument("--hang-timeout", type=float, default=5.0, help="the model's execution timeout (s)")
    parser.add_argument("--instances", type=int, default=2, help="worker processes serving the model")
    parser.add_argument("--faults", default=",".join(FAULTS), help="the fault kinds, in turn (comma-separated)")
    parser.add_argument("--log", default="build/chaos-service.log", help="where the service's output goes")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve([int(p) for p in args.serve.split(",")], args.hang_timeout, args.instances)
    kinds = [kind.strip() for kind in args.faults.split(",") if kind.strip()]
    unknown = [kind for kind in kinds if kind not in FAULTS]
    if unknown:
        parser.error(f"--faults: unknown kind(s) {unknown}; the kinds are: {', '.join(FAULTS)}")
    service = Service(args)
    print(f"chaos: starting the service (log: {args.log})", flush=True)
    if not service.wait_ready(READY_WAIT_S):
        print(f"chaos: the service did not become ready (exit code {service.stop()}); see {args.log}")
        return 1
    outcomes, stop = Outcomes(), threading.Event()
    urls = {"http": service.http, "grpc": service.grpc}
    clients = [
        threading.Thread(target=client_loop, args=(p, urls[p], n, outcomes, stop), daemon=True)
        for n, p in enumerate(["http", "grpc"] * (args.clients // 2) + ["http"] * (args.clients % 2))
    ]
    for thread in clients:
        thread.start()
    print(f"chaos: {len(clients)} checking clients; warming up {args.warmup:g} s", flush=True)
    time.sleep(args.warmup)
    rss_start = service.rss_mib()
    counters = Counters(service.ports[2])
    began = time.monotonic()
    print(f"chaos: {args.duration:g} s, a fault every {args.interval:g} s: {', '.join(kinds)}", flush=True)
    faults = run_faults(service, args, began, kinds, lambda: time.monotonic() > began + args.duration)
    while time.monotonic() < began + args.duration:
        time.sleep(0.1)
    stop.set()
    for thread in clients:
        thread.join(timeout=150)
    serving = _serves(service, urls)
    exited = service.process.poll()
    rss_end = service.rss_mib()
    totals = counters.totals()
    report(outcomes, faults, args.window, began)
    print("\nRSS of the service's processes (MiB): after warm-up -> at the end")
    for group in rss_start:
        print(f"  {group:14} {rss_start[group]:9.1f} -> {rss_end.get(group, 0.0):9.1f}")
    start_total, end_total = sum(rss_start.values()), sum(rss_end.values())
    change = (end_total / start_total - 1) * 100 if start_total else float("nan")
    print(f"  {'total':14} {start_total:9.1f} -> {end_total:9.1f}  ({change:+.1f}%)")
    print("\ntritonrt's counters for the model during the faults (/metrics, summed over tritonserver's restarts):")
    for name, value in sorted(totals.items()):
        print(f"  {name:44} {value:g}")
    state = "yes" if serving else (f"no: it exited with code {exited}" if exited is not None else "no")
    print(f"\nthe service serves at the end: {state}")
    code = service.stop()
    print(f"the service stopped with exit code {code}")
    return 0 if serving else 1


def _serves(service: Service, urls: dict[str, str]) -> bool:
    """Whether the service still serves: ready (within 60 s: a fault's recovery may be under way), then five
    right answers over each protocol."""
    if not service.wait_ready(60):
        return False
    x = np.ones((1, 4), np.float32)
    try:
        return all(np.array_equal(infer(p, urls[p], x), x * 2) for p in ("http", "grpc") for _ in range(5))
    except (InferenceServerException, OSError):
        return False


if __name__ == "__main__":
    sys.exit(main())
