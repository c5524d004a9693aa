"""Worker options: the mode and timeout from settings and environment, GPU placement, the fork refusal, the
call slot shared with a worker process, and how a worker's end is described."""

from __future__ import annotations

import os
import signal
import struct
import sys
import threading
import types

import pytest

from tritonrt.exceptions import PyTritonValidationError
from tritonrt.models.instance import CallSlot, CallState, RunningCall
from tritonrt.models.watchdog import Watchdog
from tritonrt.models.worker_process import WorkerExit
from tritonrt.models.workers import (
    WorkerInfo,
    WorkerMode,
    WorkerOptions,
    check_fork_allowed,
    device_for,
)
from tritonrt.server.supervisor import describe_exit, describe_status


def test_threads_are_the_default_and_the_environment_chooses_processes():
    assert WorkerOptions().resolved_mode({}) is WorkerMode.THREAD
    assert WorkerOptions().resolved_mode({"TRITONRT_WORKERS": " Process "}) is WorkerMode.PROCESS
    assert WorkerOptions(mode=WorkerMode.THREAD).resolved_mode({"TRITONRT_WORKERS": "process"}) is WorkerMode.THREAD


def test_an_unknown_mode_says_which_are_known():
    with pytest.raises(PyTritonValidationError, match="TRITONRT_WORKERS='fibers'.*'thread'.*'process'"):
        WorkerOptions().resolved_mode({"TRITONRT_WORKERS": "fibers"})
    with pytest.raises(PyTritonValidationError, match="WorkerMode.PROCESS"):
        WorkerOptions(mode="process")  # type: ignore[arg-type]


def test_the_timeout_is_off_by_default_and_set_per_model_or_service_wide():
    assert WorkerOptions().resolved_timeout_s({}) is None
    assert WorkerOptions().resolved_timeout_s({"TRITONRT_EXECUTION_TIMEOUT_S": "0"}) is None
    assert WorkerOptions().resolved_timeout_s({"TRITONRT_EXECUTION_TIMEOUT_S": "60"}) == 60.0
    assert WorkerOptions(execution_timeout_s=2).resolved_timeout_s({"TRITONRT_EXECUTION_TIMEOUT_S": "60"}) == 2.0


@pytest.mark.parametrize("raw", ["-1", "soon", "inf", "nan"])
def test_a_bad_timeout_in_the_environment_says_what_to_use(raw):
    with pytest.raises(PyTritonValidationError, match="TRITONRT_EXECUTION_TIMEOUT_S.*seconds > 0"):
        WorkerOptions().resolved_timeout_s({"TRITONRT_EXECUTION_TIMEOUT_S": raw})


@pytest.mark.parametrize("bad", [0, -2.0, True, float("inf")])
def test_a_bad_timeout_setting_is_refused(bad):
    with pytest.raises(PyTritonValidationError, match="execution_timeout_s"):
        WorkerOptions(execution_timeout_s=bad)


@pytest.mark.parametrize("devices", [(-1,), (0, "1"), (True,)])
def test_devices_are_gpu_ids(devices):
    with pytest.raises(PyTritonValidationError, match="GPU id"):
        WorkerOptions(devices=devices)


def test_instances_take_the_devices_in_turn():
    assert [device_for(index, (0, 1)) for index in range(4)] == [0, 1, 0, 1]
    assert device_for(3, ()) is None


def test_a_worker_process_sees_its_gpu_as_cuda_0_a_thread_by_its_id():
    assert WorkerInfo.for_instance("m", 1, (2, 3), WorkerMode.PROCESS) == WorkerInfo("m", 1, 3, "cuda:0")
    assert WorkerInfo.for_instance("m", 1, (2, 3), WorkerMode.THREAD) == WorkerInfo("m", 1, 3, "cuda:3")
    assert WorkerInfo.for_instance("m", 0, (), WorkerMode.PROCESS) == WorkerInfo("m", 0, None, "cpu")


def _fake_torch(initialized: bool) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: initialized)  # type: ignore[attr-defined]
    return torch


def test_a_fork_after_cuda_was_initialised_is_refused_with_what_to_do(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(False))
    check_fork_allowed("classify")  # torch imported, CUDA untouched: forking is fine
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(True))
    with pytest.raises(PyTritonValidationError, match="'classify': CUDA was initialised") as caught:
        check_fork_allowed("classify")
    assert "setup" in str(caught.value) and "TRITONRT_WORKERS=thread" in str(caught.value)


def test_the_call_slot_is_shared_with_a_forked_process():
    slot = CallSlot()
    slot.reset()
    pid = os.fork()
    if pid == 0:
        slot.set(CallState.CALLING, 42)
        os._exit(0)
    os.waitpid(pid, 0)
    running = slot.read()
    assert (running.state, running.seq) == (CallState.CALLING, 42) and running.elapsed_s >= 0


def test_a_write_caught_half_done_is_not_read_as_a_batch_running_since_the_last_write():
    # A worker interrupted while it marks a new batch CALLING: the state is new, the time still that of its last
    # write (long ago, after an idle hour). Read as a whole, that was a batch past any execution timeout.
    slot = CallSlot()
    slot.set(CallState.IDLE, 7)
    (version,) = struct.unpack_from("<Q", slot._memory, 0)
    struct.pack_into("<Q", slot._memory, 0, version + 1)  # the version is odd while a write is under way
    struct.pack_into("<I", slot._memory, 8, CallState.CALLING)
    struct.pack_into("<Q", slot._memory, 24, 0)  # since: the clock's start, hours ago
    assert slot.read().state is not CallState.CALLING
    slot.set(CallState.CALLING, 8)  # the write completes
    running = slot.read()
    assert (running.state, running.seq) == (CallState.CALLING, 8) and running.elapsed_s < 60


class _ScriptedInstance:
    """An instance whose slot reads the given calls in turn (then IDLE), and that records what the watchdog expires."""

    def __init__(self, reads: list[RunningCall]):
        self.slot, self._reads, self.expired, self.done = self, list(reads), [], threading.Event()

    def read(self) -> RunningCall:
        if not self._reads:
            self.done.set()
            return RunningCall(CallState.IDLE, 0, 0.0)
        return self._reads.pop(0)

    def expire(self, running: RunningCall, timeout_s: float) -> None:
        self.expired.append(running.seq)


def test_the_watchdog_expires_a_batch_seen_past_the_timeout_twice_in_a_row():
    late, later, other = (RunningCall(CallState.CALLING, seq, 10.0) for seq in (1, 1, 2))
    idle = RunningCall(CallState.IDLE, 0, 0.0)
    once = _ScriptedInstance([late, idle, other, idle])  # each overdue look alone: a torn read, never expired
    twice = _ScriptedInstance([late, later])
    watchdog = Watchdog("m", [once, twice], timeout_s=0.05)  # type: ignore[list-item]
    try:
        assert once.done.wait(10) and twice.done.wait(10)
    finally:
        watchdog.close()
    assert (once.expired, twice.expired) == ([], [1])


def test_a_worker_end_names_the_model_the_instance_and_the_signal():
    assert describe_status(-signal.SIGSEGV) == "was killed by SIGSEGV"
    assert describe_status(3) == "exited with code 3"
    assert describe_status(-99) == "was killed by signal 99"
    assert describe_exit(137) == "exit code 137 (SIGKILL)"
    exit = WorkerExit("m", 1, 1234, -signal.SIGKILL)
    assert exit.describe() == "model 'm' instance 1: its worker process (pid 1234) was killed by SIGKILL"
    assert exit.how() == "its worker process (pid 1234) was killed by SIGKILL"  # the supervisor names the model itself
    assert "execution timeout" in WorkerExit("m", 0, 1, -9, timed_out=True).describe()
