"""The worker's hot path alone, in-process: receive a batch, answer it, on a socketpair (no tritonserver).

    python bench/worker_hotpath.py [--rounds 7] [--batches 2000] [--against /path/to/other/runtime]

A backend written here sends the same pre-encoded BATCH again and again; the worker's connection
(``tritonrt.proxy.connection.WorkerConnection``) receives it, builds the numpy inputs, and replies with the
identity's outputs; the backend reads each reply. Prints the microseconds per batch (median of the rounds, with
their range) for each case. With ``--against DIR`` (a directory holding another ``tritonrt`` package, such as an
export of main's ``runtime/``), the two versions run alternately, round by round, each in its own process, and
the per-round ratios (this tree / the other) are printed too: on a noisy machine only ratios within one run count.

Cases: ``small`` (8 requests, one 64 B FP32 input each, inline both ways), ``large-ref`` (4 requests, 256 KiB
each in the backend's region, the output is the input: sent back by reference), ``large-copy`` (4 requests,
256 KiB each in the region, a new 256 KiB output each: copied into the worker's region).
"""

from __future__ import annotations

import argparse
import array
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
RUNTIME = HERE.parent / "runtime"
CASES = ("small", "large-ref", "large-copy")


def _measure(batches: int) -> dict[str, float]:
    """Microseconds per batch for each case, in this process (whichever tritonrt is on sys.path)."""
    import numpy as np

    from tritonrt.proxy import wire
    from tritonrt.proxy.connection import InstanceIdentity, WorkerConnection, WorkerSettings
    from tritonrt.proxy.link import Link
    from tritonrt.proxy.regions import OwnRegion

    def run(case: str) -> float:
        worker_end, backend_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        settings = WorkerSettings(region_limit=64 << 20)
        connection = WorkerConnection(Link(worker_end, 0), InstanceIdentity("m", 0, "t"), settings)
        region = None
        if case == "small":
            count, data = 8, np.arange(16, dtype=np.float32).tobytes() * 8
            tensors = [wire.TensorMeta("IN", wire.DTYPE_FP32, 0, i * 64, 64, (1, 16)) for i in range(count)]
        else:
            count, data, size = 4, b"", 256 << 10
            region = OwnRegion(1, count * size)
            tensors = [wire.TensorMeta("IN", wire.DTYPE_FP32, 1, i * size, size, (1, size // 4)) for i in range(count)]
        requests = [wire.RequestMeta("", 0, None, {}, None, [tensor]) for tensor in tensors]

        def message(announce: bool) -> bytes:
            flags = wire.FLAG_NEW_REGION if announce else 0
            header = wire.Header(wire.KIND_BATCH, flags, count, 1, region.size if announce and region else 0,
                                 1 if region else 0)  # fmt: skip
            return wire.encode_message(header, wire.encode_batch(requests), len(data)) + data

        steady = message(False)
        fresh: Any = np.ones((1, (256 << 10) // 4), np.float32)
        answer: Callable[[Any], list[Any]]
        if case == "large-copy":
            answer = lambda received: [{"OUT": fresh} for _ in received]  # noqa: E731
        else:
            answer = lambda received: [{"OUT": r["IN"]} for r in received]  # noqa: E731
        pending = b""

        def read_reply() -> None:
            nonlocal pending
            while True:
                if len(pending) >= wire.HEADER_SIZE:
                    total = wire.decode_header(pending).total_length
                    if len(pending) >= total:
                        pending = pending[total:]
                        return
                data, ancillary, _, _ = backend_end.recvmsg(1 << 20, socket.CMSG_SPACE(16))
                for _, _, fds in ancillary:
                    for fd in array.array("i", fds[: len(fds) - len(fds) % 4]):
                        os.close(fd)
                pending += data

        def one(batch: bytes) -> None:
            backend_end.sendall(batch)
            seq, received = connection.receive_batch()
            responses = answer(received)
            del received
            connection.reply(seq, responses)
            read_reply()

        if region is not None:
            ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [region.fd]))]
            backend_end.sendmsg([message(True)], ancillary)
            seq, received = connection.receive_batch()
            responses = answer(received)
            del received
            connection.reply(seq, responses)
            read_reply()
        for _ in range(200):
            one(steady)
        start = time.perf_counter()
        for _ in range(batches):
            one(steady)
        elapsed = time.perf_counter() - start
        connection.close()
        backend_end.close()
        return elapsed / batches * 1e6

    return {case: run(case) for case in CASES}


def _child(runtime: pathlib.Path, batches: int) -> dict[str, float]:
    environment = dict(os.environ, PYTHONPATH=str(runtime))
    command = [sys.executable, __file__, "--child", "--batches", str(batches)]
    output = subprocess.run(command, env=environment, check=True, capture_output=True, text=True, cwd=runtime)
    return dict(json.loads(output.stdout))


def _summary(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--against", type=pathlib.Path, help="a directory holding another tritonrt package")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure(args.batches)))
        return 0
    versions = {"this": RUNTIME}
    if args.against is not None:
        versions["other"] = args.against.resolve()
    results: dict[str, list[dict[str, float]]] = {name: [] for name in versions}
    print(f"load average before: {os.getloadavg()}", file=sys.stderr)
    for round_index in range(args.rounds):
        order = list(versions) if round_index % 2 == 0 else list(reversed(versions))
        for name in order:
            results[name].append(_child(versions[name], args.batches))
    print(f"us per batch, median [range] of {args.rounds} rounds of {args.batches} batches")
    for case in CASES:
        line = f"{case:11s}"
        for name in versions:
            line += f"  {name}: {_summary([r[case] for r in results[name]])}"
        if "other" in versions:
            ratios = [t[case] / o[case] for t, o in zip(results["this"], results["other"], strict=True)]
            line += f"  this/other: {_summary(ratios)}"
        print(line)
    print(f"load average after: {os.getloadavg()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
