"""The baseline of bench/cpu_bound.py: the CPU-bound model inside Triton's Python stub (one stub process per
instance). The stub ignores PYTHONPATH, so the benchmark passes its import paths in BENCH_SYS_PATH."""

import json
import os
import sys

sys.path[:0] = json.loads(os.environ.get("BENCH_SYS_PATH", "[]"))

import triton_python_backend_utils as pb_utils  # noqa: E402
from cpu_work import burn  # noqa: E402


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            burn(data.shape[0])
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", data)]))
        return responses
