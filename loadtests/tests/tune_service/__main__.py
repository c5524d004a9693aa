"""Serve the ``tuned`` model until SIGTERM or SIGINT (see ``__init__.py``)."""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
from tritonrt.decorators import batch
from tritonrt.model_config import DynamicBatcher, ModelConfig, Tensor
from tritonrt.triton import Triton, TritonConfig, TritonSecurityConfig, WorkerMode, WorkerOptions

from loadtests.tests.tune_service import BATCH_COST_S, MODEL_NAME, ROW_COST_S

__all__ = ["main"]

PREFIX = "TUNE_SERVICE_"


CPU_S_PER_ROW = float(os.environ.get(PREFIX + "CPU_MS_PER_ROW", "0")) / 1000


@batch
def infer(x: np.ndarray) -> dict[str, np.ndarray]:
    if CPU_S_PER_ROW:
        end = time.thread_time() + CPU_S_PER_ROW * x.shape[0]
        while time.thread_time() < end:  # Python work holding the GIL, CPU time rather than wall time
            pass
    else:
        time.sleep(BATCH_COST_S + ROW_COST_S * x.shape[0])
    return {"y": x}


def main() -> None:
    environ = os.environ
    path = environ.get(PREFIX + "TUNING_FILE")
    tuning = json.loads(open(path, encoding="utf-8").read()) if path else {}
    batcher = DynamicBatcher(
        max_queue_delay_microseconds=int(tuning.get("max_queue_delay_us", 0)),
        preferred_batch_size=tuning.get("preferred_batch_sizes") or None,
    )
    config = TritonConfig(
        http_port=int(environ[PREFIX + "HTTP_PORT"]),
        grpc_port=int(environ[PREFIX + "GRPC_PORT"]),
        metrics_port=int(environ[PREFIX + "METRICS_PORT"]),
        exit_timeout_secs=int(environ.get(PREFIX + "EXIT_TIMEOUT_S", "5")),
    )
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    security = TritonSecurityConfig(access_token=environ.get(PREFIX + "ACCESS_TOKEN"))  # (model control's)
    with Triton(config=config, security_config=security) as triton:
        triton.bind(
            MODEL_NAME,
            [infer] * int(tuning.get("instances", 1)),
            inputs=[Tensor(name="x", dtype=np.float32, shape=(4,))],
            outputs=[Tensor(name="y", dtype=np.float32, shape=(4,))],
            config=ModelConfig(max_batch_size=int(tuning.get("max_batch_size", 1)), batcher=batcher),
            workers=WorkerOptions(mode=WorkerMode(environ.get(PREFIX + "WORKERS", "thread"))),
        )
        triton.serve()


if __name__ == "__main__":
    main()
