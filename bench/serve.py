"""Serve a benchmark model with tritonrt or PyTriton: the FP32 identity model of bench/run.py, the CPU-bound
model of bench/cpu_bound.py (about 1 ms of pure Python per row, bench/cpu_work.py), or (tritonrt only) the
pipeline of bench/pipeline.py: ``identity`` and ``pipeline``, a callable that calls ``identity`` by BLS for each
request (the code of bench/plain_pipeline's model.py on ``tritonrt.bls``). All take ``INPUT`` and return
``OUTPUT`` (FP32, max_batch_size 64, dynamic batching).

    python serve.py --runtime tritonrt --http-port 8000 --grpc-port 8001 --metrics-port 8002
    python serve.py --runtime tritonrt --model cpu --instances 2 --workers process --http-port 8000 ...

``--instances N`` binds ``[f] * N`` (PyTriton's way to ask for N instances); ``--workers`` (tritonrt only) runs
them as threads of this process or as worker processes (``TRITONRT_WORKERS`` when not given). Prints
``READY <seconds from Triton().run() to ready>`` when serving; stops on SIGTERM/SIGINT.
"""

import argparse
import importlib
import pathlib
import signal
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cpu_work import burn  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--runtime", choices=["tritonrt", "pytriton"], required=True)
parser.add_argument("--model", choices=["identity", "cpu", "pipeline"], default="identity")
parser.add_argument("--instances", type=int, default=1)
parser.add_argument("--workers", choices=["thread", "process"])
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


@batch
def cpu(INPUT):  # noqa: N803 - the tensor's name
    burn(INPUT.shape[0])
    return {"OUTPUT": INPUT}


def pipeline(requests):
    """For each request, a BLS call of ``identity``, answered with its output (bench/plain_pipeline's code)."""
    responses = []
    for request in requests:
        data = pb_utils.get_input_tensor_by_name(request, "INPUT")
        call = pb_utils.InferenceRequest(model_name="identity", requested_output_names=["OUTPUT"], inputs=[data])
        response = call.exec()
        if response.has_error():
            raise pb_utils.TritonModelException(f"identity: {response.error().message()}")
        responses.append({"OUTPUT": pb_utils.get_output_tensor_by_name(response, "OUTPUT").as_numpy()})
    return responses


if args.model == "pipeline" and args.runtime != "tritonrt":
    parser.error("--model pipeline is tritonrt's (BLS from a callable: tritonrt.bls)")
pb_utils = importlib.import_module("tritonrt.bls") if args.model == "pipeline" else None
extra = {}
if args.workers is not None:
    if args.runtime != "tritonrt":
        parser.error("--workers is tritonrt's: PyTriton runs every instance as a thread")
    extra["workers"] = triton_module.WorkerOptions(mode=triton_module.WorkerMode(args.workers))
config = triton_module.TritonConfig(
    http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port, exit_timeout_secs=2
)
triton = triton_module.Triton(config=config)
functions = {"identity": identity, "cpu": cpu, "pipeline": pipeline}
for name in ["identity", "pipeline"] if args.model == "pipeline" else [args.model]:
    triton.bind(
        model_name=name,
        infer_func=[functions[name]] * args.instances,
        inputs=[model_config.Tensor(name="INPUT", dtype=np.float32, shape=(-1,))],
        outputs=[model_config.Tensor(name="OUTPUT", dtype=np.float32, shape=(-1,))],
        config=model_config.ModelConfig(max_batch_size=64),
        **extra,
    )
signal.signal(signal.SIGTERM, lambda *_: triton.stop())
start = time.perf_counter()
triton.run()
print(f"READY {time.perf_counter() - start:.3f}", flush=True)
triton.serve()
