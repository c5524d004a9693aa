"""A PyTriton 0.7 program using arguments that PyTriton's older API reference lacks: the lifecycle policy,
connect()/is_connected(), serve(monitoring_period_s=), ModelConfig(model_warmup=), stop()'s result;
prints what it observed as JSON.

Usage: arguments.py <http port> <grpc port> <metrics port>
"""

import json
import sys
import threading
import time

import numpy as np
from pytriton.client import ModelClient
from pytriton.model_config import ModelConfig, Tensor
from pytriton.model_config.common import ModelWarmup, WarmupInput
from pytriton.triton import Triton, TritonConfig, TritonLifecyclePolicy, TritonSecurityConfig

http_port, grpc_port, metrics_port = (int(port) for port in sys.argv[1:4])
observed = {}
warmup_calls = []


def _echo(requests):
    """Not decorated: receives the list of requests, answers each with its input."""
    for request in requests:
        if "x" in request and np.all(request["x"] == 0):
            warmup_calls.append([list(request["x"].shape), request["x"].dtype.name])
    return [{"y": request["x"]} for request in requests]


def _failing(requests):
    raise RuntimeError("this callable fails its warm-up")


warmup = [
    ModelWarmup(
        name="zeros", batch_size=3, inputs={"x": WarmupInput(dtype=np.float32, shape=(2,), zero_data=True)}, count=2
    )
]
tensors = {
    "inputs": [Tensor(name="x", dtype=np.float32, shape=(2,))],
    "outputs": [Tensor(name="y", dtype=np.float32, shape=(2,))],
}
config = TritonConfig(http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, exit_timeout_secs=1)
policy = TritonLifecyclePolicy(launch_triton_on_startup=False)
with Triton(
    config=config, triton_lifecycle_policy=policy, security_config=TritonSecurityConfig(restricted_endpoints=[])
) as triton:
    observed["entered_connected"] = triton.is_connected()
    triton.bind("echo", _echo, config=ModelConfig(max_batch_size=8, model_warmup=warmup), **tensors)
    observed["warmup_calls_before_run"] = list(warmup_calls)
    triton.bind("warm_failing", _failing, config=ModelConfig(max_batch_size=8, model_warmup=warmup), **tensors)
    triton.run()
    observed["warmup_calls_after_run"] = list(warmup_calls)
    observed["run_connected"] = triton.is_connected()
    triton.connect()  # already connected: nothing to do
    with ModelClient(f"127.0.0.1:{http_port}", "echo") as client:
        observed["echo"] = client.infer_sample(x=np.array([1.0, 2.0], np.float32))["y"].tolist()
    with ModelClient(f"127.0.0.1:{http_port}", "warm_failing", init_timeout_s=60) as client:
        client.wait_for_model(60)
        observed["failing_warmup_model_loaded"] = True
    serving = threading.Thread(target=triton.serve, kwargs={"monitoring_period_s": 0.2})
    serving.start()
    time.sleep(1.0)
    observed["serving_alive"] = triton.is_alive()
    observed["stop_while_serving"] = triton.stop()
    serving.join(60)
    observed["serve_returned"] = not serving.is_alive()
    observed["stopped_connected"] = triton.is_connected()
print("OBSERVED " + json.dumps(observed), flush=True)
