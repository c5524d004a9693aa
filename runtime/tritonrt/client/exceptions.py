"""Exceptions raised by the tritonrt clients, named as in PyTriton's ``pytriton.client.exceptions``.

Every client error derives from ``PyTritonClientError``::

    try:
        result = client.infer_batch(data)
    except PyTritonClientTimeoutError:
        ...  # the server did not answer within inference_timeout_s
    except PyTritonClientError as error:
        print(error.message)
"""

from tritonrt.exceptions import MessageError

__all__ = [
    "PyTritonClientClosedError",
    "PyTritonClientError",
    "PyTritonClientInferenceServerError",
    "PyTritonClientInvalidUrlError",
    "PyTritonClientModelDoesntSupportBatchingError",
    "PyTritonClientModelUnavailableError",
    "PyTritonClientQueueFullError",
    "PyTritonClientTimeoutError",
    "PyTritonClientValueError",
]


class PyTritonClientError(MessageError):
    """Base class of every client error; ``message`` holds the text."""


class PyTritonClientValueError(PyTritonClientError):
    """A wrong value was passed to the client API (inputs, parameters, arguments)."""


class PyTritonClientInvalidUrlError(PyTritonClientValueError):
    """The Triton server URL cannot be parsed or uses an unsupported scheme."""


class PyTritonClientTimeoutError(PyTritonClientError):
    """The server or the model did not become ready, or did not answer, within the timeout."""


class PyTritonClientModelUnavailableError(PyTritonClientError):
    """The model (name and version) is not available on the server."""


class PyTritonClientClosedError(PyTritonClientError):
    """The client was used after ``close()``."""


class PyTritonClientModelDoesntSupportBatchingError(PyTritonClientError):
    """``infer_batch`` was called for a model whose ``max_batch_size`` is 0."""


class PyTritonClientInferenceServerError(PyTritonClientError):
    """The inference callable or Triton Inference Server reported an error.

    ``unavailable`` (tritonrt's own) is True when the server refused the request without running it: gRPC
    UNAVAILABLE, or the server said it is stopping.
    """

    unavailable: bool = False


class PyTritonClientQueueFullError(PyTritonClientError):
    """The request queue of a ``FuturesModelClient`` is full and the client is non-blocking."""
