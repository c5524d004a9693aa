"""Go/no-go for the native backend: the plain Python-backend identity vs the same model through tritonrt's native
backend (libtriton_tritonrt.so + a worker built from tritonrt.proxy.connection), one tritonserver build.

    python bench/native.py [--duration 2] [--rounds 5] [--no-grpc] [--size "64 B"|"1 MiB"] [--with-proxy]

Prints req/s, p50 and p99 per case (64 B and 1 MiB, 1 and 16 connections, HTTP via wrk and gRPC) and each
server's ratio to the plain backend, paired round by round (see bench/run.py). ``--with-proxy`` adds tritonrt
itself (serve.py: the native backend with tritonrt's worker and decorators) to the same run. Note the
machine's load: ratios within one run are what count.
"""

from __future__ import annotations

import argparse
import os
import sys

from run import HERE, SIZES, print_table, run_rounds, server_commands


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-grpc", dest="grpc", action="store_false")
    parser.add_argument("--size", choices=SIZES, help="run only this tensor size")
    parser.add_argument("--with-proxy", action="store_true", help="also run tritonrt itself (its worker, decorators)")
    args = parser.parse_args()
    args.pytriton = args.floor = False
    commands = server_commands(args)
    if not args.with_proxy:
        del commands["tritonrt"]
    ports = ["--http-port", "{http}", "--grpc-port", "{grpc}", "--metrics-port", "{metrics}"]
    serve = [str(HERE / "serve_native.py"), *ports]
    commands["native"] = ([sys.executable, *serve], dict(os.environ))
    print(f"load average before the run: {os.getloadavg()}", file=sys.stderr, flush=True)
    results, memory, ready = run_rounds(commands, args)
    print_table(results, list(commands), memory, ready)
    print(f"load average after the run (1, 5, 15 min): {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
