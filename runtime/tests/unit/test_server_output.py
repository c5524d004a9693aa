"""ServerOutput: tritonserver's lines at their level; on a CPU-only host its GPU errors at DEBUG, explained once."""

from __future__ import annotations

import logging

import pytest

from tritonrt.server.output import ServerOutput

# Lines tritonserver 2.51 printed at start on the 2-core CPU-only VM.
NO_GPU_LINES = [
    'E1126 14:34:27.202789 22066 server.cc:241] "CudaDriverHelper has not been initialized."',
    "Error: Failed to initialize NVML",
    'W1126 14:34:27.200861 22066 pinned_memory_manager.cc:273] "Unable to allocate pinned system memory, pinned '
    'memory pool will not be available: CUDA driver version is insufficient for CUDA runtime version"',
    'W1126 14:34:27.206963 22066 metrics.cc:798] "DCGM unable to start: DCGM initialization error"',
]
ORDINARY = {
    'I1126 14:34:27.208966 22066 http_server.cc:4713] "Started HTTPService at 0.0.0.0:58173"': logging.DEBUG,
    "E1126 14:34:27.300000 22066 model_lifecycle.cc:641] \"failed to load 'm'\"": logging.ERROR,
    'W1126 14:34:27.300000 22066 server.cc:251] "failed to enable peer access"': logging.WARNING,
}


def _ours(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "tritonrt.server"]


def test_without_a_gpu_the_gpu_errors_are_debug_and_explained_once(caplog):
    caplog.set_level(logging.DEBUG, "tritonrt.server")
    output = ServerOutput(verbose=False, gpu_present=False)
    assert [output.level(line) for line in NO_GPU_LINES] == [logging.DEBUG] * len(NO_GPU_LINES)
    [record] = _ours(caplog)
    assert record.levelno == logging.INFO and record.getMessage().startswith("No GPU found: serving on CPU.")


def test_with_a_gpu_device_they_keep_their_level_and_a_warning_says_why(caplog):
    caplog.set_level(logging.DEBUG, "tritonrt.server")
    output = ServerOutput(verbose=False, gpu_present=True)
    levels = [output.level(line) for line in NO_GPU_LINES]
    assert levels == [logging.ERROR, logging.ERROR, logging.WARNING, logging.WARNING]
    [record] = _ours(caplog)
    assert record.levelno == logging.WARNING and "nvidia-smi" in record.getMessage()


@pytest.mark.parametrize("gpu_present", [False, True])
@pytest.mark.parametrize("verbose", [False, True])
def test_other_lines_keep_their_level(caplog, gpu_present, verbose):
    caplog.set_level(logging.DEBUG, "tritonrt.server")
    output = ServerOutput(verbose=verbose, gpu_present=gpu_present)
    expected = {
        line: (logging.INFO if verbose and level == logging.DEBUG else level) for line, level in ORDINARY.items()
    }
    assert {line: output.level(line) for line in ORDINARY} == expected
    assert _ours(caplog) == []


# What tritonserver 2.51 printed when a client's cancelled gRPC stream crashed it (test_decoupled_client, under load).
CRASH_LINES = [
    "Signal (11) received.",
    " 0# 0x000055B2ACF4452D in /root/.cache/tritonrt/server/0.7.0/bin/tritonserver",
    " 1# 0x00007FA6BF45A050 in /lib/x86_64-linux-gnu/libc.so.6",
    "11# clone in /lib/x86_64-linux-gnu/libc.so.6",
]


@pytest.mark.parametrize("gpu_present", [False, True])
def test_a_crash_and_its_stack_are_errors(gpu_present):
    output = ServerOutput(verbose=False, gpu_present=gpu_present)
    assert [output.level(line) for line in CRASH_LINES] == [logging.ERROR] * len(CRASH_LINES)
    assert output.level("double free or corruption (out)") == logging.ERROR
    assert output.level("") == logging.DEBUG


def test_numbered_lines_before_a_crash_keep_their_level():
    output = ServerOutput(verbose=False, gpu_present=False)
    assert output.level("Signal (2) received.") == logging.DEBUG  # a stop's SIGINT (15: SIGTERM) is no crash
    assert output.level("Signal (15) received.") == logging.DEBUG
    assert not output.crashed
    assert output.level(" 0# not a stack frame: no crash yet") == logging.DEBUG
    assert output.level("double free or corruption (out)") == logging.ERROR


def test_a_load_whose_override_names_no_backend_is_explained(caplog):
    line = (
        "E1126 14:34:27.300000 22066 model_lifecycle.cc:641] \"failed to load 'simple' version 1: Invalid argument: "
        "Could not determine backend for model 'simple' with no backend in model configuration\""
    )
    with caplog.at_level(logging.DEBUG, logger="tritonrt.server"):
        assert ServerOutput(verbose=False, gpu_present=False).level(line) == logging.ERROR
    (ours,) = _ours(caplog)
    assert ours.levelno == logging.ERROR
    assert "'simple'" in ours.getMessage() and '"backend": "tritonrt"' in ours.getMessage()
