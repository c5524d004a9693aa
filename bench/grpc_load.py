"""A closed-loop gRPC load for the identity model (or --model, with the same INPUT): N concurrent streams of
ModelInfer for D seconds.

Prints JSON: {"rps": ..., "p50": ms, "p99": ms}.
"""

import argparse
import asyncio
import json
import time

import numpy as np
import tritonclient.grpc.aio as grpcclient


async def worker(client, model, inputs, deadline, latencies):
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        await client.infer(model, inputs)
        latencies.append(time.perf_counter() - start)


async def main(args):
    client = grpcclient.InferenceServerClient(args.url)
    model = args.model
    data = np.random.default_rng(0).random((1, args.elements), dtype=np.float32)
    inputs = [grpcclient.InferInput("INPUT", list(data.shape), "FP32")]
    inputs[0].set_data_from_numpy(data)
    await client.infer(model, inputs)
    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + args.duration
    await asyncio.gather(*(worker(client, model, inputs, deadline, latencies) for _ in range(args.concurrency)))
    elapsed = time.perf_counter() - start
    await client.close()
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000  # noqa: E731
    print(json.dumps({"rps": len(latencies) / elapsed, "p50": pick(0.5), "p99": pick(0.99)}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--elements", type=int, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--model", default="identity")
    asyncio.run(main(parser.parse_args()))
