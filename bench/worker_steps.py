"""The worker's CPU per request, end to end and step by step: a real CallableWorker (bench/serve.py's identity with
``@batch``) driven by a backend written here (no tritonserver), one request per batch, one connection.

    python bench/worker_steps.py [--rounds 20] [--requests 1000] [--modes thread,process] [--sizes "64 B,1 MiB,4 MiB"]
                                 [--against OTHER_TREE/runtime] [--no-steps] [--serve-only SECONDS]

For each size and worker mode it prints:

- **end to end**: the CPU time of a worker process serving on a real listener socket (every thread, user and
  system, from the kernel's schedstat), per request, while this process's backend sends a BATCH, reads the REPLY
  (ACKing one that used the worker's region, as the native backend does) and sends the next, as ``wrk -c 1``
  drives a server. ``thread``: as a worker thread serves; ``process``: as a worker process does (its connection
  tracked in the call slot, its inherited objects frozen). 64 B tensors travel inline; 1 MiB and 4 MiB ones in
  the backend's region, and the identity's output goes back by reference.
- **the batch there already**: the same worker code with the backend in its own thread, over a socketpair: the
  worker's thread CPU per batch (median) when it never waits. The difference to end to end is what waiting costs
  (sleeping, waking up, and running with caches that other processes used meanwhile).
- **by step**: where that CPU goes, from a sampling profiler (a timer signal every 0.2 ms reads the worker's
  stack; a sample counts for the innermost function that names a step in STEPS, C code for the Python function
  that called it), each step's share of the samples times the CPU per batch. Python checks for signals between
  bytecodes, so a sample can land in the next function: read differences under 0.5 us as noise.

With ``--against DIR`` (a folder holding another ``tritonrt`` package: ``git archive HEAD runtime | tar -x -C
DIR``) each round measures both trees back to back (order swapped each round) and prints the median [range] of the
per-round ratios: on a loaded machine single figures move by tens of percent, so judge changes by these ratios.
``--serve-only S`` drives one worker for S seconds and prints its pid, to attach py-spy or perf."""

from __future__ import annotations

import argparse
import array
import gc
import json
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

HERE = pathlib.Path(__file__).resolve().parent
RUNTIME = HERE.parent / "runtime"
SIZES = {"64 B": 64, "1 MiB": 1 << 20, "4 MiB": 4 << 20}
TOKEN = "0" * 64

# The hot path's steps, in order: a label and the functions (file, qualified name) whose own time counts as that
# step. A sample counts for the innermost function on its stack that names a step; C code (numpy, system calls,
# the wrapt decorator's wrapper) counts for the Python function that called it.
STEPS: list[tuple[str, list[tuple[str, str]]]] = [
    ("receive: recvmsg (system call)", [("proxy/link.py", "Link._read_now")]),
    ("receive: framing", [("proxy/link.py", "Link.receive"), ("proxy/link.py", "Link._read"),
                          ("proxy/link.py", "Link._drop_consumed"), ("proxy/views.py", "Held.viewed")]),
    ("receive: header decode", [("proxy/wire.py", "decode_header"), ("proxy/wire.py", "Header.total_length")]),
    ("receive: batch records (decoded once, cached)", [("proxy/connection.py", "WorkerConnection._decoded"),
                                                       ("proxy/wire_decode.py", "decode_batch")]),
    ("receive: tensor views, Request objects", [
        ("proxy/connection.py", "WorkerConnection._requests"), ("proxy/tensors.py", "array_from"),
        ("proxy/types.py", "Request.__init__"), ("proxy/types.py", "BatchCancellation.__init__"),
        ("proxy/wire.py", "Header.data_start"),
    ]),
    ("receive: batch state", [
        ("proxy/connection.py", "WorkerConnection.receive_batch"), ("proxy/connection.py", "WorkerConnection._receive"),
        ("proxy/calls.py", "CallTable.reopen"),
    ]),
    ("process mode: call slot, lock", [
        ("models/instance.py", "TrackedConnection.receive_batch"), ("models/instance.py", "TrackedConnection.reply"),
        ("models/instance.py", "CallSlot.set"), ("models/instance.py", "CallSlot.mark"),
    ]),
    ("trace spans (untraced)", [
        ("proxy/telemetry.py", "request_spans"), ("proxy/telemetry.py", "BatchSpans.__init__"),
        ("proxy/telemetry.py", "BatchSpans.__enter__"), ("proxy/telemetry.py", "BatchSpans.__exit__"),
    ]),
    ("BLS call scope", [("proxy/calls.py", "enter"), ("proxy/calls.py", "leave")]),
    ("@batch: stacking", [
        ("decorators/batching.py", "batch"), ("decorators/batching.py", "_request_inputs"),
        ("decorators/_common.py", "requests_argument"), ("decorators/_common.py", "inputs_batch_size"),
        ("decorators/batching.py", "_concatenate"), ("decorators/batching.py", "_join_adjacent"),
    ]),
    ("the callable (identity)", [("worker_steps.py", "_worker.<locals>.identity")]),
    ("@batch: splitting", [("decorators/batching.py", "_split_batch")]),
    ("calling it, output checks", [
        ("proxy/worker.py", "CallableWorker._run"), ("proxy/worker.py", "CallableWorker._checked"),
        ("proxy/isolation.py", "answer_each"),
    ]),
    ("reply: encode", [
        ("proxy/outgoing.py", "sort_outgoing"), ("proxy/outgoing.py", "inline_answer"),
        ("proxy/outgoing.py", "lay_out_inline"), ("proxy/outgoing.py", "encode_records"),
        ("proxy/wire.py", "pack_tensor"), ("proxy/wire.py", "encode_message"), ("proxy/wire.py", "align"),
        ("proxy/outgoing.py", "metrics_messages"),
    ]),
    ("reply: batch state, locks", [
        ("proxy/connection.py", "WorkerConnection.reply"), ("proxy/connection.py", "WorkerConnection._close_batch"),
        ("proxy/connection.py", "WorkerConnection._retained"), ("proxy/connection.py", "WorkerConnection._lay_out"),
        ("threading.py", "Condition.__enter__"), ("threading.py", "Condition.__exit__"),
        ("proxy/calls.py", "CallTable.__len__"), ("proxy/calls.py", "CallTable.close"),
    ]),
    ("send: sendmsg (system call)", [("proxy/link.py", "Link.send")]),
    ("worker loop", [
        ("proxy/worker.py", "CallableWorker._serve_next"), ("proxy/worker.py", "CallableWorker._answer"),
        ("proxy/worker.py", "CallableWorker._send"),
    ]),
]  # fmt: skip
_STEP_OF = {key: label for label, keys in STEPS for key in keys}
OTHER = "other"


class _Sampler:
    """A sampling profiler of this thread: every ``interval_s`` of wall time (the loop it samples never waits: that
    is CPU time, but for preemption) the stack is read and counted for its step (see STEPS); samples outside the
    worker's ``_serve_next`` (this file's backend) are not counted. Garbage collections are timed apart."""

    def __init__(self, interval_s: float = 0.0002) -> None:
        self.counts: dict[str, int] = {}
        self.gc_ns = 0
        self._interval_s = interval_s
        self._gc_start = 0
        self._labels: dict[Any, str] = {}  # code object -> its step ("" for none)

    def _label(self, code: Any) -> str:
        label = self._labels.get(code)
        if label is None:
            name = getattr(code, "co_qualname", code.co_name)  # (Python 3.10: unqualified)
            label = next(
                (step for (file, function), step in _STEP_OF.items()
                 if code.co_filename.endswith(file) and function.endswith(name)),
                "",
            )  # fmt: skip
            self._labels[code] = label
        return label

    def _sample(self, _signal: int, frame: Any) -> None:
        step = ""
        while frame is not None:
            code = frame.f_code
            if code.co_name == "_serve_next":
                step = step or self._label(code)
                self.counts[step] = self.counts.get(step, 0) + 1
                return
            step = step or self._label(code)
            frame = frame.f_back

    def _gc(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter_ns()
        else:
            self.gc_ns += time.perf_counter_ns() - self._gc_start

    def __enter__(self) -> _Sampler:
        gc.callbacks.append(self._gc)
        signal.signal(signal.SIGALRM, self._sample)
        signal.setitimer(signal.ITIMER_REAL, self._interval_s, self._interval_s)
        return self

    def __exit__(self, *_: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        gc.callbacks.remove(self._gc)


def _worker(mode: str, listener: Any) -> Any:
    """A CallableWorker of bench/serve.py's identity (``@batch``) on ``listener`` (not started)."""
    import numpy as np
    from tritonrt.decorators import batch
    from tritonrt.model_config import ModelConfig, Tensor
    from tritonrt.model_config.resolve import build_model_config
    from tritonrt.proxy.worker import CallableWorker

    def identity(INPUT: Any) -> dict[str, Any]:  # noqa: N803 - the tensor's name
        return {"OUTPUT": INPUT}

    inputs, outputs = (
        [Tensor(name="INPUT", dtype=np.float32, shape=(-1,))],
        [Tensor(name="OUTPUT", dtype=np.float32, shape=(-1,))],
    )
    config = build_model_config("identity", 1, inputs, outputs, ModelConfig(max_batch_size=64))
    return CallableWorker(batch(identity), listener, config, strict=False, on_unrecoverable=print)


def _listener(mode: str, path: pathlib.Path) -> Any:
    from tritonrt.models.instance import CallSlot, TrackedListener
    from tritonrt.proxy.settings import InstanceIdentity, WorkerSettings

    identity = InstanceIdentity("identity", 0, TOKEN, False, 64)
    listener = TrackedListener(path, identity, WorkerSettings(), CallSlot(), track=mode == "process")
    listener.expirable = False  # as a worker process's (set, not passed: a tree from before it takes no such argument)
    return listener


def _schedstat_ns() -> int:
    """CPU time of every thread of this process so far, in ns (user and system)."""
    total = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except OSError:
            pass
    return total


def _serve(mode: str, path: str) -> None:
    """The end-to-end child: serve one connection at ``path`` as a worker does; answer ``cpu`` with its CPU ns."""
    worker = _worker(mode, _listener(mode, pathlib.Path(path)))
    if mode == "process":
        gc.freeze()  # as a worker process does (tritonrt.models.worker_child)
    worker.start()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "cpu":
            print(_schedstat_ns(), flush=True)
    worker.stop()


def _steps(mode: str, size: int) -> None:
    """The child for the steps: a worker and a backend in this one thread, over a socketpair, so that each batch is
    there when the worker reads it. Answers ``cpu N`` with the worker's thread CPU per batch over N batches (their
    median, unsampled), and ``samples N`` with JSON: the samples of each step over N batches (see _Sampler) and
    the garbage collections' time per batch."""
    from tritonrt.models.instance import CallSlot, TrackedConnection
    from tritonrt.proxy.connection import WorkerConnection
    from tritonrt.proxy.link import Link

    folder = pathlib.Path(tempfile.mkdtemp(prefix="tritonrt-worker-steps-"))
    listener = _listener(mode, folder / "w.sock")
    worker = _worker(mode, listener)
    worker_end, backend_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    connection = WorkerConnection(Link(worker_end), listener.identity, listener.settings)
    if mode == "process":
        connection = TrackedConnection(connection, CallSlot())
        gc.freeze()
    backend = _Backend(backend_end, size)
    serve_next, clock = worker._serve_next, time.thread_time_ns
    try:
        for _ in range(300):  # warm up
            backend.send_batch()
            serve_next(connection)
            backend.read_reply()
        print("ready", flush=True)
        for line in sys.stdin:
            command, count = line.split()
            if command == "cpu":
                spent, empty = [], []
                for _ in range(int(count)):
                    backend.send_batch()
                    start = clock()
                    serve_next(connection)
                    spent.append(clock() - start)
                    backend.read_reply()
                    start = clock()
                    empty.append(clock() - start)
                print((statistics.median(spent) - statistics.median(empty)) / 1000, flush=True)
            else:
                with _Sampler() as sampler:
                    for _ in range(int(count)):
                        backend.send_batch()
                        serve_next(connection)
                        backend.read_reply()
                print(json.dumps({"samples": sampler.counts, "gc_us": sampler.gc_ns / int(count) / 1000}), flush=True)
    finally:
        backend.close()
        connection.close()
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)


# --- the backend's side (this process) -------------------------------------------------------------------------


class _Backend:
    """A backend instance's end of a connection: sends a batch of one request, reads the reply (and ACKs a reply
    that used the worker's region, as the native backend does once it copied the outputs out)."""

    def __init__(self, sock: socket.socket, size: int, hello: bool = False) -> None:
        import numpy as np
        from tritonrt.proxy import wire
        from tritonrt.proxy.regions import OwnRegion

        self.wire, self.sock = wire, sock
        self._pending = b""
        if hello:
            message = wire.Hello(0, 64, 1, 19, "identity", TOKEN, "bench")
            sock.sendall(wire.encode_message(wire.Header(wire.KIND_HELLO), wire.encode_hello(message)))
            assert self._read().kind == wire.KIND_WELCOME
        self.seq = 0
        inline = size < (64 << 10)
        location = wire.LOCATION_INLINE if inline else wire.LOCATION_SENDER_REGION
        tensor = wire.TensorMeta("INPUT", wire.DTYPE_FP32, location, 0, size, (1, size // 4))
        self.meta = wire.encode_batch([wire.RequestMeta("", 0, None, {}, ["OUTPUT"], [tensor])])
        values = np.arange(size // 4, dtype=np.float32)
        self.data = values.tobytes() if inline else b""
        self.region = None if inline else OwnRegion(1, size)
        if self.region is not None:
            self.region.base[:size] = values.view(np.uint8)
        self._announce = self.region is not None

    def send_batch(self) -> None:
        wire, region = self.wire, self.region
        self.seq += 1
        flags = wire.FLAG_NEW_REGION if self._announce else 0
        region_size = region.size if self._announce and region is not None else 0
        header = wire.Header(wire.KIND_BATCH, flags, 1, self.seq, region_size, region.id if region else 0)
        message = wire.encode_message(header, self.meta, len(self.data)) + self.data
        if self._announce and region is not None:
            self.sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [region.fd]))])
            self._announce = False
        else:
            self.sock.sendall(message)

    def read_reply(self) -> None:
        reply = self._read()
        if reply.kind != self.wire.KIND_REPLY:
            raise RuntimeError(f"the worker answered with a message of kind {reply.kind}, not a REPLY")
        if reply.region_id:
            self.sock.sendall(self.wire.encode_message(self.wire.Header(self.wire.KIND_ACK, 0, 1, self.seq)))

    def one(self) -> None:
        self.send_batch()
        self.read_reply()

    def _read(self) -> Any:
        wire = self.wire
        while True:
            if len(self._pending) >= wire.HEADER_SIZE:
                header = wire.decode_header(self._pending)
                if len(self._pending) >= header.total_length:
                    self._pending = self._pending[header.total_length :]
                    if header.kind != wire.KIND_METRICS:
                        return header
                    continue
            data, ancillary, _, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(16))
            if not data:
                raise ConnectionError("the worker closed the connection")
            for _, _, fds in ancillary:
                for fd in array.array("i", fds[: len(fds) - len(fds) % 4]):
                    os.close(fd)
            self._pending += data

    def close(self) -> None:
        self.sock.close()
        if self.region is not None:
            self.region.close_fd()


class _Child:
    """A child process of this script (``kind``: ``serve`` or ``steps``), asked one line at a time."""

    def __init__(self, runtime: pathlib.Path, *arguments: str) -> None:
        environment = dict(os.environ, PYTHONPATH=str(runtime))
        command = [sys.executable, __file__, "--child", *arguments]
        self.process = subprocess.Popen(
            command, env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        line = self.ask(None)
        if line != "ready":
            raise RuntimeError(f"the worker did not start ({line!r})")

    def ask(self, command: str | None) -> str:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        if command is not None:
            stdin.write(command + "\n")
            stdin.flush()
        return stdout.readline().strip()

    def close(self) -> None:
        stdin: IO[str] | None = self.process.stdin
        if stdin is not None:
            stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _Worker(_Child):
    """A worker child process serving at a socket of its own, and this process's backend connected to it."""

    def __init__(self, runtime: pathlib.Path, mode: str, size: int, folder: pathlib.Path) -> None:
        path = folder / f"w{id(self)}.sock"
        super().__init__(runtime, "serve", mode, str(path))
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(path))
        self.backend = _Backend(sock, size, hello=True)
        for _ in range(300):  # warm up: caches, the decoded metadata's cache, the region
            self.backend.one()

    def cpu_us_per_request(self, requests: int) -> float:
        before = int(self.ask("cpu"))
        for _ in range(requests):
            self.backend.one()
        return (int(self.ask("cpu")) - before) / requests / 1000

    def close(self) -> None:
        self.backend.close()
        super().close()


def _range(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f} [{min(values):.1f}-{max(values):.1f}]"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1000, help="requests per round and worker")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--modes", default="thread,process")
    parser.add_argument("--sizes", default="64 B,1 MiB,4 MiB")
    parser.add_argument("--against", type=pathlib.Path, help="a folder holding another tritonrt package")
    parser.add_argument("--no-steps", dest="steps", action="store_false", help="no step table")
    parser.add_argument("--serve-only", type=float, help="drive one worker this many seconds (attach a profiler)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.child[0] == "serve":
            _serve(args.child[1], args.child[2])
        else:
            _steps(args.child[1], int(args.child[2]))
        return 0
    modes = [mode.strip() for mode in args.modes.split(",")]
    sizes = [size.strip() for size in args.sizes.split(",")]
    trees = {"this": RUNTIME, **({"other": args.against.resolve()} if args.against else {})}
    with tempfile.TemporaryDirectory(prefix="tritonrt-worker-steps-") as tmp:
        folder = pathlib.Path(tmp)
        if args.serve_only:
            worker = _Worker(RUNTIME, modes[0], SIZES[sizes[0]], folder)
            print(f"worker pid {worker.process.pid}: driving it for {args.serve_only:g} s", flush=True)
            end = time.monotonic() + args.serve_only
            while time.monotonic() < end:
                for _ in range(1000):
                    worker.backend.one()
            worker.close()
            return 0
        print(f"load average before: {os.getloadavg()}", file=sys.stderr)
        print(
            "The worker's CPU per request (us): the identity with @batch, one request per batch, one connection; "
            f"median [range] of {args.rounds} rounds of {args.requests} requests"
            + (", the trees' workers asked in turn (order swapped each round)" if args.against else "")
        )
        for size in sizes:
            for mode in modes:
                _run_case(args, trees, mode, size, folder)
        print(f"load average after: {os.getloadavg()}", file=sys.stderr)
    return 0


def _run_case(
    args: argparse.Namespace, trees: dict[str, pathlib.Path], mode: str, size: str, folder: pathlib.Path
) -> None:
    workers = {name: _Worker(runtime, mode, SIZES[size], folder) for name, runtime in trees.items()}
    loops = {name: _Child(runtime, "steps", mode, str(SIZES[size])) for name, runtime in trees.items()}
    ends: dict[str, list[float]] = {name: [] for name in trees}
    there: dict[str, list[float]] = {name: [] for name in trees}
    found = {}
    try:
        for round_index in range(args.rounds):
            order = list(trees) if round_index % 2 == 0 else list(reversed(trees))
            for name in order:
                ends[name].append(workers[name].cpu_us_per_request(args.requests))
                there[name].append(float(loops[name].ask(f"cpu {args.requests}")))
        if args.steps:
            found = {name: json.loads(loops[name].ask(f"samples {args.requests * 20}")) for name in trees}
    finally:
        for child in [*workers.values(), *loops.values()]:
            child.close()
    print(f"{size} x1, worker {mode}s:" + "".join(f"{name:>26s}" for name in trees))
    rows = [
        ("end to end (waits, wake-ups, system calls)", ends),
        ("the batch there already (no wait)", there),
    ]
    for label, values in rows:
        line = f"  {label:44s}" + "".join(f"{_range(values[name]):>26s}" for name in trees)
        if "other" in trees:
            ratios = [this / other for this, other in zip(values["this"], values["other"], strict=True)]
            line += f"  this/other {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
        print(line)
    waits = "".join(f"{statistics.median(ends[n]) - statistics.median(there[n]):26.1f}" for n in trees)
    print(f"  {'waiting, waking up (the difference)':44s}{waits}")
    if not found:
        return
    print("  by step, the batch there already (share of the samples x its median CPU per batch):")
    for label in [label for label, _ in STEPS] + [OTHER]:
        cells = []
        for name in trees:
            counts = found[name]["samples"]
            share = counts.get(label if label != OTHER else "", 0) / max(1, sum(counts.values()))
            cells.append(share * statistics.median(there[name]))
        if any(cells):
            print(f"    {label:42s}" + "".join(f"{cell:26.1f}" for cell in cells))
    print(
        f"    {'(of which garbage collection)':42s}" + "".join(f"{found[n]['gc_us']:26.1f}" for n in trees), flush=True
    )


if __name__ == "__main__":
    sys.exit(main())
