"""tritonserver's start-up log through tritonrt on a host without a GPU: no ERROR records for the missing GPU,
and one INFO line of tritonrt's that says it serves on CPU. A real tritonserver."""

from __future__ import annotations

import logging

import pytest

from tritonrt.server.output import GPU_ABSENT_MARKERS, gpu_device_present

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(gpu_device_present(), reason="this host has a GPU: tritonserver finds it"),
]


def test_a_cpu_only_start_logs_no_errors_and_says_no_gpu(new_triton, caplog):
    caplog.set_level(logging.DEBUG, "tritonrt.server")
    server = new_triton()
    server.triton.run()
    assert server.http.is_server_ready()
    output = [record for record in caplog.records if record.name == "tritonrt.server.tritonserver"]
    gpu_lines = [record for record in output if any(marker in record.getMessage() for marker in GPU_ABSENT_MARKERS)]
    assert gpu_lines, "tritonserver printed none of the lines this test is about: update GPU_ABSENT_MARKERS"
    assert [record.getMessage() for record in output if record.levelno >= logging.ERROR] == []
    assert all(record.levelno == logging.DEBUG for record in gpu_lines)
    ours = [record for record in caplog.records if record.name == "tritonrt.server" and "No GPU found" in record.msg]
    assert [record.levelno for record in ours] == [logging.INFO]
