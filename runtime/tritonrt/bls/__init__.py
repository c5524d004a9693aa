"""Business Logic Scripting (BLS): an inference callable calls the other models of its server.

Any model of the server is a callee: another bound callable (thread or process mode, batched or decoupled), a
model of Triton's own backends (Python backend, ONNX Runtime, TensorRT, ...). The call goes through the backend
that serves the callable, over the instance's connection: its inputs travel inline or through the shared-memory
regions, Triton runs the request in-process, and the callee's dynamic batcher batches it with client requests.

Two styles. The Python backend's names (``triton_python_backend_utils``), so that a ``model.py``'s BLS code ports
by changing its import::

    from tritonrt import bls as pb_utils

    def infer(requests):
        request = pb_utils.InferenceRequest(
            model_name="detector", requested_output_names=["boxes"],
            inputs=[pb_utils.Tensor("image", requests[0]["image"])])
        response = request.exec()
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        boxes = pb_utils.get_output_tensor_by_name(response, "boxes").as_numpy()

and a call with numpy dicts, in PyTriton's style::

    from tritonrt import bls

    @batch
    def infer(image):
        boxes = bls.infer("detector", image=image)["boxes"]
        for step in bls.infer_stream("generator", prompt=prompt):  # a decoupled callee
            ...

Calls work while a request is being executed: inside the callable (its ``async`` tasks too), not at import or
in setup code (:class:`TritonModelException` says so). A thread that the callable starts runs its function in the
callable's context: ``executor.submit(contextvars.copy_context().run, function, ...)``. A callable must not
wait for itself: a call of the caller's own model with no other instance free waits until its ``timeout``.
Output arrays view the received bytes (read-only when they lie in shared memory): copy one to change it.

The model loading API (:func:`is_model_ready`, :func:`load_model`, :func:`unload_model`) needs a server in
explicit model control mode, as in the Python backend. Each call is counted per callee on ``/metrics``
(``tritonrt_bls_calls_total``, ``tritonrt_bls_errors_total``, ``tritonrt_bls_seconds``) and, when the request
is traced, gets a span under the callable's.
"""

from tritonrt.bls.backend_api import (
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_CPU_PINNED,
    TRITONSERVER_MEMORY_GPU,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    InferenceRequest,
    InferenceResponse,
    PreferredMemory,
    ResponseIterator,
    Tensor,
    TritonError,
    TritonModelException,
    get_input_tensor_by_name,
    get_output_tensor_by_name,
)
from tritonrt.bls.dicts import infer, infer_async, infer_stream
from tritonrt.bls.loading import is_model_ready, load_model, unload_model

__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_CPU_PINNED",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "InferenceRequest",
    "InferenceResponse",
    "PreferredMemory",
    "ResponseIterator",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "get_input_tensor_by_name",
    "get_output_tensor_by_name",
    "infer",
    "infer_async",
    "infer_stream",
    "is_model_ready",
    "load_model",
    "unload_model",
]
