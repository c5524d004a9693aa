"""The supervisor's decisions, with recorded callables in place of a server (the real faults are driven in
tests/integration/test_recovery.py): what is recovered, how often, in which order, and when it gives up."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from tritonrt.exceptions import PyTritonValidationError
from tritonrt.server.supervisor import RecoveryPolicy, Supervisor, WorkerExited, describe_exit

WAIT_S = 10  # a guard against hanging, not a measurement
FAST = {"backoff_s": 0.01, "max_backoff_s": 0.02}


class Recorder:
    """The supervisor's callables: each call is recorded; ``fail`` makes restarts or reloads raise."""

    def __init__(self, *, fail: int = 0, live: bool = True, ready: bool = True, connected: bool = False):
        self.calls: list[str] = []
        self.connected = connected
        self.reasons: list[str] = []
        self.fail = fail
        self.live = live
        self.ready = ready
        self.done = threading.Event()

    def _try(self, what: str) -> None:
        self.calls.append(what)
        if self.fail:
            self.fail -= 1
            raise RuntimeError(f"{what} failed")
        self.done.set()

    def restart_server(self) -> None:
        self._try("restart")

    def reload_model(self, name: str) -> None:
        self._try(f"reload {name}")

    def restart_worker(self, name: str, index: int) -> None:
        self._try(f"restart {name}/{index}")

    def give_up(self, reason: str) -> None:
        self.reasons.append(reason)
        self.done.set()

    def supervisor(self, policy: RecoveryPolicy, *, restartable: bool = True) -> Supervisor:
        return Supervisor(
            policy,
            restart_server=self.restart_server if restartable else None,
            reload_model=self.reload_model,
            server_live=lambda: self.live,
            model_ready=lambda name: self.ready,
            model_connected=lambda name: self.connected,
            give_up=self.give_up,
            reconnect_grace_s=0.05,
            restart_worker=self.restart_worker if restartable else None,
        )


def until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, "the supervisor did not get there"
        time.sleep(0.005)


@pytest.fixture
def supervisors():
    made: list[Supervisor] = []
    yield made
    for supervisor in made:
        supervisor.close()


def test_policy_defaults_and_environment():
    assert RecoveryPolicy() == RecoveryPolicy(server_restarts=3, model_reloads=3, window_s=600.0)
    policy = RecoveryPolicy.from_env({"TRITONRT_SERVER_RESTARTS": "0", "TRITONRT_MODEL_RELOADS": " 5 "})
    assert (policy.server_restarts, policy.model_reloads) == (0, 5)
    assert RecoveryPolicy.from_env({"TRITONRT_SERVER_RESTARTS": ""}) == RecoveryPolicy()


@pytest.mark.parametrize("environ", [{"TRITONRT_SERVER_RESTARTS": "-1"}, {"TRITONRT_MODEL_RELOADS": "three"}])
def test_policy_refuses_bad_environment_values_by_name(environ):
    with pytest.raises(PyTritonValidationError, match=next(iter(environ))):
        RecoveryPolicy.from_env(environ)


@pytest.mark.parametrize("field, value", [("server_restarts", -1), ("model_reloads", 1.5), ("backoff_s", -0.1)])
def test_policy_refuses_bad_values(field, value):
    with pytest.raises(PyTritonValidationError, match=field):
        RecoveryPolicy(**{field: value})


def test_exit_codes_name_their_signal():
    assert describe_exit(134) == "exit code 134 (SIGABRT)"
    assert describe_exit(139) == "exit code 139 (SIGSEGV)"
    assert describe_exit(1) == "exit code 1"


def test_a_server_exit_restarts_it_and_the_supervisor_is_busy_meanwhile(supervisors):
    recorder = Recorder()
    release = threading.Event()
    restarted = recorder.restart_server
    recorder.restart_server = lambda: (release.wait(WAIT_S), restarted())
    supervisor = recorder.supervisor(RecoveryPolicy(**FAST))
    supervisors.append(supervisor)
    supervisor.server_exited(134)
    assert supervisor.busy
    release.set()
    assert recorder.done.wait(WAIT_S)
    until(lambda: not supervisor.busy)
    assert recorder.calls == ["restart"] and recorder.reasons == []


def test_restarts_past_the_budget_give_up_with_the_reason(supervisors):
    recorder = Recorder()
    supervisor = recorder.supervisor(RecoveryPolicy(server_restarts=2, **FAST))
    supervisors.append(supervisor)
    for _ in range(2):
        recorder.done.clear()
        supervisor.server_exited(139)
        assert recorder.done.wait(WAIT_S)
        until(lambda: not supervisor.busy)
    recorder.done.clear()
    supervisor.server_exited(139)
    assert recorder.done.wait(WAIT_S)
    assert recorder.calls == ["restart", "restart"]
    assert len(recorder.reasons) == 1
    assert "SIGSEGV" in recorder.reasons[0] and "server_restarts=2" in recorder.reasons[0]


def test_a_failed_restart_is_tried_again_then_given_up(supervisors):
    recorder = Recorder(fail=5)
    supervisor = recorder.supervisor(RecoveryPolicy(server_restarts=3, **FAST))
    supervisors.append(supervisor)
    supervisor.server_exited(1)
    assert recorder.done.wait(WAIT_S)
    assert recorder.calls == ["restart"] * 3
    assert "restarting tritonserver failed: restart failed" in recorder.reasons[0]


def test_restarts_off_give_up_at_the_first_exit(supervisors):
    recorder = Recorder()
    supervisor = recorder.supervisor(RecoveryPolicy(server_restarts=0))
    supervisors.append(supervisor)
    supervisor.server_exited(137)
    assert recorder.done.wait(WAIT_S)
    assert recorder.calls == [] and "SIGKILL" in recorder.reasons[0]


def test_a_server_that_is_not_ours_is_not_restarted(supervisors):
    recorder = Recorder()
    supervisor = recorder.supervisor(RecoveryPolicy(), restartable=False)
    supervisors.append(supervisor)
    supervisor.server_exited(1)
    assert recorder.done.wait(WAIT_S)
    assert recorder.calls == [] and "exited unexpectedly" in recorder.reasons[0]


def test_a_lost_model_is_reloaded_once_for_reports_that_come_together(supervisors):
    recorder = Recorder()
    release = threading.Event()
    reload = recorder.reload_model
    recorder.reload_model = lambda name: (release.wait(WAIT_S), reload(name))
    supervisor = recorder.supervisor(RecoveryPolicy(**FAST))
    supervisors.append(supervisor)
    for _ in range(3):  # several instances of one model, or the same instance seen twice
        supervisor.model_lost("double")
    release.set()
    assert recorder.done.wait(WAIT_S)
    until(lambda: not supervisor.busy)
    assert recorder.calls == ["reload double"]


def test_a_model_reload_that_keeps_failing_gives_up(supervisors):
    recorder = Recorder(fail=10)
    supervisor = recorder.supervisor(RecoveryPolicy(model_reloads=2, **FAST))
    supervisors.append(supervisor)
    supervisor.model_lost("double")
    assert recorder.done.wait(WAIT_S)
    assert recorder.calls == ["reload double"] * 2
    assert "model 'double'" in recorder.reasons[0] and "model_reloads=2" in recorder.reasons[0]


def test_a_model_that_triton_does_not_serve_is_left_alone(supervisors):
    recorder = Recorder(ready=False)  # someone unloaded it on purpose: its instances went away
    supervisor = recorder.supervisor(RecoveryPolicy(**FAST))
    supervisors.append(supervisor)
    supervisor.model_lost("double")
    until(lambda: not supervisor.busy)
    assert recorder.calls == [] and recorder.reasons == []


def test_a_model_loaded_again_with_its_instances_connected_is_left_alone(supervisors):
    recorder = Recorder(connected=True)  # unloaded and loaded on purpose: the new instances connected
    supervisor = recorder.supervisor(RecoveryPolicy(**FAST))
    supervisors.append(supervisor)
    supervisor.model_lost("double")
    until(lambda: not supervisor.busy)
    assert recorder.calls == [] and recorder.reasons == []


def test_a_lost_model_waits_for_a_dying_server_and_leaves_it_to_the_restart(supervisors):
    recorder = Recorder(live=False)  # the workers saw their peers go before the server's exit was reported
    supervisor = recorder.supervisor(RecoveryPolicy(**FAST))
    supervisors.append(supervisor)
    supervisor.model_lost("double")
    supervisor.server_exited(137)
    assert recorder.done.wait(WAIT_S)
    until(lambda: not supervisor.busy)
    assert recorder.calls == ["restart"]


def test_close_drops_a_recovery_that_waits(supervisors):
    recorder = Recorder(fail=1)
    supervisor = recorder.supervisor(RecoveryPolicy(backoff_s=60, max_backoff_s=60))
    supervisors.append(supervisor)
    supervisor.server_exited(1)
    until(lambda: recorder.calls == ["restart"])  # failed: the next try waits 60 s
    supervisor.close()
    assert not supervisor.busy
    assert recorder.calls == ["restart"] and recorder.reasons == []


def test_a_server_that_dies_as_its_restart_ends_is_restarted_again(supervisors):
    recorder = Recorder()
    supervisor: Supervisor
    restarted = recorder.restart_server

    def restart_that_dies_at_once() -> None:
        restarted()
        if recorder.calls.count("restart") == 1:
            supervisor.server_exited(139)  # reported while the first restart is still being handled

    recorder.restart_server = restart_that_dies_at_once
    supervisor = recorder.supervisor(RecoveryPolicy(**FAST))
    supervisors.append(supervisor)
    supervisor.server_exited(134)
    until(lambda: recorder.calls == ["restart", "restart"] and not supervisor.busy)
    assert recorder.reasons == []


def test_each_dead_worker_is_restarted_once_per_report(supervisors):
    recorder = Recorder()
    supervisor = recorder.supervisor(RecoveryPolicy(**FAST))
    supervisors.append(supervisor)
    supervisor.worker_exited(WorkerExited("double", 1, "was killed by SIGKILL"))
    until(lambda: recorder.calls == ["restart double/1"] and not supervisor.busy)
    supervisor.worker_exited(WorkerExited("double", 0, "was killed by SIGSEGV"))
    until(lambda: recorder.calls == ["restart double/1", "restart double/0"] and not supervisor.busy)
    assert recorder.reasons == []


def test_a_worker_that_keeps_dying_gives_up_naming_the_instance_and_the_limit(supervisors):
    recorder = Recorder()
    supervisor = recorder.supervisor(RecoveryPolicy(worker_restarts=2, **FAST))
    supervisors.append(supervisor)
    for _ in range(3):
        recorder.done.clear()
        supervisor.worker_exited(WorkerExited("double", 1, "was killed by SIGSEGV"))
        assert recorder.done.wait(WAIT_S)
        until(lambda: not supervisor.busy)
    assert recorder.calls == ["restart double/1"] * 2
    assert "model 'double' instance 1: was killed by SIGSEGV" in recorder.reasons[0]
    assert "worker_restarts=2" in recorder.reasons[0]


def test_worker_restarts_from_the_environment():
    assert RecoveryPolicy.from_env({"TRITONRT_WORKER_RESTARTS": "7"}).worker_restarts == 7
    with pytest.raises(PyTritonValidationError, match="TRITONRT_WORKER_RESTARTS"):
        RecoveryPolicy.from_env({"TRITONRT_WORKER_RESTARTS": "many"})


class Clock:
    """The supervisor's clock, moved by the test (the supervisor's waits still pass in real, short time)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def clocked(recorder: Recorder, policy: RecoveryPolicy, clock: Clock) -> Supervisor:
    return Supervisor(
        policy,
        restart_server=recorder.restart_server,
        reload_model=recorder.reload_model,
        server_live=lambda: True,
        model_ready=lambda name: True,
        model_connected=lambda name: False,
        give_up=recorder.give_up,
        reconnect_grace_s=0.0,
        restart_worker=recorder.restart_worker,
        clock=clock,
    )


def server_dies_after(supervisor: Supervisor, clock: Clock, recorder: Recorder, served_s: float) -> None:
    """tritonserver serves ``served_s`` after its last restart, then dies; returns once that was handled."""
    clock.now += served_s
    recorder.done.clear()
    supervisor.server_exited(139)
    assert recorder.done.wait(WAIT_S)
    until(lambda: not supervisor.busy)


def test_a_server_that_served_healthily_is_restarted_at_once_and_never_gives_up(supervisors, caplog):
    # One crashing request a minute: with server_restarts=1 the second crash would give up if restarts counted.
    recorder, clock = Recorder(), Clock()
    supervisor = clocked(recorder, RecoveryPolicy(server_restarts=1, backoff_s=60, max_backoff_s=60), clock)
    supervisors.append(supervisor)
    for _ in range(10):
        server_dies_after(supervisor, clock, recorder, 60)
    assert recorder.calls == ["restart"] * 10 and recorder.reasons == []
    assert caplog.text.count("restarting tritonserver at once (it served 60 s: not counted") == 10


def test_a_crash_loop_after_a_healthy_run_still_backs_off_and_gives_up(supervisors, caplog):
    recorder, clock = Recorder(), Clock()
    policy = RecoveryPolicy(server_restarts=2, healthy_s=30, **FAST)
    supervisor = clocked(recorder, policy, clock)
    supervisors.append(supervisor)
    server_dies_after(supervisor, clock, recorder, 29)  # within healthy_s of the start: counted (1 of 2)
    server_dies_after(supervisor, clock, recorder, 45)  # healthy: at once, uncounted, the window's tries forgotten
    server_dies_after(supervisor, clock, recorder, 2)  # a crash loop: counted (1 of 2), at once as a window's first
    server_dies_after(supervisor, clock, recorder, 2)  # counted (2 of 2), after the back-off
    server_dies_after(supervisor, clock, recorder, 2)  # past the budget
    assert recorder.calls == ["restart"] * 4
    assert len(recorder.reasons) == 1 and "server_restarts=2" in recorder.reasons[0]
    tries = [record.getMessage() for record in caplog.records if "restarting tritonserver" in record.getMessage()]
    assert "(try 1 of at most 2" in tries[0] and "at once (it served 45 s" in tries[1]
    assert "(try 1 of at most 2" in tries[2] and "in 0.0 s (try 2 of at most 2" in tries[3]


def test_restarts_turned_off_give_up_even_after_a_healthy_run(supervisors):
    recorder, clock = Recorder(), Clock()
    supervisor = clocked(recorder, RecoveryPolicy(server_restarts=0), clock)
    supervisors.append(supervisor)
    server_dies_after(supervisor, clock, recorder, 3600)
    assert recorder.calls == [] and "server_restarts=0" in recorder.reasons[0]


def test_a_worker_crashed_again_by_its_guilty_request_is_restarted_at_once_uncounted(supervisors):
    recorder, clock = Recorder(), Clock()
    supervisor = clocked(recorder, RecoveryPolicy(worker_restarts=1, **FAST), clock)
    supervisors.append(supervisor)

    def dies(served_s: float, guilty: bool) -> None:
        clock.now += served_s
        recorder.done.clear()
        supervisor.worker_exited(WorkerExited("double", 0, "was killed by SIGSEGV", guilty))
        assert recorder.done.wait(WAIT_S)
        until(lambda: not supervisor.busy)

    dies(1, False)  # counted: 1 of 1
    for _ in range(3):
        dies(1, True)  # the rerun of the request that crashed it: each at once, none counted
    assert recorder.calls == ["restart double/0"] * 4 and recorder.reasons == []
    dies(1, False)  # a crash of its own within seconds of a restart: past the budget
    assert recorder.calls == ["restart double/0"] * 4
    assert "worker_restarts=1" in recorder.reasons[0]


def test_a_model_reload_after_a_healthy_run_is_not_counted(supervisors):
    recorder, clock = Recorder(), Clock()
    supervisor = clocked(recorder, RecoveryPolicy(model_reloads=1, **FAST), clock)
    supervisors.append(supervisor)
    for _ in range(3):
        clock.now += 31
        recorder.done.clear()
        supervisor.model_lost("double")
        assert recorder.done.wait(WAIT_S)
        until(lambda: not supervisor.busy)
    assert recorder.calls == ["reload double"] * 3 and recorder.reasons == []


def test_healthy_s_is_checked():
    assert RecoveryPolicy().healthy_s == 30.0
    with pytest.raises(PyTritonValidationError, match="healthy_s"):
        RecoveryPolicy(healthy_s=-1)
