"""Unit tests of server URL parsing."""

import pytest

from tritonrt.client._transport import TritonUrl
from tritonrt.client.exceptions import PyTritonClientInvalidUrlError, PyTritonClientValueError


@pytest.mark.parametrize(
    ("url", "scheme", "host", "port"),
    [
        ("localhost", "http", "localhost", 8000),
        ("localhost:9000", "http", "localhost", 9000),
        ("10.0.0.5", "http", "10.0.0.5", 8000),
        ("http://example.com", "http", "example.com", 8000),
        ("http://example.com:8080/", "http", "example.com", 8080),
        ("grpc://localhost", "grpc", "localhost", 8001),
        ("grpc://localhost:9001", "grpc", "localhost", 9001),
        ("GRPC://LocalHost:9001", "grpc", "localhost", 9001),
        ("  grpc://localhost  ", "grpc", "localhost", 8001),
        ("[::1]:8000", "http", "::1", 8000),
    ],
)
def test_parses_scheme_host_and_default_ports(url, scheme, host, port):
    parsed = TritonUrl.from_url(url)
    assert (parsed.scheme, parsed.hostname, parsed.port) == (scheme, host, port)


def test_renders_with_and_without_scheme():
    assert TritonUrl.from_url("grpc://localhost").with_scheme == "grpc://localhost:8001"
    assert TritonUrl.from_url("localhost:9000").without_scheme == "localhost:9000"
    assert TritonUrl.from_url("http://[::1]:8000").without_scheme == "[::1]:8000"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (8000, "must be a string"),
        (None, "must be a string"),
        ("", "names no host"),
        ("https://localhost", "scheme 'https' is not supported"),
        ("ftp://localhost:8000", "scheme 'ftp' is not supported"),
        ("http://", "names no host"),
        ("localhost:port", "port must be a number"),
        ("grpc://localhost:70000", "port must be a number"),
        ("http://localhost:8000/v2/models", "without a path"),
        ("localhost:8000?x=1", "without a path"),
    ],
)
def test_invalid_urls_raise_with_the_reason(url, reason):
    with pytest.raises(PyTritonClientInvalidUrlError, match=reason) as caught:
        TritonUrl.from_url(url)
    assert "grpc://localhost:8001" in caught.value.message  # shows what a valid URL looks like


def test_invalid_url_error_is_a_client_value_error():
    assert issubclass(PyTritonClientInvalidUrlError, PyTritonClientValueError)
