"""Ctrl+C: PyTriton 0.7's serve() logs that it is exiting, stops the server and returns; the code after serve()
and after the ``with`` block runs and the program exits 0 (no traceback)."""

from __future__ import annotations

import concurrent.futures
import socket
import subprocess

import numpy as np
import pytest

from tritonrt.client import ModelClient
from tritonrt.client.exceptions import PyTritonClientError


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("whole_group", [False, True], ids=["sigint-to-the-process", "ctrl-c-to-the-group"])
def test_ctrl_c_returns_from_serve_and_the_program_exits_0(start, ports, whole_group):
    program = start("serve_ctrl_c.py", *ports)
    program.wait_for("SERVING")
    with ModelClient(f"127.0.0.1:{ports[0]}", "double", init_timeout_s=60) as client:
        assert client.infer_sample(x=np.array([1.5, 2.0], np.float32))["y"].tolist() == [3.0, 4.0]
    program.interrupt(whole_group=whole_group)
    code = program.wait()
    output = program.output()
    assert code == 0, output
    assert "SIGINT received, exiting." in output
    assert "AFTER SERVE returned=None connected=False stop=False" in output  # serve() stopped it already
    assert "AFTER WITH" in output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output
    assert all(_port_is_free(port) for port in ports[:2])  # the server went with it


# tritonrt's own behaviour (PyTriton 0.7 ignores a second Ctrl+C): run on tritonrt alone.
@pytest.mark.parametrize("runtime", ["tritonrt"], indirect=True)
def test_a_second_ctrl_c_during_the_drain_stops_at_once_with_a_non_zero_exit(runtime, start, ports):
    program = start("serve_slow_ctrl_c.py", *ports)
    program.wait_for("SERVING")
    client = ModelClient(f"127.0.0.1:{ports[0]}", "slow", init_timeout_s=60, inference_timeout_s=300)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(client.infer_sample, x=np.array([1.0], np.float32))
        program.wait_for("CALLED")  # the model sleeps 120 s: a drain would wait for it
        program.interrupt(whole_group=True)
        program.wait_for("Press Ctrl+C again to stop at once")
        program.interrupt(whole_group=True)
        try:
            code = program.wait(timeout_s=60)  # well before the request could finish
        except subprocess.TimeoutExpired:
            pytest.fail(f"a second Ctrl+C did not stop the program:\n{program.output()}")
        with pytest.raises(PyTritonClientError):
            in_flight.result(timeout=60)
    client.close()
    output = program.output()
    assert code != 0, output
    assert "SIGINT received again: stopped at once." in output
    assert "AFTER WITH" not in output
    assert all(_port_is_free(port) for port in ports[:2])
