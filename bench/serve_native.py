"""Serve the FP32 identity model (max_batch_size 64, dynamic batching) through tritonrt's native backend.

    python serve_native.py --http-port 8000 --grpc-port 8001 --metrics-port 8002

Phase 1 of the native backend: a worker built from the new modules (tritonrt.proxy.connection) answers each
request with its input, as bench/plain/identity does inside Triton's Python stub; tritonserver loads
libtriton_tritonrt.so from the model's directory. Prints ``READY <seconds to ready>``; stops on SIGTERM/SIGINT.
"""

import argparse
import pathlib
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

from tritonrt.proxy import native_files
from tritonrt.proxy.connection import InstanceIdentity, PeerGone, WorkerListener
from tritonrt.server import environment
from tritonrt.server.install import find_or_install_server

CONFIG = """name: "identity"
backend: "tritonrt"
max_batch_size: 64
input [{ name: "INPUT" data_type: TYPE_FP32 dims: [-1] }]
output [{ name: "OUTPUT" data_type: TYPE_FP32 dims: [-1] }]
dynamic_batching {}
instance_group [{ count: 1 kind: KIND_CPU }]
"""


def serve(listener: WorkerListener) -> None:
    while True:
        try:
            connection = listener.accept()
        except OSError:
            return
        try:
            while True:
                seq, requests = connection.receive_batch()
                responses = [{"OUTPUT": request.data["INPUT"]} for request in requests]
                requests = None
                connection.reply(seq, responses)
        except (PeerGone, OSError):
            pass
        finally:
            connection.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    args = parser.parse_args()
    start = time.perf_counter()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="tritonrt-native-bench-"))
    model_dir = workdir / "repo" / "identity"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(CONFIG)
    native_files.install_library(model_dir)
    socket_path = workdir / "identity.0.sock"
    token = native_files.new_token()
    listener = WorkerListener(socket_path, InstanceIdentity("identity", 0, token, False, 64))
    native_files.write_connection_file(model_dir, [socket_path], token)
    threading.Thread(target=serve, args=(listener,), daemon=True).start()
    server_dir = find_or_install_server()
    server = subprocess.Popen(
        [str(server_dir / "bin/tritonserver"), f"--model-repository={model_dir.parent}",
         f"--backend-directory={server_dir / 'backends'}", f"--http-port={args.http_port}",
         f"--grpc-port={args.grpc_port}", f"--metrics-port={args.metrics_port}", "--exit-timeout-secs=2"],
        env=environment.server_environment(server_dir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    try:
        url = f"http://127.0.0.1:{args.http_port}/v2/models/identity/ready"
        while not stopped.is_set():
            try:
                with urllib.request.urlopen(url, timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                if server.poll() is not None:
                    raise RuntimeError("tritonserver exited before the model was ready") from None
                time.sleep(0.05)
        print(f"READY {time.perf_counter() - start:.3f}", flush=True)
        stopped.wait()
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        listener.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
