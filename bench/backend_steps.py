"""tritonserver's CPU per request, step by step, with tritonrt's native backend (libtriton_tritonrt.so) apart: the
identity model of bench/serve.py served by tritonrt, driven by wrk over one HTTP connection, profiled with perf.

    python bench/backend_steps.py [--rounds 3] [--seconds 4] [--workers thread|process] [--size "64 B"|"1 MiB"]
                                  [--frequency 1000] [--call-graph dwarf|fp]

Starts ``bench/serve.py --runtime tritonrt`` and finds its tritonserver process. Each round, wrk sends binary KServe
v2 requests (bench/run.py's) over one connection twice: ``--seconds`` unprofiled, then ``--seconds`` + 3 while,
starting a second in, ``perf record -e cpu-clock`` samples tritonserver's threads with their stacks for ``--seconds``
(``-p`` its pid). tritonserver's CPU time
(user + system, psutil) over each interval, divided by the requests wrk served in it, is its CPU per request;
``perf script`` (run while the server still runs: the model's copy of the library lies in a temporary model
repository) gives each sample's stack, which counts for one step (the tables below). It prints:

- tritonserver's CPU per request, unprofiled and profiled (perf's sampling costs tritonserver CPU too, and perf
  takes a core of its own on a small machine: the two differ), the samples per round, the share of stacks unwound
  to their thread's start, and perf's sampled CPU against psutil's;
- each step: the median over rounds of its share of the samples times the profiled CPU per request, in us (the
  range over rounds in brackets), its median share, and the part of its samples that lay in the kernel. The
  backend's steps add up to "the backend in all" (and without Triton's API: its own code and system calls);
  Triton's steps to "Triton in all"; both to the total (medians of rounds: their sums come close, not exactly).

How a sample counts: a sample with a frame in libtriton_tritonrt.so is the backend's. Its frames are walked
innermost first, and the first that matches a rule of BACKEND_STEPS names the step: a rule gives a text the frame's
symbol contains and one the frame directly below it (symbol and library) contains. Kernel and libc frames below
ours count for ours; a frame of Triton's library (libtritonserver) directly below ours is a call into Triton's API
(those rules come before the ones of our functions that call the API). A sample of ours that no rule names is
"execute: the rest". The release build uses LTO: much is inlined into Executor::run and connect_and_send, whose own
time is "the rest" (``nm -C runtime/native/target/release/libtriton_tritonrt.so | grep ' [tT] '`` lists what is
left to name). A sample without a frame of ours is Triton's: its innermost frame outside the kernel and the system
libraries (libc, libstdc++, ...) picks a row of TRITON_STEPS by library and, walking out through that library's
frames, by symbol; a stack with nothing but kernel and system library frames is "kernel".

Stacks: ``--call-graph dwarf`` (the default) has perf copy 8 KiB of each sampled thread's stack and unwind it with
the libraries' unwind tables, which reaches the thread's start nearly always. ``fp`` is ``perf record -g``: frame
pointers, which libc, tritonserver and the backend's release build do not keep, so a stack stops at the first libc
frame: a poll() under the backend's wait counts as "kernel" then (that is how runtime/README.md's one-off figure
of the backend's 2.6% was counted: its own frames alone). Without perf, with perf unable to record or able to
record user space only (``kernel.perf_event_paranoid`` above 1, for a user other than root: the kernel's time, most
of tritonserver's, would be missing), or without wrk, it says so and exits 0, so that ``make bench`` goes on.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import psutil
from run import HERE, Server, request_body, run_wrk, wrk_script

OUR_LIBRARY = "libtriton_tritonrt.so"
ELEMENTS = {"64 B": 16, "1 MiB": 262144}  # FP32 elements per request

# The backend's steps: a label and its rules (what the frame's symbol contains, what the frame directly below it
# contains: "symbol (library)"; "" matches any). The first rule to match, frame by frame from the innermost of ours
# outwards, names the step; rules are tried in this order at each frame. Kernel and libc frames below count for it.
BACKEND_STEPS: list[tuple[str, list[tuple[str, str]]]] = [
    ("send the batch to the worker (sendmsg, the kernel)", [("sys::send_all", "")]),
    ("wait for the reply: poll (sleep, wake-up)", [("channel::Channel::wait", "poll")]),
    ("wait for the reply: spinning (peek, yield)", [("channel::Channel::wait", "")]),
    ("receive the reply (recvmsg, the kernel)", [("sys::recv_nowait", "")]),
    ("receive: framing (buffer, header)", [("channel::Channel::poll_message", ""), ("Channel::make_room", ""),
                                            ("wire::header::Header::decode", "")]),
    ("wire: encode", [("wire::encode::", "")]),
    ("wire: decode", [("wire::decode::", ""), ("wire::records::", "")]),
    ("metrics (Triton's metric API included)", [("triton::metrics::", "")]),
    ("Triton's API: ResponseSend (the frontend's callback)", [("", "TRITONBACKEND_ResponseSend (")]),
    ("Triton's API: the other calls (inputs, outputs, stats)", [("", "(libtritonserver")]),
    ("read the requests' inputs into the batch", [("as triton_tritonrt::batch::Batch>::read", "")]),
    ("answer: the outputs into Triton's buffers", [("as triton_tritonrt::batch::Batch>::add_output", ""),
                                                   ("execute::answer::", "")]),
]  # fmt: skip
BACKEND_REST = "execute: the rest (allocation, copies, bookkeeping)"
API_PREFIX = "Triton's API"

# Triton's own steps: a label, the library of the innermost frame outside the kernel and the system libraries (its
# file name starts so; "" matches any), and what a symbol of that library, walking out from there, contains ("": any).
TRITON_STEPS: list[tuple[str, str, str]] = [
    ("frontends: HTTP/gRPC (the tritonserver binary)", "tritonserver", ""),
    ("core: dynamic batcher", "libtritonserver", "DynamicBatchScheduler"),
    ("core: rate limiter, instance thread", "libtritonserver", "RateLimiter"),
    ("core: rate limiter, instance thread", "libtritonserver", "TritonModelInstance"),
    ("core: rate limiter, instance thread", "libtritonserver", "Payload::"),
    ("core: requests, responses, the rest", "libtritonserver", ""),
    ("other libraries", "", ""),
]
KERNEL = "kernel (no frame but kernel and system libraries)"
# Libraries that count for their caller: C and C++ runtimes, the dynamic loader, and frames perf could not place.
SYSTEM_LIBRARIES = ("libc.so", "libc-", "libpthread", "libstdc++", "libgcc_s", "libm.so", "ld-linux", "libdl",
                    "librt", "[vdso]", "[unknown]")  # fmt: skip
KERNEL_LIBRARIES = ("[kernel.kallsyms]", "[guest.kernel.kallsyms]")
THREAD_STARTS = ("clone3", "clone", "start_thread", "_start", "__libc_start_main", "__libc_start_call_main")

Frame = tuple[str, str, bool]  # symbol, library file name, in the kernel


def parse_samples(text: str) -> list[tuple[int, list[Frame]]]:
    """``perf script -F tid,period,ip,sym,dso`` output: each sample's period (ns of CPU) and frames, innermost first."""
    samples: list[tuple[int, list[Frame]]] = []
    for block in text.split("\n\n"):
        lines = [line for line in block.splitlines() if line.strip()]
        fields = lines[0].split() if lines else []
        if len(fields) != 2 or not all(field.isdigit() for field in fields):
            continue  # not a sample's header line: tid, period
        frames: list[Frame] = []
        for line in lines[1:]:
            address, _, rest = line.strip().partition(" ")
            symbol, _, library = rest.rpartition(" (")
            library = library.rstrip(")")
            kernel = library in KERNEL_LIBRARIES or (len(address) == 16 and address.startswith("ffff"))
            frames.append((symbol, os.path.basename(library), kernel))
        samples.append((int(fields[1]), frames))
    return samples


def _system(frame: Frame) -> bool:
    return frame[2] or frame[1].startswith(SYSTEM_LIBRARIES)


def _ours(frame: Frame) -> bool:
    return frame[1] == OUR_LIBRARY


def classify(frames: list[Frame]) -> tuple[str, bool]:
    """The step of a sample's stack (innermost first), and whether that stack's innermost frame is the kernel's."""
    in_kernel = bool(frames) and frames[0][2]
    ours = [index for index, frame in enumerate(frames) if _ours(frame)]
    if ours:
        for index in ours:
            symbol = frames[index][0]
            below = f"{frames[index - 1][0]} ({frames[index - 1][1]})" if index > 0 else ""
            for label, rules in BACKEND_STEPS:
                if any(mine in symbol and under in below for mine, under in rules):
                    return label, in_kernel
        return BACKEND_REST, in_kernel
    first = next((index for index, frame in enumerate(frames) if not _system(frame)), None)
    if first is None:
        return KERNEL, in_kernel
    library = frames[first][1]
    symbols = []
    for frame in frames[first:]:
        if frame[1] == library:
            symbols.append(frame[0])
        elif not _system(frame):
            break
    for label, prefix, contains in TRITON_STEPS:
        if library.startswith(prefix) and (not contains or any(contains in symbol for symbol in symbols)):
            return label, in_kernel
    return TRITON_STEPS[-1][0], in_kernel


class Profile:
    """The samples of one round by step: CPU ns sampled, of it in the kernel, and stacks unwound to a thread start."""

    def __init__(self, samples: list[tuple[int, list[Frame]]]) -> None:
        self.ns: dict[str, int] = {}
        self.kernel_ns: dict[str, int] = {}
        self.count = len(samples)
        self.complete = 0
        for period, frames in samples:
            label, in_kernel = classify(frames)
            self.ns[label] = self.ns.get(label, 0) + period
            if in_kernel:
                self.kernel_ns[label] = self.kernel_ns.get(label, 0) + period
            if frames and frames[-1][0] in THREAD_STARTS:
                self.complete += 1
        self.total_ns = sum(self.ns.values())

    def share(self, label: str) -> float:
        return self.ns.get(label, 0) / self.total_ns if self.total_ns else 0.0


def perf_problem(workdir: pathlib.Path) -> str | None:
    """Why perf cannot sample another process here (None: it can), tried on a ``sleep`` of our own."""
    if shutil.which("perf") is None:
        return "perf is not installed (Debian: apt-get install linux-perf)"
    sleeper = subprocess.Popen(["sleep", "10"])
    try:
        command = ["perf", "record", "-q", "-N", "-e", "cpu-clock", "-F", "100", "-g", "-p", str(sleeper.pid),
                   "-o", str(workdir / "probe.data"), "--", "sleep", "0.1"]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        events = subprocess.run(["perf", "evlist", "-i", str(workdir / "probe.data")], capture_output=True, text=True)
    finally:
        sleeper.kill()
        sleeper.wait()
        (workdir / "probe.data").unlink(missing_ok=True)
    if result.returncode != 0:
        return f"perf record failed: {(result.stderr or result.stdout).strip()[-600:]}"
    if ":u" in events.stdout:  # perf fell back to user space alone (cpu-clock:u), where the kernel's time is lost
        return "perf may sample user space only here, and most of tritonserver's CPU time is the kernel's"
    return None


def _paranoid() -> str:
    try:
        return pathlib.Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
    except OSError:
        return "unknown"


def tritonserver_of(server: Server) -> psutil.Process:
    """The tritonserver process among the server's descendants (tritonrt's guard starts it)."""
    for process in psutil.Process(server.process.pid).children(recursive=True):
        try:
            if process.name() == "tritonserver":
                return process
        except psutil.Error:
            continue
    raise RuntimeError("no tritonserver process under bench/serve.py")


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def one_round(
    port: int, tritonserver: psutil.Process, script: pathlib.Path, args: argparse.Namespace, workdir: pathlib.Path
) -> dict[str, Any]:
    """An unprofiled interval, then a profiled one: CPU per request of each, requests/s and the samples' Profile."""
    cpu, start = _cpu_s(tritonserver), time.monotonic()
    plain = run_wrk(port, script, 1, args.seconds)
    plain_us = (_cpu_s(tritonserver) - cpu) / (plain["rps"] * (time.monotonic() - start)) * 1e6
    data = workdir / "perf.data"
    stacks = ["--call-graph", "dwarf"] if args.call_graph == "dwarf" else ["-g"]
    record = ["perf", "record", "-q", "-N", "-e", "cpu-clock", "-F", str(args.frequency), *stacks,
              "-p", str(tritonserver.pid), "-o", str(data), "--", "sleep", str(args.seconds)]  # fmt: skip
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        load = pool.submit(run_wrk, port, script, 1, args.seconds + 3)
        time.sleep(1.0)
        cpu, start = _cpu_s(tritonserver), time.monotonic()
        recorded = subprocess.run(record, capture_output=True, text=True)
        cpu, elapsed = _cpu_s(tritonserver) - cpu, time.monotonic() - start
        loaded = not load.done()
        profiled = load.result()
    if recorded.returncode != 0:
        raise PerfFailed(f"perf record failed: {(recorded.stderr or recorded.stdout).strip()[-600:]}")
    if not loaded:
        print("backend_steps: wrk ended before perf did: part of the profile is of an idle server", file=sys.stderr)
    read = subprocess.run(
        ["perf", "script", "--no-inline", "-i", str(data), "-F", "tid,period,ip,sym,dso"],
        capture_output=True, text=True,
    )  # fmt: skip
    data.unlink()
    if read.returncode != 0:
        raise PerfFailed(f"perf script failed: {read.stderr.strip()[-600:]}")
    text = read.stdout
    profile = Profile(parse_samples(text))
    return {
        "plain_us": plain_us, "plain_rps": plain["rps"], "profiled_rps": profiled["rps"],
        "profiled_us": cpu / (profiled["rps"] * elapsed) * 1e6, "profile": profile,
        "sampled_vs_psutil": profile.total_ns / 1e9 / args.seconds / (cpu / elapsed) if cpu else 0.0,
    }  # fmt: skip


class PerfFailed(RuntimeError):
    """perf could not record or read tritonserver's samples."""


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f} [{min(values):6.1f}-{max(values):6.1f}]"


def print_table(rounds: list[dict[str, Any]], args: argparse.Namespace, pid: int) -> None:
    workers = "threads" if args.workers == "thread" else "processes"
    print(
        f"\ntritonserver (pid {pid}) serving tritonrt's identity, {args.size} per request, one HTTP connection (wrk), "
        f"worker {workers}: {len(rounds)} rounds of {args.seconds:g} s, perf cpu-clock at {args.frequency} Hz, "
        f"{args.call_graph} stacks"
    )
    for key, what in (("plain", "unprofiled"), ("profiled", "profiled (the steps' basis)")):
        rps = statistics.median(r[f"{key}_rps"] for r in rounds)
        print(f"  tritonserver's CPU per request, {what:28s}{_cell([r[f'{key}_us'] for r in rounds])} us"
              f"  at {rps:.0f} req/s")  # fmt: skip
    profiles: list[Profile] = [r["profile"] for r in rounds]
    complete = sum(p.complete for p in profiles) / max(1, sum(p.count for p in profiles))
    ratio = statistics.median(r["sampled_vs_psutil"] for r in rounds)
    print(
        f"  samples per round {statistics.median(p.count for p in profiles):.0f}, stacks unwound to their thread's "
        f"start {complete:.1%}, perf's sampled CPU / psutil's {ratio:.2f}"
    )
    groups = [
        ("tritonrt's backend (a frame in libtriton_tritonrt.so)",
         [label for label, _ in BACKEND_STEPS] + [BACKEND_REST], "the backend in all"),
        ("Triton's own (no frame of the backend)",
         list(dict.fromkeys(label for label, _, _ in TRITON_STEPS)) + [KERNEL], "Triton in all"),
    ]  # fmt: skip
    print(f"\n  {'step':58s}{'us per request [range]':>26s}{'share':>8s}{'kernel':>8s}")
    for title, labels, total in groups:
        print(f"  {title}")
        for label in labels:
            cells = [p.share(label) * r["profiled_us"] for p, r in zip(profiles, rounds, strict=True)]
            ns = sum(p.ns.get(label, 0) for p in profiles)
            kernel = sum(p.kernel_ns.get(label, 0) for p in profiles) / ns if ns else 0.0
            share = statistics.median(p.share(label) for p in profiles)
            print(f"    {label:56s}{_cell(cells):>26s}{share:8.1%}{kernel:8.0%}")
        _subtotal(total, labels, profiles, rounds)
        if total == "the backend in all":
            own = [label for label in labels if not label.startswith(API_PREFIX)]
            _subtotal("the backend without Triton's API calls", own, profiles, rounds)
    print(f"  {'total':58s}{_cell([r['profiled_us'] for r in rounds]):>26s}")


def _subtotal(title: str, labels: list[str], profiles: list[Profile], rounds: list[dict[str, Any]]) -> None:
    shares = [sum(p.share(label) for label in labels) for p in profiles]
    cells = [share * r["profiled_us"] for share, r in zip(shares, rounds, strict=True)]
    print(f"    {'= ' + title:56s}{_cell(cells):>26s}{statistics.median(shares):8.1%}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds of load per interval (wrk: whole)")
    parser.add_argument("--workers", choices=["thread", "process"], default="thread")
    parser.add_argument("--size", choices=list(ELEMENTS), default="64 B")
    parser.add_argument("--frequency", type=int, default=1000, help="perf's samples per second of CPU per thread")
    parser.add_argument("--call-graph", choices=["dwarf", "fp"], default="dwarf", help="fp: perf record -g")
    args = parser.parse_args()
    args.seconds = float(max(1, int(args.seconds)))  # wrk takes whole seconds
    enable = (
        "run it as root, or let users profile: sudo sysctl kernel.perf_event_paranoid=1 "
        f"(now {_paranoid()}); Debian's perf: apt-get install linux-perf"
    )
    if shutil.which("wrk") is None:
        print("backend_steps: skipped: wrk is not installed (bench/setup.sh installs it: apt-get install wrk)")
        return 0
    with tempfile.TemporaryDirectory(prefix="tritonrt-backend-steps-") as folder:
        workdir = pathlib.Path(folder)
        problem = perf_problem(workdir)
        if problem is not None:
            print(f"backend_steps: skipped: {problem}\n  To enable it: {enable}")
            return 0
        body, header_length = request_body(ELEMENTS[args.size], workdir)
        script = wrk_script(body, header_length, workdir)
        print(f"load average before: {os.getloadavg()}", file=sys.stderr)
        command = [sys.executable, str(HERE / "serve.py"), "--runtime", "tritonrt", "--workers", args.workers,
                   "--http-port", "{http}", "--grpc-port", "{grpc}", "--metrics-port", "{metrics}"]  # fmt: skip
        server = Server(f"tritonrt-{args.workers}", command, dict(os.environ))
        port = server.http
        try:
            tritonserver = tritonserver_of(server)
            run_wrk(port, script, 1, 1)  # warm up
            rounds = []
            for index in range(args.rounds):
                print(f"round {index + 1} of {args.rounds}", file=sys.stderr, flush=True)
                rounds.append(one_round(port, tritonserver, script, args, workdir))
        except PerfFailed as error:
            print(f"backend_steps: skipped: {error}\n  To enable it: {enable}")
            return 0
        finally:
            server.stop()
        print(f"load average after: {os.getloadavg()}", file=sys.stderr)
        print_table(rounds, args, tritonserver.pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
