"""A program whose model is slow: Ctrl+C during a request starts the drain; a second Ctrl+C stops at once.

Usage: serve_slow_ctrl_c.py <http port> <grpc port> <metrics port>
Prints SERVING once serving, CALLED when a request reached the model (which then sleeps 120 s).
"""

import logging
import sys
import time

import numpy as np
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
http_port, grpc_port, metrics_port = (int(port) for port in sys.argv[1:4])


def _slow(requests):
    print("CALLED", flush=True)
    time.sleep(120)
    return [{"y": request["x"]} for request in requests]


config = TritonConfig(http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, exit_timeout_secs=120)
with Triton(config=config) as triton:
    triton.bind(
        model_name="slow",
        infer_func=_slow,
        inputs=[Tensor(name="x", dtype=np.float32, shape=(-1,))],
        outputs=[Tensor(name="y", dtype=np.float32, shape=(-1,))],
        config=ModelConfig(batching=False),
    )
    print("SERVING", flush=True)
    triton.serve()
print("AFTER WITH", flush=True)
