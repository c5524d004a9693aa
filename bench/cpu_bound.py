"""Benchmark a CPU-bound Python model (about 1 ms of pure Python per row, the GIL held: bench/cpu_work.py) with
1 and 2 instances: Triton's plain Python backend (one stub process per instance), PyTriton (``[f] * N``),
tritonrt with worker threads and tritonrt with worker processes (``TRITONRT_WORKERS=process``).

    python bench/cpu_bound.py [--duration 3] [--rounds 3] [--connections 8] [--no-pytriton]

Each server in turn (round by round, in reverse order every other round) is driven with wrk, binary-tensor
KServe v2 HTTP requests of one row. Prints req/s and p50 per server and instance count, the ratio of 2 instances
to 1 (scaling), and each server's ratio to the plain backend with the same instance count (paired per round).
Also prints each tritonrt worker process's RSS and PSS (memory shared copy-on-write counts once in PSS).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile

import psutil
from cpu_work import calibrate
from run import HERE, Server, cpu_us_per_request, plain_server, python_library_dir, request_body, run_wrk, wrk_script

INSTANCES = (1, 2)
MODEL = "cpu"


def plain_source(instances: int, workdir: pathlib.Path) -> pathlib.Path:
    """bench/plain_cpu with ``instances`` stub instances (the config is written here, the model copied)."""
    source = workdir / f"plain-cpu-{instances}"
    shutil.copytree(HERE / "plain_cpu", source, ignore=shutil.ignore_patterns("__pycache__"))
    (source / MODEL / "config.pbtxt").write_text(
        f'name: "{MODEL}"\nbackend: "python"\nmax_batch_size: 64\n'
        'input [{ name: "INPUT" data_type: TYPE_FP32 dims: [-1] }]\n'
        'output [{ name: "OUTPUT" data_type: TYPE_FP32 dims: [-1] }]\n'
        f"dynamic_batching {{}}\ninstance_group [{{ count: {instances} kind: KIND_CPU }}]\n"
    )
    return source


def commands(args: argparse.Namespace, workdir: pathlib.Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    found: dict[str, tuple[list[str], dict[str, str]]] = {}
    ports = ["--http-port", "{http}", "--grpc-port", "{grpc}", "--metrics-port", "{metrics}"]
    serve = [str(HERE / "serve.py"), "--model", MODEL, *ports]
    for count in INSTANCES:
        command, env = plain_server(plain_source(count, workdir), MODEL)
        env["BENCH_SYS_PATH"] = json.dumps([*json.loads(env["BENCH_SYS_PATH"]), str(HERE)])  # cpu_work for the stub
        env["BENCH_ITERATIONS_PER_ROW"] = os.environ["BENCH_ITERATIONS_PER_ROW"]
        found[f"plain x{count}"] = (command, env)
        if args.pytriton:
            python = HERE / ".venv-pytriton" / "bin" / "python"
            pyt_env = dict(os.environ, LD_LIBRARY_PATH=python_library_dir())
            found[f"pytriton x{count}"] = (
                [str(python), *serve, "--runtime", "pytriton", "--instances", str(count)],
                pyt_env,
            )
        for mode in ("thread", "process"):
            command = [sys.executable, *serve, "--runtime", "tritonrt", "--instances", str(count), "--workers", mode]
            found[f"tritonrt-{mode} x{count}"] = (command, dict(os.environ))
    return found


def worker_memory(server: Server) -> list[tuple[int, float, float]]:
    """(pid, RSS MiB, PSS MiB) of each worker process of a tritonrt server (children of its Python process
    other than tritonserver and its guard)."""
    found = []
    for child in psutil.Process(server.process.pid).children():
        try:
            if "python" not in child.name() or "tritonrt.server.guard" in " ".join(child.cmdline()):
                continue
            full = child.memory_full_info()
        except psutil.Error:
            continue
        found.append((child.pid, full.rss / 2**20, full.pss / 2**20))
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--no-pytriton", dest="pytriton", action="store_false")
    args = parser.parse_args()
    if args.pytriton and not (HERE / ".venv-pytriton" / "bin" / "python").exists():
        print("bench: no bench/.venv-pytriton (bench/setup.sh makes it): PyTriton left out", file=sys.stderr)
        args.pytriton = False
    os.environ["BENCH_ITERATIONS_PER_ROW"] = str(calibrate())  # the same work in every server
    print(f"bench: {os.environ['BENCH_ITERATIONS_PER_ROW']} iterations per row (about 1 ms here)", file=sys.stderr)
    results: dict[str, list[dict[str, float]]] = {}
    memory: dict[str, list[tuple[int, float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="tritonrt-bench-cpu-") as tmp:
        workdir = pathlib.Path(tmp)
        body, header_length = request_body(16, workdir)
        script = wrk_script(body, header_length, workdir)
        for round_index in range(args.rounds):
            order = list(commands(args, workdir / f"round-{round_index}").items())
            if round_index % 2:
                order.reverse()
            for name, (command, env) in order:  # one server at a time: each gets both cores
                print(f"round {round_index + 1}: {name}", file=sys.stderr, flush=True)
                server = Server(name, command, env, model=MODEL)
                try:
                    run_wrk(server.http, script, args.connections, 1, model=MODEL)  # warm up
                    before = server.cpu_by_role()
                    figures = run_wrk(server.http, script, args.connections, args.duration, model=MODEL)
                    spent = cpu_us_per_request(before, server.cpu_by_role(), figures["rps"] * args.duration)
                    figures.update({f"cpu_{role}": value for role, value in spent.items()})
                    results.setdefault(name, []).append(figures)
                    if name.startswith("tritonrt-process"):
                        memory[name] = worker_memory(server)
                finally:
                    server.stop()
    print_table(results, memory, args)
    return 0


def print_table(
    results: dict[str, list[dict[str, float]]],
    memory: dict[str, list[tuple[int, float, float]]],
    args: argparse.Namespace,
) -> None:
    kinds = sorted({name.rsplit(" x", 1)[0] for name in results}, key=lambda k: (k != "plain", k))
    print()
    print(f"CPU-bound model (~1 ms of Python per row), binary HTTP, {args.connections} connections, "
          f"{args.rounds} rounds of {args.duration:g} s; medians")  # fmt: skip
    print(
        f"{'server':18} | {'1 instance':>18} | {'2 instances':>18} | {'2 / 1':>6} | "
        f"{'x1 / plain':>10} | {'x2 / plain':>10}"
    )
    print("-" * 96)
    for kind in kinds:
        cells, rps = [], {}
        for count in INSTANCES:
            runs = results[f"{kind} x{count}"]
            rps[count] = statistics.median(run["rps"] for run in runs)
            cells.append(f"{rps[count]:7.0f}/s {statistics.median(run['p50'] for run in runs):6.1f} ms")
        ratios = []
        for count in INSTANCES:
            paired = [
                run["rps"] / plain["rps"]
                for run, plain in zip(results[f"{kind} x{count}"], results[f"plain x{count}"], strict=True)
            ]
            ratios.append(f"{statistics.median(paired):10.2f}")
        print(f"{kind:18} | {cells[0]:>18} | {cells[1]:>18} | {rps[2] / rps[1]:6.2f} | {ratios[0]} | {ratios[1]}")
    print()
    print("CPU time per request (us, medians; the load generator's not counted): tritonserver + workers + python")
    for name, runs in sorted(results.items()):
        roles = ("tritonserver", "workers", "python")
        parts = [statistics.median(run[f"cpu_{role}"] for run in runs) for role in roles]
        print(f"{name:22} {sum(parts):7.0f} = {parts[0]:6.0f} + {parts[1]:6.0f} + {parts[2]:6.0f}")
    for name, workers in memory.items():
        for pid, rss, pss in workers:
            print(f"{name}: worker process {pid}: RSS {rss:.0f} MiB, PSS {pss:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
