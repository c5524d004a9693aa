"""GPU buffers through the native backend: a client's CUDA shared memory in and out, checked and timed.

    python bench/native_gpu.py [--elements 262144] [--count 200]

Serves the identity model with bench/serve_native.py, registers two CUDA shared-memory regions with Triton
(cudaMalloc + cudaIpcGetMemHandle through the CUDA runtime that tritonserver ships), sends requests whose input
lies in GPU memory and whose output Triton places in GPU memory (the backend stages both through host memory
with cudaMemcpy), checks the result on the GPU against the input and prints the median latency next to the same
request sent as binary HTTP data. Needs a GPU and a GPU build of tritonserver.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import json
import statistics
import subprocess
import sys
import time
import urllib.request

import numpy as np
from run import HERE, wait_ready
from tritonrt.ports import free_ports
from tritonrt.server.install import find_or_install_server


def cuda_runtime() -> ctypes.CDLL:
    libraries = sorted((find_or_install_server() / "lib").glob("libcudart*.so*")) or ["libcudart.so.12"]
    runtime = ctypes.CDLL(str(libraries[0]))
    count = ctypes.c_int(0)
    if runtime.cudaGetDeviceCount(ctypes.byref(count)) != 0 or count.value == 0:
        raise SystemExit("native_gpu: no CUDA device here; run this on a machine with a GPU")
    return runtime


def check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed with CUDA error {status}")


def post(url: str, body: dict | bytes, headers: dict | None = None) -> dict:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
        json_length = response.headers.get("Inference-Header-Content-Length")  # a binary reply: JSON, then data
    if json_length is not None:
        text = text[: int(json_length)]
    return json.loads(text) if text.startswith(b"{") else {}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--elements", type=int, default=262144)
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    cuda = cuda_runtime()
    size = args.elements * 4
    http, grpc, metrics = free_ports(3)
    server = subprocess.Popen(
        [sys.executable, str(HERE / "serve_native.py"), "--http-port", str(http), "--grpc-port", str(grpc),
         "--metrics-port", str(metrics)], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        server.stdout.readline()
        wait_ready(http)
        base = f"http://127.0.0.1:{http}"
        host = np.random.default_rng(0).random(args.elements, dtype=np.float32)
        pointers = {}
        for name in ("input", "output"):
            pointer = ctypes.c_void_p()
            check(cuda.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(size)), "cudaMalloc")
            handle = ctypes.create_string_buffer(64)
            check(cuda.cudaIpcGetMemHandle(handle, pointer), "cudaIpcGetMemHandle")
            raw = {"b64": base64.b64encode(handle.raw).decode()}
            registration = {"raw_handle": raw, "device_id": 0, "byte_size": size}
            post(f"{base}/v2/cudasharedmemory/region/{name}/register", registration)
            pointers[name] = pointer
        check(
            cuda.cudaMemcpy(pointers["input"], ctypes.c_void_p(host.ctypes.data), ctypes.c_size_t(size), 1),
            "cudaMemcpy H2D",
        )
        region = {"shared_memory_byte_size": size}
        gpu_request = {
            "inputs": [{"name": "INPUT", "shape": [1, args.elements], "datatype": "FP32",
                        "parameters": {"shared_memory_region": "input", **region}}],
            "outputs": [{"name": "OUTPUT", "parameters": {"shared_memory_region": "output", **region}}],
        }  # fmt: skip
        header = json.dumps(
            {"inputs": [{"name": "INPUT", "shape": [1, args.elements], "datatype": "FP32",
                         "parameters": {"binary_data_size": size}}],
             "outputs": [{"name": "OUTPUT", "parameters": {"binary_data": True}}]}
        ).encode()  # fmt: skip
        binary = header + host.tobytes()
        binary_headers = {
            "Inference-Header-Content-Length": str(len(header)),
            "Content-Type": "application/octet-stream",
        }
        url = f"{base}/v2/models/identity/infer"
        post(url, gpu_request)
        back = np.empty_like(host)
        check(
            cuda.cudaMemcpy(ctypes.c_void_p(back.ctypes.data), pointers["output"], ctypes.c_size_t(size), 2),
            "cudaMemcpy D2H",
        )
        if not np.array_equal(back, host):
            raise SystemExit("native_gpu: the output in GPU memory differs from the input")
        timings = {"gpu in/out (CUDA shared memory)": [], "host (binary HTTP)": []}
        for _ in range(args.count):
            for label, send in (
                ("gpu in/out (CUDA shared memory)", lambda: post(url, gpu_request)),
                ("host (binary HTTP)", lambda: post(url, binary, binary_headers)),
            ):
                start = time.perf_counter()
                send()
                timings[label].append(time.perf_counter() - start)
        print(f"identity, {size} bytes per request, {args.count} requests each, one connection; output checked")
        for label, values in timings.items():
            print(f"  {label:34} p50 {statistics.median(values) * 1e3:7.3f} ms")
        for name, pointer in pointers.items():
            post(f"{base}/v2/cudasharedmemory/region/{name}/unregister", b"")
            cuda.cudaFree(pointer)
    finally:
        server.terminate()
        server.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
