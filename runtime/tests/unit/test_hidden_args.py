"""Arguments kept off a program's command line (server/hidden_args.py) and the guard's fallback, with real
child processes: the program gets the argument, ps does not show it, and nothing runs with the placeholder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tritonrt.server import guard
from tritonrt.server.hidden_args import HIDDEN_VARIABLE_PREFIX, HiddenArgumentsError, placeholder, spawn_hidden

SECRET = "--http-restricted-api=model-repository:triton-access-token=s3cret-token_0123456789"
# The child reports what it parsed and which variables it would pass on to its own children.
REPORT = "import json, os, sys; print(json.dumps([sys.argv[1:], sorted(os.environ)]), flush=True); sys.stdin.read()"


def start(hidden: dict[int, str], extra: list[str]) -> subprocess.Popen:
    command = [sys.executable, "-c", REPORT, *extra]
    return spawn_hidden(command, hidden, os.environ, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> list:
    assert process.stdin is not None and process.stdout is not None
    line = process.stdout.readline()
    process.stdin.close()
    assert process.wait(30) == 0
    return json.loads(line)


def test_the_program_gets_the_argument_and_ps_shows_the_placeholder():
    process = start({3: SECRET, 5: "--other=also-secret"}, [SECRET, "plain", "--other=also-secret"])
    try:
        shown = open(f"/proc/{process.pid}/cmdline", "rb").read().split(b"\0")[:-1]
        argv, variables = finish(process)
    finally:
        process.kill()
        process.wait()
    assert argv == [SECRET, "plain", "--other=also-secret"]
    assert [arg.decode() for arg in shown[3:]] == [placeholder(SECRET), "plain", "--other=(hidden by tritonrt)"]
    assert not any(b"s3cret" in arg or b"also-secret" in arg for arg in shown)
    assert not any(name.startswith(HIDDEN_VARIABLE_PREFIX) for name in variables), "children would inherit it"
    assert "PATH" in variables


def test_the_placeholder_keeps_the_flag_and_is_no_valid_restriction():
    shown = placeholder(SECRET)
    assert shown == "--http-restricted-api=(hidden by tritonrt)"
    assert ":" not in shown.partition("=")[2] and "=" not in shown.partition("=")[2]  # Triton refuses it


def test_a_child_that_cannot_be_traced_never_runs(tmp_path):
    def refuse() -> None:
        raise PermissionError("tracing is off here")

    marker = tmp_path / "ran"
    command = [sys.executable, "-c", "import sys; open(sys.argv[2], 'w')", SECRET, str(marker)]
    with pytest.raises(HiddenArgumentsError, match="traced"):
        spawn_hidden(command, {3: SECRET}, os.environ, preexec=refuse)
    assert not marker.exists()


def test_an_index_outside_the_command_is_refused():
    with pytest.raises(ValueError, match="outside the command"):
        spawn_hidden(["true"], {1: SECRET}, os.environ)


def test_the_guard_falls_back_to_plain_arguments_and_says_so(monkeypatch, capsys):
    def cannot(*args, **kwargs):
        raise HiddenArgumentsError("ptrace is off")

    monkeypatch.setattr(guard, "spawn_hidden", cannot)
    process = guard._start(
        [sys.executable, "-c", "import sys; sys.exit(sys.argv[1] != 'x=T')", "x=(hidden)"], {3: "x=T"}
    )
    assert process.wait(30) == 0
    warning = capsys.readouterr().out
    assert warning.startswith("W tritonrt:") and "ptrace is off" in warning and "ps" in warning
