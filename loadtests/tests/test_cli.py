"""The command line: option parsing and the errors a user can make (exit status 2, a clear message).

Runs ``python -m loadtests`` in a subprocess so Locust's gevent patching stays out of the test process;
none of these runs reaches a server.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from loadtests.cli import parse_duration, protocol_of
from loadtests.errors import LoadTestSetupError
from loadtests.tests.conftest import REPO_ROOT

HTTP_ONLY = """
from loadtests.http_user import KServeHttpUser


class Http(KServeHttpUser):
    model_name = "identity"
"""


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "loadtests", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("45", 45), ("2m", 120), ("1h30m", 5400), ("1.5s", 1.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "ten", "5x", "0s"])
def test_bad_durations(text):
    with pytest.raises(LoadTestSetupError, match="--duration"):
        parse_duration(text)


@pytest.fixture
def locustfile(tmp_path):
    path = tmp_path / "locustfile.py"
    path.write_text(HTTP_ONLY)
    return str(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stream", "--protocol", "http"], "--stream uses gRPC streams"),
        (["--protocol", "grpc"], "has no user class for protocol 'grpc' (found: Http (http))"),
        (["--json", "--protocol", "grpc"], "--json selects JSON tensors for HTTP"),
        (["--duration", "soon"], "--duration 'soon' is not a time span"),
        (["--url", "ftp://example.com"], "must be an http:// or https:// address"),
        (["--url", "grpc://127.0.0.1:1", "--protocol", "http"], "--url grpc://127.0.0.1:1 is a gRPC address"),
        (["--url", "grpc://127.0.0.1:1"], "has no user class for protocol 'grpc' (found: Http (http))"),
        (["--slo-env", "no/such/slo.env"], "no no/such/slo.env: run from the project root or pass --slo-env PATH"),
        (
            ["--url", "http://127.0.0.1:{port}"],
            "cannot reach http://127.0.0.1:{port}/v2/models/identity/config",
        ),
    ],
    ids=[
        "stream-over-http",
        "no-grpc-user",
        "json-over-grpc",
        "duration",
        "scheme",
        "grpc-url-over-http",
        "grpc-url-selects-grpc",
        "no-slo-env",
        "unreachable",
    ],
)
def test_setup_errors_exit_2_with_a_message(locustfile, args, message):
    port = str(_closed_port())
    args = [a.replace("{port}", port) for a in args]
    url = [] if "--url" in args else ["--url", "http://127.0.0.1:" + port]

    result = _cli(*url, "--locustfile", locustfile, *args)

    assert result.returncode == 2, result.stderr
    assert message.replace("{port}", port) in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_locustfile(tmp_path):
    result = _cli("--url", "http://localhost:8000", "--locustfile", str(tmp_path / "nope.py"))

    assert result.returncode == 2
    assert "no locustfile at" in result.stderr and "--locustfile PATH" in result.stderr


def test_bad_gate_variable(locustfile):
    result = _cli("--url", "localhost:1", "--locustfile", locustfile, env=os.environ | {"LOADTEST_P95_MS": "quick"})

    assert result.returncode == 2
    assert "LOADTEST_P95_MS='quick' is not a number" in result.stderr


def test_a_bad_gate_in_slo_env_names_the_file(locustfile, tmp_path):
    slo_env = tmp_path / "slo.env"
    slo_env.write_text("LOADTEST_P95_MS=soon\n")
    result = _cli("--url", "localhost:1", "--locustfile", locustfile, "--slo-env", str(slo_env))

    assert result.returncode == 2
    assert f"LOADTEST_P95_MS='soon' in {slo_env} is not a number" in result.stderr


@pytest.mark.parametrize(
    ("url", "protocol", "stream", "expected"),
    [
        ("grpc://localhost:8001", None, False, "grpc"),
        ("GRPC://localhost:8001", None, False, "grpc"),
        ("http://localhost:8000", None, False, "http"),
        ("localhost:8001", None, False, "http"),
        ("localhost:8001", "grpc", False, "grpc"),
        ("grpc://localhost:8001", "grpc", False, "grpc"),
        ("grpc://localhost:8001", None, True, "grpc-stream"),
    ],
)
def test_the_protocol_follows_the_url_unless_given(url, protocol, stream, expected):
    assert protocol_of(url, protocol, stream=stream) == expected


def test_argparse_rejects_bad_numbers():
    result = _cli("--url", "localhost:1", "--users", "0")

    assert result.returncode == 2
    assert "'0' is not a whole number >= 1" in result.stderr
