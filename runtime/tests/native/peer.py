"""A small worker process for the native backend's end-to-end tests, built only from the new modules.

    python peer.py --repo REPO --sockets DIR [--token HEX] [--region-limit BYTES] [--stats FILE]

Writes a model repository of backend "tritonrt" (config.pbtxt, a version directory, the backend library and
the connection file per model) and serves its models until SIGTERM; prints READY when listening.

- ``identity``: every data type, optional inputs IN_<TYPE> -> OUT_<TYPE>; a request parameter ``fail`` fails
  that request alone (INVALID_ARG); ``big_output`` (int) adds an output of that many bytes; REQUESTS (INT32)
  tells how many requests came in the same message.
- ``stream``: decoupled; IN (FP32) and COUNT (INT32): COUNT responses OUT = IN * (i + 1), DELAY_MS apart;
  stops early when the client cancels (the count of cancelled streams goes to --stats).
"""

from __future__ import annotations

import argparse
import pathlib
import signal
import sys
import threading
import time

import numpy as np

from tritonrt.proxy import native_files
from tritonrt.proxy.connection import (
    ErrorResponse,
    InstanceIdentity,
    PeerGone,
    RegionError,
    WorkerSettings,
)
from tritonrt.proxy.listener import WorkerListener
from tritonrt.proxy.wire import ERROR_INVALID_ARG, WireError

TYPES = {
    "BOOL": "TYPE_BOOL", "UINT8": "TYPE_UINT8", "UINT16": "TYPE_UINT16", "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64", "INT8": "TYPE_INT8", "INT16": "TYPE_INT16", "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64", "FP16": "TYPE_FP16", "FP32": "TYPE_FP32", "FP64": "TYPE_FP64", "BYTES": "TYPE_STRING",
}  # fmt: skip


def _tensors(prefix: str, optional: bool) -> str:
    flag = " optional: true" if optional else ""
    tensors = (f'{{ name: "{prefix}_{name}" data_type: {kind} dims: [-1]{flag} }}' for name, kind in TYPES.items())
    return ", ".join(tensors)


CONFIGS = {
    "identity": f"""max_batch_size: 64
input [{_tensors("IN", True)}]
output [{_tensors("OUT", False)}, {{ name: "REQUESTS" data_type: TYPE_INT32 dims: [1] }},
        {{ name: "BIG" data_type: TYPE_UINT8 dims: [-1] }}]
dynamic_batching {{ max_queue_delay_microseconds: 20000 }}
""",
    "stream": """max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "IN" data_type: TYPE_FP32 dims: [-1] }, { name: "COUNT" data_type: TYPE_INT32 dims: [1] },
       { name: "DELAY_MS" data_type: TYPE_INT32 dims: [1] optional: true }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [-1] }]
""",
}


def identity(requests) -> list:
    responses = []
    for request in requests:
        if "fail" in request.parameters:
            responses.append(ErrorResponse(f"failed on request: {request.parameters['fail']}", ERROR_INVALID_ARG))
            continue
        outputs = {name.replace("IN_", "OUT_", 1): array for name, array in request.items()}
        outputs["REQUESTS"] = np.full((1, 1), len(requests), np.int32)
        big = request.parameters.get("big_output")
        if big:
            outputs["BIG"] = np.ones((1, int(big)), np.uint8)
        responses.append(outputs)
    return responses


class Peer:
    def __init__(self, repo: pathlib.Path, sockets: pathlib.Path, token: str, settings: WorkerSettings, stats):
        self.stats = stats
        self.listeners: list[WorkerListener] = []
        for name, config in CONFIGS.items():
            model_dir = repo / name
            (model_dir / "1").mkdir(parents=True, exist_ok=True)
            (model_dir / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "tritonrt"\n{config}')
            native_files.install_library(model_dir)
            socket_path = sockets / f"{name}.0.sock"
            socket_path.unlink(missing_ok=True)
            decoupled = name == "stream"
            identity_ = InstanceIdentity(name, 0, token, decoupled, 0 if decoupled else 64)
            self.listeners.append(WorkerListener(socket_path, identity_, settings))
            native_files.write_connection_file(model_dir, [socket_path], token)

    def serve(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._serve, args=(listener,), daemon=True) for listener in self.listeners]
        for thread in threads:
            thread.start()
        return threads

    def _serve(self, listener: WorkerListener) -> None:
        while True:
            try:
                connection = listener.accept()
            except OSError:
                return
            try:
                while True:
                    seq, requests = connection.receive_batch()
                    if listener.identity.decoupled:
                        self._stream(connection, seq, requests)
                    else:
                        responses = identity(requests)
                        requests = None
                        try:
                            connection.reply(seq, responses)
                        except RegionError as error:
                            connection.fail(seq, str(error))
            except (PeerGone, OSError):
                pass
            except WireError as error:
                print(f"peer: {error}", file=sys.stderr, flush=True)
            finally:
                connection.close()

    def _stream(self, connection, seq: int, requests) -> None:
        plans = [(r["IN"], int(r["COUNT"].reshape(-1)[0]), int(r.get("DELAY_MS", [0])[0])) for r in requests]
        requests = None
        steps = max(count for _, count, _ in plans)
        for step in range(steps):
            cancelled = connection.poll()
            if cancelled:
                self.stats.write(f"cancelled {len(cancelled)}\n")
                self.stats.flush()
                break
            responses = [{"OUT": array * (step + 1)} if step < count else None for array, count, _ in plans]
            connection.reply(seq, responses, final=False)
            time.sleep(max(delay for _, _, delay in plans) / 1000)
        plans = None
        connection.reply(seq, [], final=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", type=pathlib.Path, required=True)
    parser.add_argument("--sockets", type=pathlib.Path, required=True)
    parser.add_argument("--token", default=None)
    parser.add_argument("--region-limit", type=int, default=None)
    parser.add_argument("--stats", type=pathlib.Path, default=None)
    args = parser.parse_args()
    settings = WorkerSettings() if args.region_limit is None else WorkerSettings(region_limit=args.region_limit)
    stats = open(args.stats, "a") if args.stats else open("/dev/null", "w")  # noqa: SIM115 - lives until exit
    peer = Peer(args.repo, args.sockets, args.token or native_files.new_token(), settings, stats)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    peer.serve()
    print("READY", flush=True)
    stopped.wait()
    for listener in peer.listeners:
        listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
