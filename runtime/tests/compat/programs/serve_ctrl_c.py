"""A PyTriton 0.7 program: serve a model until Ctrl+C, then carry on after serve() and the `with` block.

Usage: serve_ctrl_c.py <http port> <grpc port> <metrics port>
"""

import logging
import sys

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
http_port, grpc_port, metrics_port = (int(port) for port in sys.argv[1:4])


@batch
def _double(x):
    return {"y": x * 2}


config = TritonConfig(http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, exit_timeout_secs=1)
with Triton(config=config) as triton:
    triton.bind(
        model_name="double",
        infer_func=_double,
        inputs=[Tensor(name="x", dtype=np.float32, shape=(-1,))],
        outputs=[Tensor(name="y", dtype=np.float32, shape=(-1,))],
        config=ModelConfig(max_batch_size=8),
    )
    print("SERVING", flush=True)
    returned = triton.serve()
    print(f"AFTER SERVE returned={returned!r} connected={triton.is_connected()} stop={triton.stop()!r}", flush=True)
print("AFTER WITH", flush=True)
