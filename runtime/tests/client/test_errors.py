"""Unit tests of mapping server and network errors to client exceptions."""

import errno
import http.client

import pytest
from tritonclient.utils import InferenceServerException

from tritonrt.client._transport import (
    ServerUnreachableError,
    TritonUrl,
    from_tritonclient,
    server_error,
    timeout_error,
    unreachable_error,
)
from tritonrt.client.exceptions import (
    PyTritonClientInferenceServerError,
    PyTritonClientModelUnavailableError,
    PyTritonClientTimeoutError,
)

URL = TritonUrl.from_url("grpc://server:8001")


def _error(message, status):
    return server_error(message, status, url=URL, action="Inference", model="m")


def test_restricted_endpoint_points_at_the_access_token():
    error = _error("This API is restricted, expecting header 'triton-access-token'", "403")
    assert type(error) is PyTritonClientInferenceServerError
    assert "pass access_token=" in error.message


@pytest.mark.parametrize(
    ("message", "status"),
    [("Request for unknown model: 'm' is not found", "400"), ("not here", "404"), ("gone", "StatusCode.NOT_FOUND")],
)
def test_unknown_model_is_unavailable(message, status):
    error = _error(message, status)
    assert isinstance(error, PyTritonClientModelUnavailableError)
    assert "Model 'm' is not available on the server at grpc://server:8001" in error.message


def test_deadline_is_a_timeout():
    assert isinstance(_error("Deadline Exceeded", "StatusCode.DEADLINE_EXCEEDED"), PyTritonClientTimeoutError)


def test_refused_connection_is_unreachable():
    error = _error("failed to connect to all addresses; Connection refused", "StatusCode.UNAVAILABLE")
    assert isinstance(error, ServerUnreachableError)
    assert "Check that the server runs" in error.message


def test_other_errors_come_from_the_callable_or_server():
    error = from_tritonclient(
        InferenceServerException("ValueError: bad input", status="StatusCode.INTERNAL"),
        url=URL,
        action="Inference",
        model="m",
    )
    assert type(error) is PyTritonClientInferenceServerError
    assert "ValueError: bad input" in error.message and "server log" in error.message


def test_timeout_message_names_the_setting():
    error = timeout_error(URL, "Inference", 0.25, "inference_timeout_s")
    assert "within 0.25 s" in error.message and "inference_timeout_s" in error.message


def test_a_server_wide_call_names_no_model():
    error = server_error("Internal", "StatusCode.INTERNAL", url=URL, action="Liveness check", model="")
    assert error.message.startswith("Liveness check failed on the server at grpc://server:8001: Internal.")
    assert "model ''" not in error.message


def test_a_stopping_server_says_so():
    error = server_error("Server is stopping", "StatusCode.UNAVAILABLE", url=URL, action="Liveness check", model="")
    assert type(error) is PyTritonClientInferenceServerError
    assert "grpc://server:8001 is stopping" in error.message and "liveness check was refused" in error.message
    assert "server log" not in error.message


@pytest.mark.parametrize(
    "cause",
    [
        ConnectionResetError(104, "Connection reset by peer"),
        http.client.RemoteDisconnected("Remote end closed connection without response"),
        OSError(errno.ECONNRESET, "reset"),
        "Server disconnected",
    ],
)
def test_a_dropped_connection_says_the_server_may_be_stopping(cause):
    error = unreachable_error(URL, cause)
    assert isinstance(error, ServerUnreachableError)
    assert "closed the connection without an answer" in error.message and "stopping" in error.message


def test_a_refused_connection_says_to_check_the_server():
    error = unreachable_error(URL, ConnectionRefusedError(111, "Connection refused"))
    assert "Check that the server runs" in error.message and "stopping" not in error.message
