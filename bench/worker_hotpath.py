"""The worker's hot path alone, in-process: receive a batch, answer it, on a socketpair (no tritonserver).

    python bench/worker_hotpath.py [--pairs 60] [--batches 300] [--processes 6] [--against /path/to/runtime]

A backend written here sends the same pre-encoded BATCH again and again; the worker's connection
(``tritonrt.proxy.connection.WorkerConnection``) receives it, builds the numpy inputs, and replies with the
identity's outputs; the backend reads each reply, all in one thread, whose CPU time is measured. Each version of
tritonrt runs in a process of its own that
keeps its connections and times one sample of ``--batches`` batches when asked. With ``--against DIR`` (a
directory holding another ``tritonrt`` package, such as an export of main's ``runtime/``), the two processes are
asked in turn, sample after sample (the order swapped every pair), both pinned to one core, so that each pair of
samples meets the same load on a shared machine; the processes are replaced ``--processes`` times over the run
(each process's memory layout differs a little, and with it its speed). Prints the microseconds per batch
(median of the samples, with the quartiles) and the median of the per-pair ratios (this tree / the other, with
quartiles).

Cases: ``small`` (8 requests, one 64 B FP32 input each, inline both ways), ``large-ref`` (4 requests, 256 KiB
each in the backend's region, the output is the input: sent back by reference), ``large-copy`` (4 requests,
256 KiB each in the region, a new 256 KiB output each: copied into the worker's region).
"""

from __future__ import annotations

import argparse
import array
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import IO, Any

HERE = pathlib.Path(__file__).resolve().parent
RUNTIME = HERE.parent / "runtime"
CASES = ("small", "large-ref", "large-copy")


class _Case:
    """One case's connection, set up once, warmed up; :meth:`sample` times ``batches`` round trips."""

    def __init__(self, case: str) -> None:
        import numpy as np
        from tritonrt.proxy import wire
        from tritonrt.proxy.connection import InstanceIdentity, WorkerConnection, WorkerSettings
        from tritonrt.proxy.link import Link
        from tritonrt.proxy.regions import OwnRegion

        self.wire = wire
        worker_end, self.backend = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        settings = WorkerSettings(region_limit=64 << 20)
        self.connection = WorkerConnection(Link(worker_end, 0), InstanceIdentity("m", 0, "t"), settings)
        region = None
        if case == "small":
            count, data = 8, np.arange(16, dtype=np.float32).tobytes() * 8
            tensors = [wire.TensorMeta("IN", wire.DTYPE_FP32, 0, i * 64, 64, (1, 16)) for i in range(count)]
        else:
            count, data, size = 4, b"", 256 << 10
            region = self.region = OwnRegion(1, count * size)
            tensors = [wire.TensorMeta("IN", wire.DTYPE_FP32, 1, i * size, size, (1, size // 4)) for i in range(count)]
        requests = [wire.RequestMeta("", 0, None, {}, None, [tensor]) for tensor in tensors]

        def message(announce: bool) -> bytes:
            flags = wire.FLAG_NEW_REGION if announce else 0
            size = region.size if announce and region is not None else 0
            header = wire.Header(wire.KIND_BATCH, flags, count, 1, size, 1 if region is not None else 0)
            return wire.encode_message(header, wire.encode_batch(requests), len(data)) + data

        fresh: Any = np.ones((1, (256 << 10) // 4), np.float32)
        self.answer: Callable[[Any], list[Any]]
        if case == "large-copy":
            self.answer = lambda received: [{"OUT": fresh} for _ in received]
        else:
            self.answer = lambda received: [{"OUT": r["IN"]} for r in received]
        self.pending = b""
        if region is not None:
            ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [region.fd]))]
            self.backend.sendmsg([message(True)], ancillary)
            self._answer_one()
        self.steady = message(False)
        for _ in range(200):
            self._one()

    def _answer_one(self) -> None:
        seq, received = self.connection.receive_batch()
        responses = self.answer(received)
        del received
        self.connection.reply(seq, responses)
        self._read_reply()

    def _one(self) -> None:
        self.backend.sendall(self.steady)
        self._answer_one()

    def _read_reply(self) -> None:
        wire = self.wire
        while True:
            if len(self.pending) >= wire.HEADER_SIZE:
                total = wire.decode_header(self.pending).total_length
                if len(self.pending) >= total:
                    self.pending = self.pending[total:]
                    return
            data, ancillary, _, _ = self.backend.recvmsg(1 << 20, socket.CMSG_SPACE(16))
            for _, _, fds in ancillary:
                for fd in array.array("i", fds[: len(fds) - len(fds) % 4]):
                    os.close(fd)
            self.pending += data

    def sample(self, batches: int) -> float:
        """Microseconds of this thread's CPU time per batch (the round trip never waits: this thread sends each
        batch itself), so time spent descheduled on a busy machine does not count."""
        start = time.thread_time()
        for _ in range(batches):
            self._one()
        return (time.thread_time() - start) / batches * 1e6


def _serve_samples(batches: int) -> None:
    """The child: set the cases up, then answer each line naming a case with one sample's us per batch."""
    cpu = os.environ.get("WORKER_HOTPATH_CPU")
    if cpu is not None:
        os.sched_setaffinity(0, {int(cpu)})
    cases = {case: _Case(case) for case in CASES}
    print("ready", flush=True)
    for line in sys.stdin:
        print(f"{cases[line.strip()].sample(batches):.3f}", flush=True)


class _Child:
    def __init__(self, runtime: pathlib.Path, batches: int, cpu: int) -> None:
        environment = dict(os.environ, PYTHONPATH=str(runtime), WORKER_HOTPATH_CPU=str(cpu))
        command = [sys.executable, __file__, "--child", "--batches", str(batches)]
        self.process = subprocess.Popen(
            command, env=environment, cwd=runtime, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._read() == "ready"

    def _read(self) -> str:
        stdout: IO[str] | None = self.process.stdout
        assert stdout is not None
        return stdout.readline().strip()

    def sample(self, case: str) -> float:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(case + "\n")
        stdin.flush()
        return float(self._read())

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(30)


def _summary(values: list[float]) -> str:
    low, median, high = statistics.quantiles(values, n=4)
    return f"{median:8.2f} [{low:.2f}-{high:.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=60, help="samples per case and version")
    parser.add_argument("--batches", type=int, default=300, help="batches per sample")
    parser.add_argument("--processes", type=int, default=6, help="fresh pairs of processes over the run")
    parser.add_argument("--against", type=pathlib.Path, help="a directory holding another tritonrt package")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _serve_samples(args.batches)
        return 0
    cpu = max(os.sched_getaffinity(0))  # both on one core: a pair of samples meets the same neighbours
    versions = {"this": RUNTIME}
    if args.against is not None:
        versions["other"] = args.against.resolve()
    samples: dict[tuple[str, str], list[float]] = {(n, c): [] for n in versions for c in CASES}
    print(f"load average before: {os.getloadavg()}", file=sys.stderr)
    for generation in range(args.processes):  # fresh processes now and then: each has its own memory layout
        children = {name: _Child(runtime, args.batches, cpu) for name, runtime in versions.items()}
        try:
            for index in range(args.pairs // args.processes):
                for case in CASES:
                    order = list(children) if (index + generation) % 2 == 0 else list(reversed(children))
                    for name in order:
                        samples[name, case].append(children[name].sample(case))
        finally:
            for child in children.values():
                child.close()
    count = args.pairs // args.processes * args.processes
    print(f"us per batch: median [quartiles] of {count} samples of {args.batches} batches, {args.processes} processes")
    for case in CASES:
        line = f"{case:11s}"
        for name in versions:
            line += f"  {name}: {_summary(samples[name, case])}"
        if "other" in versions:
            pairs = zip(samples["this", case], samples["other", case], strict=True)
            line += f"  this/other: {_summary([this / other for this, other in pairs])}"
        print(line)
    print(f"load average after: {os.getloadavg()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
