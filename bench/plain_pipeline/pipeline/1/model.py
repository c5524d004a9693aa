"""The baseline pipeline: for each request, a BLS call of the identity model (bench/plain/identity, served beside
it), answered with the callee's output. bench/pipeline.py serves the same code on tritonrt (bench/serve.py
--model pipeline), importing ``tritonrt.bls`` in place of ``triton_python_backend_utils``.

The stub ignores PYTHONPATH, so bench/pipeline.py passes the benchmark's import paths in BENCH_SYS_PATH.
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
            data = pb_utils.get_input_tensor_by_name(request, "INPUT")
            call = pb_utils.InferenceRequest(model_name="identity", requested_output_names=["OUTPUT"], inputs=[data])
            response = call.exec()
            if response.has_error():
                raise pb_utils.TritonModelException(f"identity: {response.error().message()}")
            output = pb_utils.get_output_tensor_by_name(response, "OUTPUT")
            responses.append(pb_utils.InferenceResponse([output]))
        return responses
