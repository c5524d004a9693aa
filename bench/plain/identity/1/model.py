"""The baseline: an identity model computed inside Triton's Python stub (no proxy).

The stub ignores PYTHONPATH, so bench/run.py passes the benchmark's import paths in BENCH_SYS_PATH.
"""

import json
import os
import sys

sys.path[:0] = json.loads(os.environ.get("BENCH_SYS_PATH", "[]"))

import triton_python_backend_utils as pb_utils  # noqa: E402


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", data)]))
        return responses
