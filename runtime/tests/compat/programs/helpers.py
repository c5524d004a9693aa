"""A PyTriton 0.7 program using the modules users import besides the main API: constants, the resolved model
config, the client helpers, and the security, lifecycle and config classes; prints what it observed as JSON.

Usage: helpers.py <http port> <grpc port> <metrics port>
"""

import inspect
import json
import sys

import numpy as np
import pytriton
from pytriton.client import FuturesModelClient, ModelClient
from pytriton.client.utils import (
    ModelState,
    TritonUrl,
    create_client_from_url,
    get_model_config,
    get_model_state,
    wait_for_model_ready,
    wait_for_server_ready,
)
from pytriton.constants import (
    CREATE_TRITON_CLIENT_TIMEOUT_S,
    DEFAULT_GRPC_PORT,
    DEFAULT_HTTP_PORT,
    DEFAULT_METRICS_PORT,
    DEFAULT_TRITON_STARTUP_TIMEOUT_S,
    TRITON_CONTEXT_FIELD_NAME,
    TRITON_LOCAL_IP,
)
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.model_config.triton_model_config import TensorSpec, TritonModelConfig
from pytriton.triton import (
    DEFAULT_PROTECTED_ENDPOINTS,
    VALID_TRITON_ENDPOINTS,
    Triton,
    TritonConfig,
    TritonLifecyclePolicy,
    TritonSecurityConfig,
)

http_port, grpc_port, metrics_port = (int(port) for port in sys.argv[1:4])
observed = {
    "version": pytriton.__version__,
    "constants": [
        DEFAULT_HTTP_PORT,
        DEFAULT_GRPC_PORT,
        DEFAULT_METRICS_PORT,
        TRITON_CONTEXT_FIELD_NAME,
        TRITON_LOCAL_IP,
        DEFAULT_TRITON_STARTUP_TIMEOUT_S,
        CREATE_TRITON_CLIENT_TIMEOUT_S,
    ],
    "open_security_token": TritonSecurityConfig(restricted_endpoints=[]).access_token,
    "default_security_endpoints": TritonSecurityConfig().restricted_endpoints,
    "protected_type": type(DEFAULT_PROTECTED_ENDPOINTS).__name__,
    "valid_type": type(VALID_TRITON_ENDPOINTS).__name__,
    "valid_endpoints": sorted(VALID_TRITON_ENDPOINTS),
    "lifecycle_default": [TritonLifecyclePolicy().launch_triton_on_startup, TritonLifecyclePolicy().local_model_store],
    "from_dict": [
        TritonConfig.from_dict({"http_port": "8005", "log_verbose": 1}).http_port,
        TritonConfig.from_dict({"http_port": "8005", "log_verbose": 1}).log_verbose,
    ],
    "url": [TritonUrl.from_url("localhost").with_scheme, TritonUrl.from_url("grpc://host").without_scheme],
    "futures_defaults": [
        inspect.signature(FuturesModelClient.__init__).parameters[name].default
        for name in ("max_workers", "max_queue_size")
    ],
}
empty = TritonModelConfig(model_name="m")
observed["model_config_defaults"] = [
    empty.model_version, empty.max_batch_size, empty.batching, empty.batcher, empty.decoupled,
    empty.response_cache, empty.model_warmup, empty.backend,
]  # fmt: skip


@batch
def _add(a, b):
    return {"sum": a + b}


config = TritonConfig(http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, exit_timeout_secs=1)
with Triton(config=config, security_config=TritonSecurityConfig(restricted_endpoints=[])) as triton:
    observed["server_token"] = triton.get_access_token()
    triton.bind(
        model_name="add",
        infer_func=_add,
        inputs=[Tensor(name="a", dtype=np.float32, shape=(2,)), Tensor(name="b", dtype=np.float32, shape=(2,))],
        outputs=[Tensor(name="sum", dtype=np.float32, shape=(2,))],
        config=ModelConfig(max_batch_size=8),
    )
    for url in (f"http://127.0.0.1:{http_port}", f"grpc://127.0.0.1:{grpc_port}"):
        client = create_client_from_url(url)
        wait_for_server_ready(client, timeout_s=60)
        wait_for_model_ready(client, "add", timeout_s=60)
        served = get_model_config(client, "add", timeout_s=60)
        observed[url.partition(":")[0]] = {
            "state": get_model_state(client, "add").value,
            "missing_state": get_model_state(client, "no-such-model").value,
            "state_enum": get_model_state(client, "add") is ModelState.READY,
            "config_type": type(served).__name__,
            "config": [served.model_name, served.max_batch_size, served.batching, served.decoupled],
            "inputs": [[spec.name, list(spec.shape), np.dtype(spec.dtype).name] for spec in served.inputs],
            "outputs": [[spec.name, list(spec.shape), np.dtype(spec.dtype).name] for spec in served.outputs],
        }
        client.close()
    with ModelClient(f"127.0.0.1:{http_port}", "add") as model_client:
        observed["wait_for_server"] = model_client.wait_for_server(60)
    known = TritonModelConfig(
        model_name="add",
        max_batch_size=8,
        inputs=[TensorSpec(name="a", shape=(2,), dtype=np.float32), TensorSpec(name="b", shape=(2,), dtype=np.float32)],
        outputs=[TensorSpec(name="sum", shape=(2,), dtype=np.float32)],
    )
    with ModelClient(f"grpc://127.0.0.1:{grpc_port}", "add", model_config=known) as model_client:
        result = model_client.infer_sample(a=np.array([1, 2], np.float32), b=np.array([3, 4], np.float32))
        observed["infer_with_known_config"] = result["sum"].tolist()
    observed["stop"] = [triton.stop(), triton.stop()]
print("OBSERVED " + json.dumps(observed), flush=True)
