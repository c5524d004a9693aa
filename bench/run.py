"""Benchmark tritonrt: plain Python-backend identity vs tritonrt (its native backend) vs PyTriton, one
tritonserver build. The plain model runs in Triton's Python stub for this interpreter (copied into the model's
folder in a temporary repository), built against numpy 1.x: it gets numpy<2 from bench/.plain-site (installed
on first run), on its own import path only.

    python bench/run.py [--duration 2] [--rounds 7] [--no-pytriton] [--no-grpc] [--size "64 B"|...|"4 MiB"]
                        [--workers thread|process|both] [--against OTHER_TREE/runtime] [--no-floor]

The floor (bench/floor's identity, answered in Triton's own instance thread by bench/floor_backend, built by
bench/setup.sh) serves beside them: what no backend can beat on this server.

Starts the servers on free ports, drives each with wrk (binary-tensor KServe v2 HTTP requests) and with a gRPC
driver, interleaving the servers round by round (in reverse order every other round), and prints req/s, p50, p99
and the ratios to the plain backend, the CPU time per request of each server's processes (tritonserver, stubs, the
serving process; the load generators not counted). Also prints the time from
Triton().run() to ready and the serving process's memory under load.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.request

import psutil
from tritonrt.ports import free_ports

HERE = pathlib.Path(__file__).resolve().parent
PLAIN_SITE = HERE / ".plain-site"
# (label, FP32 elements, connections): issue 39's cases (16 KiB x16 and 4 MiB x4 too) and 1 MiB x16
CASES = [
    ("64 B", 16, 1), ("64 B", 16, 16), ("16 KiB", 4096, 16), ("1 MiB", 262144, 1), ("1 MiB", 262144, 16),
    ("4 MiB", 1048576, 4),
]  # fmt: skip
SIZES = list(dict.fromkeys(label for label, _, _ in CASES))


def wait_ready(port: int, timeout: float = 180, model: str = "identity") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"server on port {port} not ready")


class Server:
    def __init__(self, name: str, command: list[str], env: dict[str, str], model: str = "identity"):
        self.name = name
        self.bare = pathlib.Path(command[0]).name == "tritonserver"  # alone: no serving Python process
        self.http, self.grpc, self.metrics = free_ports(3)
        command = [c.format(http=self.http, grpc=self.grpc, metrics=self.metrics) for c in command]
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.ready_s = None
        if not self.bare:
            lines = []
            for line in self.process.stdout:  # PyTriton prints the server's log here too
                if line.startswith("READY"):
                    self.ready_s = float(line.split()[1])
                    break
                lines.append(line)
            else:
                raise RuntimeError(f"{name} failed to start:\n{''.join(lines[-20:])}")
            threading.Thread(target=self.process.stdout.read, daemon=True).start()  # keep the pipe drained
        wait_ready(self.http, model=model)

    def rss_mib(self) -> float | None:
        if self.bare:
            return None
        return psutil.Process(self.process.pid).memory_info().rss / 2**20

    def cpu_by_role(self) -> dict[str, float]:
        """User + system CPU seconds so far of the server's processes by role: ``tritonserver``, ``workers`` (the
        plain backend's stubs, tritonrt's worker processes and guard) and ``python`` (the serving Python process:
        with worker threads, the callable runs there)."""
        root = psutil.Process(self.process.pid)
        found = dict.fromkeys(("tritonserver", "workers", "python"), 0.0)
        for process in [root, *root.children(recursive=True)]:
            try:
                name, times = process.name(), process.cpu_times()
            except psutil.Error:
                continue
            role = "tritonserver" if name == "tritonserver" else "python" if process.pid == root.pid else "workers"
            found[role] += times.user + times.system
        return found

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT if self.bare else signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def cpu_us_per_request(before: dict[str, float], after: dict[str, float], requests: float) -> dict[str, float]:
    """Microseconds of CPU per request by role, between two :meth:`Server.cpu_by_role` readings."""
    return {role: (seconds - before[role]) / requests * 1e6 if requests else 0.0 for role, seconds in after.items()}


def request_body(elements: int, workdir: pathlib.Path) -> tuple[pathlib.Path, int]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT",
                    "shape": [1, elements],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": elements * 4},
                }
            ],
            "outputs": [{"name": "OUTPUT", "parameters": {"binary_data": True}}],
        }
    ).encode()
    path = workdir / f"body-{elements}.bin"
    path.write_bytes(header + os.urandom(elements * 4))
    return path, len(header)


def wrk_script(body: pathlib.Path, header_length: int, workdir: pathlib.Path) -> pathlib.Path:
    script = workdir / f"post-{body.stem}.lua"
    script.write_text(
        f'wrk.method = "POST"\n'
        f'local f = io.open("{body}", "rb"); wrk.body = f:read("*a"); f:close()\n'
        f'wrk.headers["Inference-Header-Content-Length"] = "{header_length}"\n'
        f'wrk.headers["Content-Type"] = "application/octet-stream"\n'
    )
    return script


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if match is None:
        raise RuntimeError(f"cannot read wrk's latency {text!r}")
    value, unit = match.groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def run_wrk(port: int, script: pathlib.Path, connections: int, duration: float, model: str = "identity") -> dict:
    out = subprocess.run(
        ["wrk", "-t", "1", "-c", str(connections), "-d", f"{int(duration)}s", "--latency", "-s", str(script),
         f"http://127.0.0.1:{port}/v2/models/{model}/infer"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if "Requests/sec" not in out or re.search(r"^\s+50%\s+(\S+)", out, re.M) is None:
        raise RuntimeError(f"wrk printed no figures (the server did not answer?):\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"wrk saw {errors.group(1)} failed responses:\n{out}")
    return {"rps": rps, "p50": p50, "p99": p99}


def run_grpc(port: int, elements: int, connections: int, duration: float, model: str = "identity") -> dict:
    out = subprocess.run(
        [sys.executable, str(HERE / "grpc_load.py"), "--url", f"127.0.0.1:{port}", "--elements", str(elements),
         "--concurrency", str(connections), "--duration", str(duration), "--model", model],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return json.loads(out)


def empty_round_trip_us(count: int = 20000) -> float:
    """The latency of one round trip between two processes that do nothing else, in microseconds: a byte written to
    a Unix socket and written back, both sides blocked in read in between (as the backend and its worker wait for
    each other's messages); the median of 20 runs of ``count / 20``."""
    mine, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # (the child only echoes: nothing of this process's threads is used)
        mine.close()
        try:
            while os.read(theirs.fileno(), 1):
                os.write(theirs.fileno(), b"x")
        finally:
            os._exit(0)
    theirs.close()
    fd, each = mine.fileno(), max(1, count // 20)
    runs = []
    for _ in range(20):
        start = time.perf_counter()
        for _ in range(each):
            os.write(fd, b"x")
            os.read(fd, 1)
        runs.append((time.perf_counter() - start) / each * 1e6)
    mine.close()
    os.waitpid(pid, 0)
    return statistics.median(runs)


def python_library_dir() -> str:
    """This interpreter's libpython folder: Triton's Python stub (the plain model's, PyTriton's) loads it by soname."""
    return sysconfig.get_config_var("LIBDIR") or ""


def plain_site() -> pathlib.Path:
    """numpy 1.x for the plain model, in a site folder of its own (bench/.plain-site, installed once): the Python
    backend stub of this server build is compiled against numpy 1.x, and tritonrt itself takes numpy 2."""
    marker = PLAIN_SITE / ".installed"
    if not marker.exists():
        print("bench: installing numpy<2 into bench/.plain-site for the plain model's stub ...", file=sys.stderr)
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--upgrade", "--target", str(PLAIN_SITE)]
        subprocess.run([*command, "numpy<2"], check=True)
        marker.touch()
    return PLAIN_SITE


def temporary_repository(source: pathlib.Path, kind: str) -> pathlib.Path:
    """``source``'s models copied into a temporary model repository, removed at exit."""
    repository = pathlib.Path(tempfile.mkdtemp(prefix=f"tritonrt-bench-{kind}-"))
    atexit.register(shutil.rmtree, repository, ignore_errors=True)
    shutil.copytree(source, repository, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    return repository


def tritonserver_command(server_dir: pathlib.Path, repository: pathlib.Path, *options: str) -> list[str]:
    """tritonserver serving ``repository`` alone, on the ports Server fills in, with ``options`` added."""
    return [
        str(server_dir / "bin/tritonserver"), f"--model-repository={repository}",
        f"--backend-directory={server_dir / 'backends'}", "--http-port={http}", "--grpc-port={grpc}",
        "--metrics-port={metrics}", "--exit-timeout-secs=2", *options,
    ]  # fmt: skip


def plain_repository(
    server_dir: pathlib.Path, source: pathlib.Path = HERE / "plain", model: str = "identity"
) -> pathlib.Path:
    """bench/plain copied into a temporary model repository (removed at exit), with the Python backend stub built
    for this interpreter in identity/ (``model``) and in every other model folder of ``source``: Triton's Python
    backend runs a stub found in the model's folder in place of its own, which is the stub of whichever Python
    installed the shared server cache."""
    from tritonrt.server.install import python_stub

    stub = python_stub(server_dir)
    if not stub.is_file():
        raise SystemExit(
            f"bench: {stub} is missing: the plain baseline needs the Python backend stub built for Python "
            f"{sys.version_info.major}.{sys.version_info.minor}. Run `tritonrt install-server --force` (it extracts "
            "the stub of every Python the nvidia-pytriton wheel has), or point TRITONRT_SERVER_DIR at such a server."
        )
    repository = temporary_repository(source, "plain")
    for folder in {repository / model, *(config.parent for config in repository.glob("*/config.pbtxt"))}:
        shutil.copy2(stub, folder / stub.name)
    return repository


def plain_server(source: pathlib.Path = HERE / "plain", model: str = "identity") -> tuple[list[str], dict]:
    """The command and environment of tritonserver serving ``source``'s Python-backend models (the baseline)."""
    from tritonrt.server import environment
    from tritonrt.server.install import find_or_install_server

    server_dir = find_or_install_server()
    repository = plain_repository(server_dir, source, model)
    env = environment.server_environment(server_dir)
    # The stub ignores PYTHONPATH: the plain model puts BENCH_SYS_PATH first on sys.path itself.
    entries = [str(plain_site()), *(p for p in sys.path if p and os.path.isdir(p))]
    library_path = os.pathsep.join(filter(None, [python_library_dir(), env["LD_LIBRARY_PATH"]]))
    plain_env = dict(env, BENCH_SYS_PATH=json.dumps(entries), LD_LIBRARY_PATH=library_path)
    plain = tritonserver_command(
        server_dir, repository,
        "--backend-config=python,shm-default-byte-size=4194304", "--backend-config=python,shm-growth-byte-size=4194304",
    )  # fmt: skip
    return plain, plain_env


FLOOR_LIBRARY = HERE / "floor_backend" / "target" / "release" / "libtriton_floor.so"


def floor_server() -> tuple[list[str], dict] | None:
    """The command and environment of tritonserver serving bench/floor (the floor: ``identity`` answered in Triton's
    own instance thread by bench/floor_backend, ``pipeline`` calling it by BLS from its instance thread); None,
    saying how to build it, when its library is missing."""
    from tritonrt.server import environment
    from tritonrt.server.install import find_or_install_server

    if not FLOOR_LIBRARY.exists():
        print(f"bench: no floor ({FLOOR_LIBRARY} not built: bench/setup.sh builds it)", file=sys.stderr)
        return None
    server_dir = find_or_install_server()
    repository = temporary_repository(HERE / "floor", "floor")
    for config in repository.glob("*/config.pbtxt"):  # (Triton loads a backend's library from the model's folder)
        version = config.parent / "1"
        version.mkdir()
        shutil.copy2(FLOOR_LIBRARY, version / FLOOR_LIBRARY.name)
    return tritonserver_command(server_dir, repository), environment.server_environment(server_dir)


def against_environment(runtime: pathlib.Path) -> dict[str, str]:
    """The environment that serves another tree's tritonrt (``runtime``: that tree's ``runtime/``) with its own
    backend library; exits saying how to build the library where it is missing."""
    runtime = runtime.resolve()
    library = runtime / "native" / "target" / "release" / "libtriton_tritonrt.so"
    if not library.exists():
        raise SystemExit(f"bench: {library} not found: run `cargo build --release` in {runtime / 'native'}")
    return dict(os.environ, PYTHONPATH=str(runtime), TRITONRT_NATIVE_LIBRARY=str(library))


def server_commands(args) -> dict[str, tuple[list[str], dict]]:
    plain, plain_env = plain_server()
    serve = [
        str(HERE / "serve.py"),
        "--http-port",
        "{http}",
        "--grpc-port",
        "{grpc}",
        "--metrics-port",
        "{metrics}",
    ]
    commands = {"plain": (plain, plain_env)}
    if args.floor and (floor := floor_server()) is not None:  # what no backend can beat (bench/floor_backend)
        commands["floor"] = floor
    for mode in ("thread", "process"):
        if args.workers in (mode, "both"):
            name = "tritonrt" if mode == "thread" else "tritonrt-process"
            command = [sys.executable, *serve, "--runtime", "tritonrt"]
            commands[name] = (command, dict(os.environ, TRITONRT_WORKERS=mode))
    if args.against is not None:  # another tree's tritonrt, its own backend library, in this tree's worker mode
        env = against_environment(args.against)
        env["TRITONRT_WORKERS"] = "process" if args.workers == "process" else "thread"
        commands["tritonrt-other"] = ([sys.executable, *serve, "--runtime", "tritonrt"], env)
    if args.pytriton:
        python = HERE / ".venv-pytriton" / "bin" / "python"
        # PyTriton serves through the Python backend: its stub must load this interpreter's libpython.
        pyt_env = dict(os.environ, LD_LIBRARY_PATH=python_library_dir())
        commands["pytriton"] = ([str(python), *serve, "--runtime", "pytriton"], pyt_env)
    return commands


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-pytriton", dest="pytriton", action="store_false")
    parser.add_argument("--no-grpc", dest="grpc", action="store_false")
    parser.add_argument("--size", choices=SIZES, help="run only this tensor size")
    parser.add_argument("--no-floor", dest="floor", action="store_false", help="leave out the floor (bench/floor)")
    parser.add_argument(
        "--workers",
        choices=["thread", "process", "both"],
        default="thread",
        help="tritonrt's worker mode (both: a tritonrt server of each mode, side by side)",
    )
    parser.add_argument(
        "--against",
        type=pathlib.Path,
        help="also serve another tree's tritonrt (DIR holds its runtime/: the package and native/'s built library)",
    )
    args = parser.parse_args()
    commands = server_commands(args)
    results, memory, ready = run_rounds(commands, args)
    print_table(results, list(commands), memory, ready)
    return 0


def run_rounds(commands: dict[str, tuple[list[str], dict]], args) -> tuple[dict, dict, dict]:
    """Start every server, drive each case round by round, stop them: (results, memory, ready)."""
    results: dict = {}
    memory: dict = {}
    ready: dict = {}
    with tempfile.TemporaryDirectory(prefix="tritonrt-bench-") as tmp:
        workdir = pathlib.Path(tmp)
        servers = {}
        try:
            for name, (command, env) in commands.items():
                servers[name] = Server(name, command, env)
            ready = {name: s.ready_s for name, s in servers.items() if s.ready_s is not None}
            protocols = ["http", "grpc"] if args.grpc else ["http"]
            for round_index in range(args.rounds):
                for label, elements, connections in CASES:
                    if args.size and label != args.size:
                        continue
                    body, header_length = request_body(elements, workdir)
                    script = wrk_script(body, header_length, workdir)
                    # Odd rounds run the servers in reverse order: a host that gets steadily slower or faster
                    # then does not favour the server that always runs first.
                    order = list(servers.items())
                    if round_index % 2:
                        order.reverse()
                    for protocol in protocols:
                        for name, server in order:
                            print(
                                f"round {round_index + 1}: {protocol} {label} x{connections} {name}",
                                file=sys.stderr,
                                flush=True,
                            )
                            cpu = server.cpu_by_role()
                            if protocol == "http":
                                figures = run_wrk(server.http, script, connections, args.duration)
                            else:
                                figures = run_grpc(server.grpc, elements, connections, args.duration)
                            requests = figures["rps"] * args.duration
                            spent = cpu_us_per_request(cpu, server.cpu_by_role(), requests)
                            figures.update({f"cpu_{role}_us": value for role, value in spent.items()})
                            figures["cpu_us"] = sum(spent.values())
                            results.setdefault((protocol, label, connections, name), []).append(figures)
                            rss = server.rss_mib()
                            if rss is not None:
                                memory[name] = max(memory.get(name, 0.0), rss)
        finally:
            for server in servers.values():
                server.stop()
    return results, memory, ready


def _paired_ratio(runs: list[dict], plain_runs: list[dict]) -> str:
    """The median over rounds of req/s relative to plain in the same round, and the range: the servers of
    one round run back to back, so a round's ratio is not moved by the host getting slower between rounds."""
    ratios = sorted(run["rps"] / plain["rps"] for run, plain in zip(runs, plain_runs, strict=True))
    return f"{statistics.median(ratios):5.2f} [{ratios[0]:.2f}-{ratios[-1]:.2f}]".rjust(24)


def print_table(results: dict, names: list[str], memory: dict, ready: dict) -> None:
    print()
    header = f"{'proto':5} {'case':7} {'conns':>5} | " + " | ".join(f"{n:>26}" for n in names)
    header += " | " + " | ".join(f"{n + '/plain [range]':>24}" for n in names if n != "plain")
    print(header)
    print(" " * 22 + "| " + " | ".join(f"{'req/s   p50 ms   p99 ms':>26}" for _ in names))
    print("-" * len(header))
    keys = sorted({k[:3] for k in results}, key=lambda k: (k[0] != "http", k[1] != "64 B", k[2]))
    for protocol, label, connections in keys:
        cells = []
        for name in names:
            runs = results[(protocol, label, connections, name)]
            rps = statistics.median(r["rps"] for r in runs)
            p50 = statistics.median(r["p50"] for r in runs)
            p99 = statistics.median(r["p99"] for r in runs)
            cells.append(f"{rps:9.0f} {p50:8.3f} {p99:8.3f}")
        ratios = [
            _paired_ratio(results[(protocol, label, connections, n)], results[(protocol, label, connections, "plain")])
            for n in names
            if n != "plain"
        ]
        print(
            f"{protocol:5} {label:7} {connections:>5} | "
            + " | ".join(f"{c:>26}" for c in cells)
            + " | "
            + " | ".join(ratios)
        )
    print()
    print(
        "CPU time per request, every process of the server, median us (ratio to plain) "
        "[tritonserver / stubs or worker processes / the serving Python process]:"
    )
    for protocol, label, connections in keys:
        runs = {name: results[(protocol, label, connections, name)] for name in names}
        base = statistics.median(r["cpu_us"] for r in runs["plain"])
        cells = []
        for name in names:
            value = statistics.median(r["cpu_us"] for r in runs[name])
            roles = "/".join(
                f"{statistics.median(r[f'cpu_{role}_us'] for r in runs[name]):.0f}"
                for role in ("tritonserver", "workers", "python")
            )
            cells.append(f"{name} {value:6.0f}" + ("" if name == "plain" else f" ({value / base:.2f})") + f" [{roles}]")
        print(f"  {protocol:5} {label:7} x{connections:<3} " + " | ".join(cells))
    print()
    for protocol in ("http", "grpc"):
        if (protocol, "64 B", 1, "plain") in results:
            base = statistics.median(r["p50"] for r in results[(protocol, "64 B", 1, "plain")])
            for name in names:
                if name != "plain":
                    p50 = statistics.median(r["p50"] for r in results[(protocol, "64 B", 1, name)])
                    print(f"{protocol} 64 B x1 p50 overhead vs plain: {name} {p50 - base:+.3f} ms")
    for name, seconds in ready.items():
        print(f"Triton().run() to ready: {name} {seconds:.2f} s")
    for name, rss in memory.items():
        print(f"serving process RSS under load (max): {name} {rss:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
