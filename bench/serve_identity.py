"""Serve an FP32 identity model (max_batch_size 64, dynamic batching) with tritonrt or PyTriton.

    python serve_identity.py --runtime tritonrt --http-port 8000 --grpc-port 8001 --metrics-port 8002

Prints ``READY <seconds from Triton().run() to ready>`` when serving; stops on SIGTERM/SIGINT.
"""

import argparse
import importlib
import signal
import time

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--runtime", choices=["tritonrt", "pytriton"], required=True)
parser.add_argument("--http-port", type=int, required=True)
parser.add_argument("--grpc-port", type=int, required=True)
parser.add_argument("--metrics-port", type=int, required=True)
args = parser.parse_args()

triton_module = importlib.import_module(f"{args.runtime}.triton")
model_config = importlib.import_module(f"{args.runtime}.model_config")
batch = importlib.import_module(f"{args.runtime}.decorators").batch


@batch
def identity(INPUT):  # noqa: N803 - the tensor's name
    return {"OUTPUT": INPUT}


config = triton_module.TritonConfig(
    http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port, exit_timeout_secs=2
)
triton = triton_module.Triton(config=config)
triton.bind(
    model_name="identity",
    infer_func=identity,
    inputs=[model_config.Tensor(name="INPUT", dtype=np.float32, shape=(-1,))],
    outputs=[model_config.Tensor(name="OUTPUT", dtype=np.float32, shape=(-1,))],
    config=model_config.ModelConfig(max_batch_size=64),
)
signal.signal(signal.SIGTERM, lambda *_: triton.stop())
start = time.perf_counter()
triton.run()
print(f"READY {time.perf_counter() - start:.3f}", flush=True)
triton.serve()
