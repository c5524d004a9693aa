"""Translate what the server or the network reports into client exceptions with actionable messages.

Example::

    raise server_error("Request for unknown model: 'x' is not found", "404", url=url, action="Inference",
                       model="x")
    # -> PyTritonClientModelUnavailableError("Model 'x' is not available on the server at ...")
"""

from __future__ import annotations

from tritonclient.utils import InferenceServerException

from tritonrt.client.exceptions import (
    PyTritonClientError,
    PyTritonClientInferenceServerError,
    PyTritonClientModelUnavailableError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)
from tritonrt.client.url import TritonUrl

_UNREACHABLE_MARKERS = ("failed to connect", "connection refused", "socket closed", "connection reset")


class ServerUnreachableError(PyTritonClientInferenceServerError):
    """No connection to the server could be made (it is down, or the URL names the wrong host or port)."""


def unreachable_error(url: TritonUrl, cause: object) -> ServerUnreachableError:
    """The error for a refused or broken connection."""
    return ServerUnreachableError(
        f"Cannot reach the Triton server at {url.with_scheme} ({cause}). Check that the server runs and that "
        f"the URL names its {url.scheme.upper()} port (defaults: HTTP 8000, gRPC 8001)."
    )


def timeout_error(
    url: TritonUrl, action: str, timeout_s: float, setting: str | None = None
) -> PyTritonClientTimeoutError:
    """The error for a request not answered within ``timeout_s``; ``setting`` names the knob to raise.

    Without ``setting``: inference_timeout_s for ``Inference``, init_timeout_s for any other action.
    """
    if setting is None:
        setting = "inference_timeout_s" if action == "Inference" else "init_timeout_s"
    return PyTritonClientTimeoutError(
        f"{action} on the server at {url.with_scheme} did not finish within {timeout_s:g} s. "
        f"Raise {setting} if it legitimately takes longer."
    )


def server_error(message: str, status: str | None, *, url: TritonUrl, action: str, model: str) -> PyTritonClientError:
    """Map a server's error reply (status: HTTP code or gRPC ``StatusCode.X``) to a client exception."""
    status = status or ""
    lowered = message.lower()
    if "restricted" in lowered and "expecting header" in lowered:
        return PyTritonClientInferenceServerError(
            f"The server at {url.with_scheme} refused {action}: {message}. This endpoint is protected by an "
            "access token: pass access_token=<token> to the client (the token of the server's "
            "TritonSecurityConfig, printed by the server at start-up)."
        )
    if "DEADLINE_EXCEEDED" in status:
        return PyTritonClientTimeoutError(
            f"{action} on the server at {url.with_scheme} exceeded its deadline ({message}). "
            "Raise inference_timeout_s if it legitimately takes longer."
        )
    if "unknown model" in lowered or status in ("404", "StatusCode.NOT_FOUND"):
        return PyTritonClientModelUnavailableError(
            f"Model {model!r} is not available on the server at {url.with_scheme}: {message}. Check the "
            "model name and version, and that the model loaded (see the server log)."
        )
    if "UNAVAILABLE" in status and any(marker in lowered for marker in _UNREACHABLE_MARKERS):
        return unreachable_error(url, message)
    return PyTritonClientInferenceServerError(
        f"{action} of model {model!r} failed on the server at {url.with_scheme}: {message}. The error comes "
        "from the inference callable or from Triton; see the server log for details."
    )


def from_tritonclient(
    error: InferenceServerException, *, url: TritonUrl, action: str, model: str
) -> PyTritonClientError:
    """Map a tritonclient ``InferenceServerException``."""
    return server_error(error.message() or str(error), error.status(), url=url, action=action, model=model)


def call_error(
    error: InferenceServerException, *, url: TritonUrl, action: str, model: str, timeout_s: float
) -> PyTritonClientError:
    """Map an ``InferenceServerException`` of a tritonclient call that ran under a ``timeout_s`` deadline.

    A passed gRPC deadline becomes a timeout error, an error tritonclient raised before sending (no
    status) a value error, and anything else the server's error (see ``server_error``).
    """
    if "DEADLINE_EXCEEDED" in (error.status() or ""):
        return timeout_error(url, action, timeout_s)
    if error.status() is None:  # raised by tritonclient itself, before sending
        return PyTritonClientValueError(f"Invalid request: {error.message()}")
    return from_tritonclient(error, url=url, action=action, model=model)
