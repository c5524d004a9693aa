"""A PyTriton 0.7 program: bind a model to a Triton that another process started (remote mode).

Usage: remote_model.py <server url> <access token> <model name> <factor>
"""

import logging
import sys

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import RemoteTriton

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
url, token, model_name, factor = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])


@batch
def _scale(x):
    return {"y": x * np.float32(factor)}


remote = RemoteTriton(url=url, access_token=token)
print(f"CREATED connected={remote.is_connected()}", flush=True)
with remote as triton:
    print(f"ENTERED connected={triton.is_connected()}", flush=True)
    triton.bind(
        model_name=model_name,
        infer_func=_scale,
        inputs=[Tensor(name="x", dtype=np.float32, shape=(-1,))],
        outputs=[Tensor(name="y", dtype=np.float32, shape=(-1,))],
        config=ModelConfig(max_batch_size=8),
    )
    print("SERVING", flush=True)
    triton.serve()
    print(f"AFTER SERVE connected={triton.is_connected()}", flush=True)
print("REMOTE DONE", flush=True)
