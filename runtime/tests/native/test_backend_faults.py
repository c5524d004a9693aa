"""Faults around the native backend, with a real tritonserver: the worker dying and coming back, tensors over the
shared-memory limit, a full /dev/shm. Each time the failing requests get a clear error and the server serves on."""

from __future__ import annotations

import json
import os
import pathlib
import queue
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from native_testlib import Stack
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.integration


def infer_fp32(stack: Stack, x: np.ndarray, **kwargs):
    tensor = httpclient.InferInput("IN_FP32", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return httpclient.InferenceServerClient(f"127.0.0.1:{stack.http}").infer("identity", [tensor], **kwargs)


def test_a_dead_worker_fails_requests_clearly_and_a_restarted_one_is_reconnected(native_library, tmp_path):
    with Stack(tmp_path) as stack:
        x = np.ones((1, 4), np.float32)
        infer_fp32(stack, x)
        # Killed while a stream is in flight: the stream ends with an error naming the lost process.
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{stack.grpc}")
        responses: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: responses.put((result, error)))
        inputs = [grpcclient.InferInput(name, [1] if name != "IN" else [2], kind) for name, kind in
                  (("IN", "FP32"), ("COUNT", "INT32"), ("DELAY_MS", "INT32"))]  # fmt: skip
        for tensor, value in zip(inputs, ([1.0, 2.0], [100], [50]), strict=True):
            tensor.set_data_from_numpy(np.array(value, np.float32 if tensor.name() == "IN" else np.int32))
        client.async_stream_infer("stream", inputs)
        assert responses.get(timeout=30)[1] is None
        stack.kill_peer()
        error = next(error for _, error in iter(lambda: responses.get(timeout=30), None) if error is not None)
        assert "lost the process serving model" in str(error), str(error)
        client.stop_stream()
        # Idle: the next request says the worker cannot be reached.
        with pytest.raises(InferenceServerException) as raised:
            infer_fp32(stack, x)
        assert raised.value.status() == "503" or "503" in str(raised.value)
        assert "cannot connect to the tritonrt process serving model" in str(raised.value)
        assert stack.live()
        # The worker comes back (same token): served again, without reloading the model.
        stack.start_peer()
        np.testing.assert_array_equal(infer_fp32(stack, x).as_numpy("OUT_FP32"), x)


def test_tensors_over_the_region_limit_fail_alone_with_a_clear_message(native_library, tmp_path):
    with Stack(tmp_path, region_limit=4 << 20) as stack:
        with pytest.raises(InferenceServerException, match="more than the region limit of 4194304 bytes"):
            infer_fp32(stack, np.ones((1, 2 << 20), np.float32))  # 8 MiB in
        with pytest.raises(InferenceServerException, match="outputs of this batch need"):
            infer_fp32(stack, np.ones((1, 4), np.float32), parameters={"big_output": 6 << 20})  # 6 MiB out
        x = np.ones((1, 1 << 18), np.float32)  # 1 MiB: fits
        np.testing.assert_array_equal(infer_fp32(stack, x).as_numpy("OUT_FP32"), x)


def test_a_full_dev_shm_does_not_matter_the_regions_are_anonymous_memory(native_library):
    """Regions are memfds: no file under /dev/shm, so a full (or small: Docker's 64 MB default) /dev/shm cannot
    fail them. Checked in a private mount namespace whose /dev/shm is a 1 MiB tmpfs filled to the last byte."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a mount namespace here: {probe.stderr.decode().strip()}")
    scenario = pathlib.Path(__file__).with_name("shm_scenario.py")
    script = (
        "mount --make-rprivate / && mount -t tmpfs -o size=1m tmpfs /dev/shm && "
        "(dd if=/dev/zero of=/dev/shm/filler bs=64k 2>/dev/null || true) && "
        f'exec "{sys.executable}" "{scenario}"'
    )
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    verdict = json.loads(done.stdout.strip().splitlines()[-1])
    assert verdict["shm_free_bytes"] == 0, verdict
    assert verdict["equal"] is True
    assert verdict["shm_entries"] == ["filler"], "nothing of tritonrt's under /dev/shm"


def test_nothing_is_left_under_dev_shm(native_library, tmp_path):
    before = set(os.listdir("/dev/shm"))
    with Stack(tmp_path) as stack:
        x = np.ones((1, 1 << 20), np.float32)
        infer_fp32(stack, x)
        during = set(os.listdir("/dev/shm")) - before
    assert not {name for name in during if "tritonrt" in name}
