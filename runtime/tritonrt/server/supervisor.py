"""Bring tritonserver and its models back when they fail, a bounded number of times; past that, give up.

Three faults are recovered, one at a time, on the supervisor's own thread:

- tritonserver exited without being asked to (killed, or crashed by a request): it is started again with the
  same models (:attr:`RecoveryPolicy.server_restarts`);
- a worker process of a model's instance died (segfault, ``os._exit``, OOM kill, or killed past the execution
  timeout): it is started again (:attr:`RecoveryPolicy.worker_restarts`, counted per instance) while the model
  serves on its other instances;
- a model's instance lost its connection to the model's worker while Triton still reports the model ready
  and no new instance connected (the backend dropped a connection it could not read, say): the model is
  unloaded and loaded again through Triton's repository API (:attr:`RecoveryPolicy.model_reloads`). Triton
  reports it not ready from the unload until the load ends. An instance that goes away while Triton unloads
  the model (someone with the token unloaded it) is no fault, nor is one replaced by a load of the model
  (unloaded and loaded on purpose: the new instances connect during the load).

Faults are typed events (:class:`ServerExited`, :class:`ModelLost`, :class:`WorkerExited`). Tries are counted
per fault over a sliding window; the first try of a window starts at once, each further one
waits twice as long as the one before (``backoff_s``, ``2 * backoff_s``, ... up to ``max_backoff_s``). When a
fault has used its tries, or a try fails and none is left, the supervisor calls ``give_up(reason)``: the owner
stops, and a service exits non-zero so that its orchestrator replaces it.

What a crash loop is: a process that dies again soon after it was brought back. One that served for
``healthy_s`` (30 s) since its last restart (or since the supervisor started) is brought back at once, that
restart is not counted, and the earlier tries of its window are forgotten (as Kubernetes resets a container's
crash back-off once it ran well). So is a worker process that died running a request that had crashed a worker
before (``WorkerExited.guilty``: that request failed, the crash says nothing of the worker). A budget of 0
still means no restart at all.

Example::

    supervisor = Supervisor(RecoveryPolicy(), restart_server=restart, reload_model=reload,
                            server_live=api.is_live, model_ready=api.is_model_ready,
                            model_connected=lambda name: models[name].connected(), give_up=stop_with_failure)
    process.register_on_exit(supervisor.server_exited)
    worker_on_peer_lost = lambda: supervisor.model_lost("double")
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping

from tritonrt.exceptions import PyTritonValidationError

__all__ = [
    "Fault",
    "ModelLost",
    "RecoveryPolicy",
    "ServerExited",
    "Supervisor",
    "WorkerExited",
    "describe_exit",
    "describe_status",
    "signal_name",
]

LOGGER = logging.getLogger("tritonrt.server")

SERVER_RESTARTS_VARIABLE = "TRITONRT_SERVER_RESTARTS"
MODEL_RELOADS_VARIABLE = "TRITONRT_MODEL_RELOADS"
WORKER_RESTARTS_VARIABLE = "TRITONRT_WORKER_RESTARTS"
# A worker also loses its peer when tritonserver itself dies, a moment before the server's exit is reported:
# a model's recovery first waits this long for the server to answer (or for that report).
_SERVER_GRACE_S = 5.0
# tritonrt's backend connects again for an instance's next batch by itself: a model whose instance lost its
# connection is reloaded only if it has not connected again within this time (under traffic it has, within
# milliseconds, and a reload would only make the model unavailable meanwhile).
RECONNECT_GRACE_S = 1.0
_POLL_S = 0.05


@dataclasses.dataclass(frozen=True)
class RecoveryPolicy:
    """How often tritonrt brings a failed tritonserver or model back before it gives up.

    ``server_restarts``: restarts of a tritonserver that exited unasked, within any ``window_s`` (0: none;
    the owner stops at the first exit). ``model_reloads``: reloads of one model whose instance lost its
    worker, within any ``window_s`` (0: none). ``worker_restarts``: restarts of one instance's worker process
    that died, within any ``window_s`` (0: none). Further tries wait ``backoff_s``, doubling, up to
    ``max_backoff_s``. A failure that comes ``healthy_s`` or more after the last restart of the same thing (or
    after the supervisor started) is no crash loop: it is recovered at once, uncounted, and the window's earlier
    tries are forgotten. ``from_env()`` reads ``TRITONRT_SERVER_RESTARTS``, ``TRITONRT_MODEL_RELOADS`` and
    ``TRITONRT_WORKER_RESTARTS``.

    Example::

        RecoveryPolicy(server_restarts=0)   # leave restarts to Docker or Kubernetes: stop at once
    """

    server_restarts: int = 3
    model_reloads: int = 3
    worker_restarts: int = 5
    window_s: float = 600.0
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    healthy_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("server_restarts", "model_reloads", "worker_restarts"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise PyTritonValidationError(f"RecoveryPolicy.{name}={value!r} must be a whole number >= 0.")
        for name in ("window_s", "backoff_s", "max_backoff_s", "healthy_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise PyTritonValidationError(f"RecoveryPolicy.{name}={value!r} must be a number of seconds >= 0.")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RecoveryPolicy:
        """The defaults, with ``TRITONRT_SERVER_RESTARTS``, ``TRITONRT_MODEL_RELOADS`` and
        ``TRITONRT_WORKER_RESTARTS`` when set."""
        environ = os.environ if environ is None else environ
        values = {}
        variables = {
            "server_restarts": SERVER_RESTARTS_VARIABLE,
            "model_reloads": MODEL_RELOADS_VARIABLE,
            "worker_restarts": WORKER_RESTARTS_VARIABLE,
        }
        for field, variable in variables.items():
            raw = environ.get(variable, "").strip()
            if raw:
                if not raw.isdigit():
                    raise PyTritonValidationError(f"{variable}={raw!r}: use a whole number >= 0 (0 turns it off).")
                values[field] = int(raw)
        return cls(**values)


@dataclasses.dataclass(frozen=True, slots=True)
class ServerExited:
    """tritonserver exited unasked with exit ``code`` (``at``: when it was reported, on the supervisor's clock)."""

    code: int
    at: float = dataclasses.field(default=0.0, compare=False)


@dataclasses.dataclass(frozen=True, slots=True)
class ModelLost:
    """An instance of model ``name`` lost its worker while the model should be serving."""

    name: str
    at: float = dataclasses.field(default=0.0, compare=False)


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerExited:
    """The worker process of instance ``instance_index`` of model ``model_name`` died; ``how`` says how.
    ``guilty``: it died running a request that had crashed a worker before (that request failed alone)."""

    model_name: str
    instance_index: int
    how: str
    guilty: bool = False
    at: float = dataclasses.field(default=0.0, compare=False)


Fault = ServerExited | ModelLost | WorkerExited


class _Budget:
    """The tries of one fault within the sliding window, the wait before the next one, and when what it
    recovers was last brought back (``restarted``: the supervisor's start until the first restart)."""

    def __init__(self, limit: int, policy: RecoveryPolicy, field: str, clock: Callable[[], float], started: float):
        self.limit = limit
        self.field = field  # the RecoveryPolicy field that sets the limit
        self._policy = policy
        self._clock = clock
        self._tries: collections.deque[float] = collections.deque()
        self.restarted = started

    def healthy_for(self, at: float) -> float | None:
        """How long it served before the failure reported ``at``, when that is long enough not to count."""
        served = at - self.restarted
        return served if self.limit and served >= self._policy.healthy_s else None

    def forget(self) -> None:
        self._tries.clear()

    def used(self) -> int:
        horizon = self._clock() - self._policy.window_s
        while self._tries and self._tries[0] < horizon:
            self._tries.popleft()
        return len(self._tries)

    def next_delay(self) -> float | None:
        """Seconds to wait before the next try, or None when the window's tries are used up."""
        used = self.used()
        if used >= self.limit:
            return None
        return 0.0 if not used else min(self._policy.backoff_s * 2 ** (used - 1), self._policy.max_backoff_s)

    def spend(self) -> int:
        self._tries.append(self._clock())
        return len(self._tries)


def signal_name(number: int) -> str:
    """``"SIGKILL"`` for 9; ``"signal 99"`` for a number no signal has."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_exit(code: int) -> str:
    """``"exit code 134 (SIGABRT)"``: a code above 128 names the signal that ended the process."""
    return f"exit code {code} ({signal_name(code - 128)})" if code > 128 else f"exit code {code}"


def describe_status(status: int) -> str:
    """A child's end as ``os.waitstatus_to_exitcode`` gives it: ``"was killed by SIGKILL"`` (negative),
    ``"exited with code 3"``."""
    return f"was killed by {signal_name(-status)}" if status < 0 else f"exited with code {status}"


class Supervisor:
    """Runs recoveries one at a time on its own thread; see the module's docstring.

    ``restart_server()`` starts tritonserver again with the bound models (None where the server is not
    ours); ``reload_model(name)`` unloads and loads a model; ``server_live()`` says whether the server
    answers, ``model_ready(name)`` whether it reports the model ready, ``model_connected(name)`` whether every
    instance of the model is connected to its worker (a model whose instances connect again within
    ``reconnect_grace_s`` is not reloaded); ``restart_worker(model, instance)`` starts a dead worker process
    again (None: a dead worker gives up); ``give_up(reason)`` is called once
    when a fault cannot be recovered. The callables raise to say that a try failed. ``clock`` (seconds) dates
    faults and restarts, for the windows and for ``healthy_s`` (tests pass their own).
    """

    def __init__(
        self,
        policy: RecoveryPolicy,
        *,
        restart_server: Callable[[], None] | None,
        reload_model: Callable[[str], None],
        server_live: Callable[[], bool],
        model_ready: Callable[[str], bool],
        give_up: Callable[[str], None],
        model_connected: Callable[[str], bool] = lambda name: False,
        reconnect_grace_s: float = RECONNECT_GRACE_S,
        restart_worker: Callable[[str, int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.policy = policy
        self._clock = clock
        self._started = clock()
        self._restart_server = restart_server
        self._reload_model = reload_model
        self._server_live = server_live
        self._model_ready = model_ready
        self._model_connected = model_connected
        self._reconnect_grace_s = reconnect_grace_s
        self._give_up = give_up
        self._restart_worker_process = restart_worker
        self._server_budget = self._budget(policy.server_restarts, "server_restarts")
        self._model_budgets: dict[str, _Budget] = {}
        self._worker_budgets: dict[tuple[str, int], _Budget] = {}
        self._events: collections.deque[Fault] = collections.deque()  # the head is being handled
        self._cv = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="tritonrt-supervisor", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """True while a recovery is waiting or under way."""
        with self._cv:
            return bool(self._events)

    def server_exited(self, code: int) -> None:
        """Report that tritonserver exited without being asked to (its exit code)."""
        with self._cv:
            # A server restarted by the recovery under way (the head of the queue) may die too: queue that.
            if self._closed or any(isinstance(fault, ServerExited) for fault in list(self._events)[1:]):
                return
            self._events.append(ServerExited(code, at=self._clock()))
            self._cv.notify_all()

    def model_lost(self, name: str) -> None:
        """Report that an instance of model ``name`` lost its worker while the model should be serving."""
        self._report(ModelLost(name))

    def worker_exited(self, fault: WorkerExited) -> None:
        """Report that an instance's worker process died (it is started again, within the policy)."""
        self._report(fault)

    def _report(self, fault: ModelLost | WorkerExited) -> None:
        with self._cv:
            if self._closed or fault in self._events or self._server_failing():
                return
            self._events.append(dataclasses.replace(fault, at=self._clock()))
            self._cv.notify_all()

    def close(self) -> None:
        """Stop the supervisor: a recovery that waits is dropped (one under way finishes its try)."""
        with self._cv:
            self._closed = True
            self._events.clear()
            self._cv.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=1)

    def _budget(self, limit: int, field: str) -> _Budget:
        return _Budget(limit, self.policy, field, self._clock, self._started)

    def _server_failing(self) -> bool:
        return any(isinstance(fault, ServerExited) for fault in self._events)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._events and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                fault = self._events[0]
            done: str | None = None
            try:
                done = self._recover(fault)
            except Exception as error:  # a bug in a recovery: stop rather than serve half broken
                LOGGER.exception("Recovering from a fault failed")
                self._give_up(f"tritonrt could not recover from a fault: {error}")
            with self._cv:
                if self._events and self._events[0] == fault:
                    self._events.popleft()
                if isinstance(fault, ServerExited):  # a restart loads every model again: earlier losses are moot
                    self._events = collections.deque(e for e in self._events if isinstance(e, ServerExited))
            # Reported once the fault is off the queue: a new fault of the same kind from here on is handled.
            if done is not None:
                LOGGER.warning("%s", done)

    def _recover(self, fault: Fault) -> str | None:
        if isinstance(fault, ServerExited):
            return self._restart(fault)
        if isinstance(fault, ModelLost):
            return self._reload(fault)
        return self._restart_worker(fault)

    def _wait(self, seconds: float) -> bool:
        """Sleep ``seconds``; True when the supervisor was closed meanwhile."""
        with self._cv:
            return self._cv.wait_for(lambda: self._closed, timeout=seconds) if seconds > 0 else self._closed

    def _server_failed(self) -> bool:
        with self._cv:
            return self._server_failing()

    def _retry(
        self,
        budget: _Budget,
        reason: str,
        doing: str,
        action: Callable[[], None],
        *,
        yields: bool,
        at: float,
        guilty: bool = False,
    ) -> bool:
        """The one backoff: try ``action()`` (``doing``: what it does, e.g. "restarting tritonserver") until it
        succeeds or the budget is used up, then give up naming ``reason``. ``yields``: a server that failed
        meanwhile ends the tries (its restart brings everything back). A failure reported ``at`` after a healthy
        run, or ``guilty`` (a request crashed it), is first tried at once and uncounted. True when it succeeded."""
        window = self.policy.window_s
        served = budget.healthy_for(at)
        if budget.limit and (served is not None or guilty):
            why = "a request that had crashed it before crashed it again" if guilty else f"it served {served:.0f} s"
            LOGGER.error("%s: %s at once (%s: not counted in RecoveryPolicy.%s)", reason, doing, why, budget.field)
            if yields and self._server_failed():
                return False
            if not guilty:
                budget.forget()  # a crash loop starts afresh from here
            try:
                action()
            except Exception as error:
                reason = f"{doing} failed: {error}"
            else:
                budget.restarted = self._clock()
                return not self._closed
        while (delay := budget.next_delay()) is not None:
            LOGGER.error(
                "%s: %s%s (try %d of at most %d in %.0f s)",
                reason, doing, f" in {delay:.1f} s" if delay else "", budget.used() + 1, budget.limit, window,
            )  # fmt: skip
            if self._wait(delay) or (yields and self._server_failed()):
                return False
            budget.spend()
            try:
                action()
            except Exception as error:
                reason = f"{doing} failed: {error}"
                continue
            budget.restarted = self._clock()
            return not self._closed
        self._give_up(
            f"{reason}; it was tried {budget.used()} time(s) in the last {window:.0f} s, the most the "
            f"RecoveryPolicy allows ({budget.field}={budget.limit})"
        )
        return False

    def _restart(self, fault: ServerExited) -> str | None:
        """Restart the server; the message that says it was done, if it was."""
        reason = f"tritonserver exited unexpectedly ({describe_exit(fault.code)})"
        restart_server = self._restart_server
        if restart_server is None:
            self._give_up(reason)
            return None
        started = time.monotonic()

        def restart() -> None:
            nonlocal started
            started = time.monotonic()
            restart_server()

        budget = self._server_budget
        if not self._retry(budget, reason, "restarting tritonserver", restart, yields=False, at=fault.at):
            return None
        return f"tritonserver restarted; its models are ready ({time.monotonic() - started:.1f} s)"

    def _restart_worker(self, fault: WorkerExited) -> str | None:
        """Start a dead worker process again; the message that says it was done, if it was."""
        reason = f"model {fault.model_name!r} instance {fault.instance_index}: {fault.how}"
        restart_worker = self._restart_worker_process
        if restart_worker is None:
            self._give_up(reason)
            return None
        key = (fault.model_name, fault.instance_index)
        limit = self.policy.worker_restarts
        budget = self._worker_budgets.get(key) or self._worker_budgets.setdefault(
            key, self._budget(limit, "worker_restarts")
        )
        started = time.monotonic()

        def restart() -> None:
            nonlocal started
            started = time.monotonic()
            restart_worker(fault.model_name, fault.instance_index)

        doing = "restarting its worker process"
        if not self._retry(budget, reason, doing, restart, yields=True, at=fault.at, guilty=fault.guilty):
            return None
        return (
            f"Model {fault.model_name!r} instance {fault.instance_index}: worker process restarted and ready again "
            f"({time.monotonic() - started:.1f} s)"
        )

    def _reload(self, fault: ModelLost) -> str | None:
        """Reload the model unless its loss was no fault; the message that says it was done, if it was."""
        name = fault.name
        deadline = time.monotonic() + _SERVER_GRACE_S
        while not self._server_live():
            if self._server_failed() or self._closed:
                return None  # the server's restart brings every model back
            if time.monotonic() > deadline:
                break
            time.sleep(_POLL_S)
        if not self._model_ready(name):  # being unloaded (or loaded) on purpose: its instances go away
            LOGGER.info("An instance of model %r went away while Triton does not serve the model: no fault", name)
            return None
        deadline = time.monotonic() + self._reconnect_grace_s
        while not self._model_connected(name):  # connected again for a batch, or loaded again on purpose
            if time.monotonic() > deadline:
                break
            if self._wait(_POLL_S) or self._server_failed():
                return None
        else:
            LOGGER.info("Model %r lost an instance's connection, and its instances are connected again: no fault", name)
            return None
        budget = self._model_budgets.get(name) or self._model_budgets.setdefault(
            name, self._budget(self.policy.model_reloads, "model_reloads")
        )
        reason = f"model {name!r} lost its connection to tritonserver (an instance of it went away)"
        started = time.monotonic()

        def reload() -> None:
            nonlocal started
            started = time.monotonic()
            self._reload_model(name)

        if not self._retry(budget, reason, f"reloading model {name!r}", reload, yields=True, at=fault.at):
            return None
        return f"Model {name!r} reloaded and ready again ({time.monotonic() - started:.1f} s)"
