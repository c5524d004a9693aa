"""Benchmark a two-model pipeline (BLS): a ``pipeline`` model that, for each request, calls an ``identity`` model of
the same server and answers its output. Triton's Python backend (bench/plain/identity and bench/plain_pipeline's
``model.py``, ``pb_utils.InferenceRequest(...).exec()``) against tritonrt (bench/serve.py --model pipeline: the same
code on ``tritonrt.bls``), with worker threads and with worker processes, one tritonserver build.

    python bench/pipeline.py [--duration 2] [--rounds 3] [--no-grpc] [--workers thread|process|both]
                             [--against OTHER_TREE/runtime] [--no-floor]

The servers run side by side; round by round (in reverse order every other round) each is driven with wrk
(binary-tensor KServe v2 HTTP) and the gRPC driver, on ``identity`` and on ``pipeline``. Prints per server and
case: pipeline req/s and p50, the pipeline/identity ratio (what one BLS call costs), tritonrt's pipeline over the
Python backend's (median of the rounds' paired ratios, and their range) against the targets (>= 1.5x, stretch 2x:
printed, never asserted), and the CPU time per request by role (tritonserver, stubs or worker processes, the
serving Python process; the load generators not counted).

The floor serves beside them (bench/floor, built by bench/setup.sh): ``identity`` answered in Triton's own instance
thread by a backend that does nothing else (bench/floor_backend), ``pipeline`` that backend calling ``identity`` for
each request through Triton's in-process API (BLS) from its instance thread. No backend can beat it, so its ratios
to the Python backend's are the ceiling of any target; with an empty round trip between two processes (measured
first) added per hop to a worker, it is the ceiling of any design whose Python runs in processes of its own, as
tritonrt's and Triton's Python backend's does.

With ``--against DIR/runtime`` (another tree's ``runtime``, as bench/run.py takes it, its backend built: ``git
archive REV runtime | tar -x -C DIR``, then ``cargo build --release`` in ``DIR/runtime/native``) its tritonrt serves
too, as ``against-<mode>``, in the same rounds, and the table adds this tree's pipeline over that one's (paired
ratios): judge a change by these.
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
import urllib.request
from typing import Any

from run import (
    HERE,
    Server,
    against_environment,
    cpu_us_per_request,
    empty_round_trip_us,
    floor_server,
    plain_server,
    request_body,
    run_grpc,
    run_wrk,
    wrk_script,
)

__all__ = ["CASES", "MODELS", "TARGET", "STRETCH", "main"]

CASES: list[tuple[str, int, int]] = [("64 B", 16, 1), ("64 B", 16, 16), ("1 MiB", 262144, 1)]
MODELS = ("identity", "pipeline")
TARGET, STRETCH = 1.5, 2.0
ROLES = ("tritonserver", "workers", "python")
PLAIN = "plain"
FLOOR = "floor"  # bench/floor: no backend can cost less on this server (see floor_server)
ROUND_TRIPS = {"identity": 1, "pipeline": 3}  # between tritonserver and workers, per request (see print_ceiling)

Figures = dict[str, float]
Results = dict[tuple[str, str, int, str, str], list[Figures]]  # (protocol, size, connections, server, model)


def plain_source(workdir: pathlib.Path) -> pathlib.Path:
    """bench/plain's identity and bench/plain_pipeline's pipeline, in one folder (plain_server copies it)."""
    source = workdir / "plain-pipeline"
    for folder in (HERE / "plain", HERE / "plain_pipeline"):
        shutil.copytree(folder, source, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    return source


def server_commands(
    workers: str, workdir: pathlib.Path, against: pathlib.Path | None = None, floor: bool = True
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (command, environment) of the Python backend's server and tritonrt's, one per worker mode (and the
    ``against`` tree's, ``against-<mode>``; and the floor's, where it is built)."""
    commands = {PLAIN: plain_server(plain_source(workdir), "pipeline")}
    if floor and (floor_command := floor_server()) is not None:
        commands[FLOOR] = floor_command
    ports = ["--http-port", "{http}", "--grpc-port", "{grpc}", "--metrics-port", "{metrics}"]
    for mode in ("thread", "process"):
        if workers in (mode, "both"):
            command = [sys.executable, str(HERE / "serve.py"), "--runtime", "tritonrt", "--model", "pipeline"]
            commands[f"tritonrt-{mode}"] = ([*command, "--workers", mode, *ports], dict(os.environ))
            if against is not None:
                commands[f"against-{mode}"] = ([*command, "--workers", mode, *ports], against_environment(against))
    return commands


def check_answers(server: Server) -> None:
    """One JSON request per model: each must answer its input (a pipeline that does not is no benchmark)."""
    data = [1.0, 2.0, 3.0, 4.0]
    body = json.dumps({"inputs": [{"name": "INPUT", "shape": [1, 4], "datatype": "FP32", "data": data}]}).encode()
    for model in MODELS:
        url = f"http://127.0.0.1:{server.http}/v2/models/{model}/infer"
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.load(response)
        if answer["outputs"][0]["data"] != data:
            raise RuntimeError(f"{server.name}: {model} answered {answer['outputs'][0]['data']}, not its input {data}")


def measure(
    server: Server, protocol: str, model: str, size: tuple[int, int], script: pathlib.Path, duration: int
) -> Figures:
    """req/s, p50, p99 and CPU us per request by role of one run of ``duration`` seconds."""
    elements, connections = size
    before = server.cpu_by_role()
    if protocol == "http":
        figures: Figures = run_wrk(server.http, script, connections, duration, model=model)
    else:
        figures = run_grpc(server.grpc, elements, connections, duration, model=model)
    spent = cpu_us_per_request(before, server.cpu_by_role(), figures["rps"] * duration)
    figures.update({f"cpu_{role}_us": value for role, value in spent.items()})
    figures["cpu_us"] = sum(spent.values())
    return figures


def run_rounds(args: argparse.Namespace) -> tuple[Results, list[str]]:
    results: Results = {}
    with tempfile.TemporaryDirectory(prefix="tritonrt-bench-pipeline-") as tmp:
        workdir = pathlib.Path(tmp)
        servers: dict[str, Server] = {}
        try:
            for name, (command, env) in server_commands(args.workers, workdir, args.against, args.floor).items():
                servers[name] = Server(name, command, env, model="pipeline")
                check_answers(servers[name])
            scripts = {}
            for _, elements, _ in CASES:
                body, header_length = request_body(elements, workdir)
                scripts[elements] = wrk_script(body, header_length, workdir)
            for server in servers.values():  # warm up: first calls load what the BLS path imports
                for model in MODELS:
                    run_wrk(server.http, scripts[16], 1, 1, model=model)
            protocols = ["http", "grpc"] if args.grpc else ["http"]
            for round_index in range(args.rounds):
                order = list(servers.items())
                if round_index % 2:  # a host getting slower or faster does not favour the server that runs first
                    order.reverse()
                for label, elements, connections in CASES:
                    for protocol in protocols:
                        for name, server in order:
                            for model in MODELS:
                                print(
                                    f"round {round_index + 1}: {protocol} {label} x{connections} {name} {model}",
                                    file=sys.stderr,
                                    flush=True,
                                )
                                figures = measure(
                                    server, protocol, model, (elements, connections), scripts[elements], args.duration
                                )
                                key = (protocol, label, connections, name, model)
                                results.setdefault(key, []).append(figures)
        finally:
            for server in servers.values():
                server.stop()
    return results, list(servers)


def median(runs: list[Figures], field: str) -> float:
    return statistics.median(run[field] for run in runs)


def paired(runs: list[Figures], base: list[Figures]) -> list[float]:
    """Round by round req/s ratios: the runs of one round are back to back, so the host's drift cancels."""
    return sorted(run["rps"] / other["rps"] for run, other in zip(runs, base, strict=True))


def roles_cell(values: list[float], sign: str) -> str:
    """``total = tritonserver / workers / python``, in whole microseconds (``sign`` "+": signed)."""
    return f"{sum(values):{sign}6.0f} = " + " / ".join(f"{value:{sign}5.0f}" for value in values)


def verdict(ratio: float) -> str:
    if ratio >= STRETCH:
        return f"met, stretch {STRETCH:g}x met"
    return f"met ({TARGET:g}x)" if ratio >= TARGET else f"MISSED (target {TARGET:g}x)"


def print_table(results: Results, names: list[str], args: argparse.Namespace, round_trip_us: float) -> None:
    keys = sorted({key[:3] for key in results}, key=lambda k: (k[0] != "http", k[1] != "64 B", k[2]))
    print()
    print(
        f"Pipeline (a model that calls identity by BLS for each request), {args.rounds} rounds of {args.duration} s, "
        f"medians; {PLAIN} = Triton's Python backend (model.py, pb_utils BLS)"
    )
    header = (
        f"{'proto':5} {'case':7} {'conns':>5} | {'server':16} | {'pipeline req/s':>14} {'p50 ms':>7} | "
        f"{'identity req/s':>14} | {'pipe/ident':>10} | {'pipeline / ' + PLAIN + ' [range]':>28}"
    )
    print(header)
    print("-" * len(header))
    for protocol, label, connections in keys:
        for name in names:
            pipe = results[(protocol, label, connections, name, "pipeline")]
            ident = results[(protocol, label, connections, name, "identity")]
            cost = statistics.median(run["rps"] / other["rps"] for run, other in zip(pipe, ident, strict=True))
            ratio = ""
            if name != PLAIN:
                ratios = paired(pipe, results[(protocol, label, connections, PLAIN, "pipeline")])
                ratio = f"{statistics.median(ratios):5.2f} [{ratios[0]:.2f}-{ratios[-1]:.2f}]"
            print(
                f"{protocol:5} {label:7} {connections:>5} | {name:16} | {median(pipe, 'rps'):14.0f} "
                f"{median(pipe, 'p50'):7.3f} | {median(ident, 'rps'):14.0f} | {cost:10.2f} | {ratio:>28}"
            )
    print()
    print("CPU us per request, medians, total = tritonserver / stubs or worker processes / serving python: the")
    print("pipeline, identity alone, and their difference (what the BLS call and the second model cost)")
    for protocol, label, connections in keys:
        for name in names:
            pipe = results[(protocol, label, connections, name, "pipeline")]
            ident = results[(protocol, label, connections, name, "identity")]
            by_pipe = [median(pipe, f"cpu_{role}_us") for role in ROLES]
            by_ident = [median(ident, f"cpu_{role}_us") for role in ROLES]
            delta = [a - b for a, b in zip(by_pipe, by_ident, strict=True)]
            cells = [roles_cell(by_pipe, ""), roles_cell(by_ident, ""), roles_cell(delta, "+")]
            print(
                f"  {protocol:5} {label:7} x{connections:<3} {name:16} pipeline {cells[0]} | identity {cells[1]} | "
                f"BLS {cells[2]}"
            )
    print()
    print(
        f"Targets (printed, not asserted): tritonrt's pipeline >= {TARGET:g}x the Python backend's "
        f"(stretch {STRETCH:g}x)"
    )
    for protocol, label, connections in keys:
        for name in names:
            if name not in (PLAIN, FLOOR):
                pipe = results[(protocol, label, connections, name, "pipeline")]
                ratio = statistics.median(paired(pipe, results[(protocol, label, connections, PLAIN, "pipeline")]))
                print(f"  {protocol:5} {label:7} x{connections:<3} {name:16} {ratio:5.2f}x  {verdict(ratio)}")
    if FLOOR in names:
        print_ceiling(results, names, keys, round_trip_us)
    if any(name.startswith("against-") for name in names):
        print()
        print("This tree's pipeline over the --against tree's, paired by round: median [range] (req/s)")
        for protocol, label, connections in keys:
            for name in names:
                if name.startswith("against-"):
                    mine = results[(protocol, label, connections, name.replace("against-", "tritonrt-"), "pipeline")]
                    ratios = paired(mine, results[(protocol, label, connections, name, "pipeline")])
                    print(
                        f"  {protocol:5} {label:7} x{connections:<3} {name[8:]:8} {statistics.median(ratios):5.2f}x "
                        f"[{ratios[0]:.2f}-{ratios[-1]:.2f}]"
                    )


def print_ceiling(results: Results, names: list[str], keys: list[tuple[str, str, int]], round_trip_us: float) -> None:
    """Each server's identity and pipeline over the Python backend's, next to the floor's: a backend that costs
    nothing (bench/floor_backend) reaches the floor's ratio and no more, so a target above it is out of reach. From
    one connection, a design whose Python runs in processes of its own waits at least ROUND_TRIPS round trips more
    per request than the floor: ``worker floor`` is the floor with that many empty round trips added to its
    latency."""
    print()
    print(
        f"Over the Python backend's, paired by round, medians: identity | pipeline. {FLOOR} = a backend that costs "
        "nothing\n(answers in Triton's instance thread; its pipeline calls its identity by BLS there): no backend can "
        "exceed its ratios"
    )
    for protocol, label, connections in keys:
        cells = []
        for name in names:
            if name != PLAIN:
                pair = [
                    statistics.median(paired(results[(protocol, label, connections, name, model)],
                                             results[(protocol, label, connections, PLAIN, model)]))
                    for model in MODELS
                ]  # fmt: skip
                cells.append(f"{name} {pair[0]:4.2f} | {pair[1]:4.2f}")
        if connections == 1:
            pair = []
            for model, trips in ROUND_TRIPS.items():
                floor_s = 1 / median(results[(protocol, label, connections, FLOOR, model)], "rps")
                plain_rps = median(results[(protocol, label, connections, PLAIN, model)], "rps")
                pair.append(1 / (floor_s + trips * round_trip_us / 1e6) / plain_rps)
            cells.append(f"worker floor {pair[0]:4.2f} | {pair[1]:4.2f}")
        print(f"  {protocol:5} {label:7} x{connections:<3} " + "   ".join(cells))
    print(
        "  worker floor: from one connection, the floor's latency plus the round trips to workers that any design with"
        "\n  its Python in processes of its own makes, each an empty round trip between two processes"
        f" ({round_trip_us:.1f} us here):\n  {ROUND_TRIPS['identity']} for identity, {ROUND_TRIPS['pipeline']} for the"
        " pipeline (the caller's batch and its reply, the call and its answer, the callee's batch and its reply)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=int, default=2, help="seconds per run (wrk takes whole seconds)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-grpc", dest="grpc", action="store_false")
    parser.add_argument("--workers", choices=["thread", "process", "both"], default="both")
    parser.add_argument("--against", type=pathlib.Path, help="another tree's runtime/ (its backend built)")
    parser.add_argument("--no-floor", dest="floor", action="store_false", help="leave out the floor (bench/floor)")
    args: Any = parser.parse_args(argv)
    if args.duration < 1 or args.rounds < 1:
        parser.error("--duration and --rounds take whole numbers of at least 1")
    round_trip_us = empty_round_trip_us()  # (before any server starts: the machine is idle)
    results, names = run_rounds(args)
    print_table(results, names, args, round_trip_us)
    return 0


if __name__ == "__main__":
    sys.exit(main())
