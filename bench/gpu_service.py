"""Serve a baked `pytorch` service's model through tritonrt in this process; check it on CUDA; measure it.

Run by ``bench/gpu_check.py run`` with the baked project's ``src/`` and ``runtime/`` on ``PYTHONPATH``::

    python bench/gpu_service.py --project build/gpu-check/bake/my-service [--seconds 5] [--allow-cpu]

The model is the project's own (``Model``, bound by its ``service.bind`` with its settings), and requests go
through its own ``Client`` over gRPC and HTTP. What is checked:

- CUDA: a forward hook on the model's torch module records the device of every batch it computes, where the
  forward pass runs: the service's worker processes (the pytorch default) each load their own model in their
  setup, so the hook is set on every model the service makes (``record_devices``), in whichever process makes
  it. The counts come back through a tritonrt metric (``gpu_check_samples``, labelled by device and process),
  which Triton's ``/metrics`` adds up over the processes. The check needs every served batch on ``cuda``,
  computed in the service's own processes. Without torch the placeholder computes on numpy (device
  ``numpy``): the same path, testable on CPU. Without CUDA it refuses to run, unless ``--allow-cpu`` (then
  everything runs and the result is printed as a dry run, never as a GPU result).
- Values: random inputs at batch sizes 1, 3 and the largest batch, against numpy's mean of each sample
  (the placeholder model's contract), computed here independently of the model.

What is measured, each for ``--seconds``: one client sending batch-1 requests back to back; as many
clients as the largest batch, each sending batch-1 requests, so Triton's dynamic batcher forms full batches
(the mean batch it formed is read from Triton's metrics); one client sending full batches. Printed:
requests/s, samples/s, p50 and p99 latency.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pathlib
import platform
import re
import sys
import threading
import time
import urllib.request

import numpy as np

SAMPLE_VALUES = 16  # the size of the `-1` dimension of the check's inputs
RTOL, ATOL = 1e-5, 1e-6  # float32 on the GPU against float64 in numpy
SAMPLES_METRIC = "gpu_check_samples"


def load_project(project: pathlib.Path) -> dict:
    """The baked package's modules, by role."""
    answers = json.loads((project / ".cookiecutter.json").read_text())["cookiecutter"]
    if answers["framework"] != "pytorch":
        raise SystemExit(f"{project} is a {answers['framework']} service; the GPU check bakes framework=pytorch")
    package = answers["package"]
    return {name: importlib.import_module(f"{package}.{name}") for name in ("spec", "model", "service", "settings",
                                                                           "client")}  # fmt: skip


def check_contract(spec) -> None:
    """The check's reference is the placeholder's contract for the default tensors: say so if they changed."""
    shapes = [(t.name, np.dtype(t.dtype).name, tuple(t.shape)) for t in (*spec.INPUTS, *spec.OUTPUTS)]
    if shapes != [("features", "float32", (-1,)), ("score", "float32", (1,))] or not spec.BATCHING:
        raise SystemExit(f"the GPU check expects the template's default tensors and batching, found {shapes}: "
                         "update bench/gpu_service.py's reference with the template")  # fmt: skip


def reference(features: np.ndarray) -> np.ndarray:
    """The placeholder model's contract: each sample's score is the mean of its values."""
    return features.astype(np.float64).mean(axis=1, keepdims=True).astype(np.float32)


def check_values(client_module, spec, url: str, rng: np.random.Generator) -> list[str]:
    """Random batches of 1, 3 and the largest size through the client; returns the failures."""
    failures = []
    with client_module.Client(url) as client:
        for batch in (1, 3, spec.MAX_BATCH_SIZE):
            features = rng.standard_normal((batch, SAMPLE_VALUES)).astype(np.float32)
            if batch == 1:
                got = client.predict(features=features[0]).score[np.newaxis]
            else:
                got = client.predict_batch(features=features).score
            if got.dtype != np.float32 or not np.allclose(got, reference(features), rtol=RTOL, atol=ATOL):
                failures.append(
                    f"{url} batch {batch}: got {got.ravel()[:4]}..., want {reference(features).ravel()[:4]}..."
                )
    return failures


def record_devices(model_module, service_module) -> None:
    """Have every ``Model`` the service makes count the samples it computes, by device and process: each worker
    process's own model (made in its setup) as well as one made here (worker threads). The counts travel as a
    tritonrt metric with the batches' answers to Triton's ``/metrics`` (:func:`devices_used`)."""
    from tritonrt.metrics import Counter

    samples = Counter(SAMPLES_METRIC, "Samples the model computed, by device and process", labelnames=("device", "pid"))
    base = model_module.Model

    class Recorded(base):  # the service makes its models by this name
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            if self.module is not None:
                self.module.register_forward_hook(
                    lambda _module, _inputs, output: samples.labels(output.device.type, os.getpid()).inc(len(output))
                )
                return
            predict = self.predict  # torch is not installed: the placeholder computes on numpy

            def counted(**inputs: np.ndarray) -> dict:
                samples.labels("numpy", os.getpid()).inc(len(next(iter(inputs.values()))))
                return predict(**inputs)

            self.predict = counted

    model_module.Model = service_module.Model = Recorded


def devices_used(metrics_url: str) -> dict[str, dict[int, float]]:
    """The samples computed per device and per process, from Triton's ``/metrics`` (:func:`record_devices`)."""
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    used: dict[str, dict[int, float]] = {}
    for labels, value in re.findall(rf"^{SAMPLES_METRIC}\{{([^}}]*)\}} (\S+)$", text, re.MULTILINE):
        named = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        used.setdefault(named["device"], {})[int(named["pid"])] = float(value)
    return used


def inference_counts(metrics_url: str, model_name: str) -> tuple[float, float]:
    """(samples inferred, batches executed) of ``model_name`` from Triton's Prometheus metrics."""
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()

    def metric(name: str) -> float:
        pattern = rf'^{name}\{{model="{re.escape(model_name)}",[^}}]*\}} (\S+)$'
        return sum(float(value) for value in re.findall(pattern, text, re.MULTILINE))

    return metric("nv_inference_count"), metric("nv_inference_exec_count")


def load(client_module, url: str, clients: int, batch: int, seconds: float, features: np.ndarray) -> dict:
    """``clients`` threads, each with its own client, sending ``batch``-sample requests for ``seconds``."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def worker(index: int) -> None:
        with client_module.Client(url) as client:
            send = (lambda: client.predict(features=features[0])) if batch == 1 else (
                lambda: client.predict_batch(features=features[:batch]))  # fmt: skip
            for _ in range(3):
                send()  # connected and warm
            start.wait()
            while time.monotonic() < deadline[0]:
                began = time.perf_counter()
                send()
                latencies[index].append(time.perf_counter() - began)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    deadline[0] = time.monotonic() + seconds
    start.wait()
    began = time.monotonic()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    every = np.array([value for values in latencies for value in values]) * 1e3
    return {"requests/s": len(every) / elapsed, "samples/s": len(every) * batch / elapsed,
            "p50 ms": float(np.percentile(every, 50)), "p99 ms": float(np.percentile(every, 99))}  # fmt: skip


def measure(modules: dict, grpc_url: str, metrics_url: str, seconds: float, rng: np.random.Generator) -> list[tuple]:
    spec = modules["spec"]
    features = rng.standard_normal((spec.MAX_BATCH_SIZE, SAMPLE_VALUES)).astype(np.float32)
    rows = []
    for label, clients, batch in (
        ("batch 1, 1 client", 1, 1),
        (f"batch 1, {spec.MAX_BATCH_SIZE} clients (dynamic batching)", spec.MAX_BATCH_SIZE, 1),
        (f"batch {spec.MAX_BATCH_SIZE} per request, 1 client", 1, spec.MAX_BATCH_SIZE),
    ):
        samples_before, batches_before = inference_counts(metrics_url, spec.MODEL_NAME)
        figures = load(modules["client"], grpc_url, clients, batch, seconds, features)
        samples_after, batches_after = inference_counts(metrics_url, spec.MODEL_NAME)
        figures["mean batch"] = (samples_after - samples_before) / max(batches_after - batches_before, 1)
        rows.append((label, figures))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=pathlib.Path, required=True)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        torch = None
    cuda = torch is not None and torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        why = "torch is not importable" if torch is None else "torch.cuda.is_available() is False"
        print(
            f"gpu_service: refusing to run: {why}, so nothing would run on a GPU. On a GPU machine, check the "
            "driver (nvidia-smi) and torch's CUDA build; for a dry run on CPU pass --allow-cpu.",
            file=sys.stderr,
        )
        return 2

    modules = load_project(args.project)
    spec = modules["spec"]
    check_contract(spec)
    from tritonrt.ports import free_ports
    from tritonrt.triton import Triton, TritonSecurityConfig

    http_port, grpc_port, metrics_port = free_ports(3)
    prefix = modules["settings"].PREFIX
    settings = modules["settings"].Settings.from_env({f"{prefix}HTTP_PORT": str(http_port),
                                                      f"{prefix}GRPC_PORT": str(grpc_port),
                                                      f"{prefix}METRICS_PORT": str(metrics_port)})  # fmt: skip
    record_devices(modules["model"], modules["service"])
    # As the service does: with worker processes (the pytorch default) each loads its own model in its setup,
    # and this process none (CUDA must not start before the fork).
    in_workers = modules["service"].loads_in_workers(settings)
    model = None if in_workers else modules["service"].Model()
    rng = np.random.default_rng(2026)
    urls = {"http": f"http://127.0.0.1:{http_port}", "grpc": f"grpc://127.0.0.1:{grpc_port}"}
    security = TritonSecurityConfig(access_token=settings.access_token)
    with Triton(config=modules["service"].triton_config(settings), security_config=security) as triton:
        modules["service"].bind(triton, model, settings)
        triton.run()
        failures = [failure for url in urls.values() for failure in check_values(modules["client"], spec, url, rng)]
        rows = measure(modules, urls["grpc"], f"http://127.0.0.1:{metrics_port}", args.seconds, rng)
        used = devices_used(f"http://127.0.0.1:{metrics_port}")

    device_name = torch.cuda.get_device_name(0) if cuda else platform.processor() or "CPU"
    where = "worker processes" if in_workers else "worker threads"
    print(
        f"\nGPU check: {args.project.name} ({where}, {device_name}); Python {platform.python_version()}, "
        f"numpy {np.__version__}" + (f", torch {torch.__version__}" if torch else "")
    )
    devices = {device: sum(by_pid.values()) for device, by_pid in used.items()}
    pids = {pid for by_pid in used.values() for pid in by_pid}
    processes = (f"{len(pids)} worker process(es), pid {', '.join(map(str, sorted(pids)))}" if in_workers
                 else f"this process, pid {os.getpid()}")  # fmt: skip
    print(f"  samples computed per device: {devices or 'none recorded'} (in {processes})")
    if cuda and not in_workers:  # (a worker's allocations are its own: not seen from here)
        print(f"  torch.cuda.max_memory_allocated: {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
    print(
        f"  values: batches of 1, 3 and {spec.MAX_BATCH_SIZE} over HTTP and gRPC against numpy: "
        + ("all right" if not failures else "WRONG")
    )
    for failure in failures:
        print(f"    {failure}")
    print(
        f"\n  {'load (gRPC, ' + str(args.seconds) + ' s each)':48} {'req/s':>9} {'samples/s':>10} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'mean batch':>10}"
    )
    for label, figures in rows:
        print(
            f"  {label:48} {figures['requests/s']:9.0f} {figures['samples/s']:10.0f} {figures['p50 ms']:8.2f} "
            f"{figures['p99 ms']:8.2f} {figures['mean batch']:10.1f}"
        )
    # Each computed sample counted where the service computes it: in worker processes, never here; else here.
    recorded = bool(devices) and ((os.getpid() not in pids) if in_workers else pids == {os.getpid()})
    if failures:
        print("\nRESULT: FAILED: wrong values (above)")
        return 1
    if not recorded:
        print(f"\nRESULT: FAILED: the samples were not recorded in the {where} that serve the model: {used}")
        return 1
    if not (cuda and set(devices) == {"cuda"}):
        if args.allow_cpu:
            print("\nRESULT: DRY RUN on CPU (--allow-cpu): the service works; this is not a GPU result")
            return 0
        print(f"\nRESULT: FAILED: the model computed on {devices}, not only on CUDA")
        return 1
    print(f"\nRESULT: PASSED on {device_name}: every batch computed on CUDA in the {where}, values right")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
