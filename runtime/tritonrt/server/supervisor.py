"""Bring tritonserver and its models back when they fail, a bounded number of times; past that, give up.

Two faults are recovered, one at a time, on the supervisor's own thread:

- tritonserver exited without being asked to (killed, or crashed by a request): it is started again with the
  same models (:attr:`RecoveryPolicy.server_restarts`);
- a model's instance lost its connection to the model's worker while Triton still reports the model ready
  and no new instance connected (the backend dropped a connection it could not read, say): the model is
  unloaded and loaded again through Triton's repository API (:attr:`RecoveryPolicy.model_reloads`). Triton
  reports it not ready from the unload until the load ends. An instance that goes away while Triton unloads
  the model (someone with the token unloaded it) is no fault, nor is one replaced by a load of the model
  (unloaded and loaded on purpose: the new instances connect during the load).

Tries are counted per fault over a sliding window; the first try of a window starts at once, each further one
waits twice as long as the one before (``backoff_s``, ``2 * backoff_s``, ... up to ``max_backoff_s``). When a
fault has used its tries, or a try fails and none is left, the supervisor calls ``give_up(reason)``: the owner
stops, and a service exits non-zero so that its orchestrator replaces it.

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

__all__ = ["RecoveryPolicy", "Supervisor", "describe_exit"]

LOGGER = logging.getLogger("tritonrt.server")

SERVER_RESTARTS_VARIABLE = "TRITONRT_SERVER_RESTARTS"
MODEL_RELOADS_VARIABLE = "TRITONRT_MODEL_RELOADS"
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
    worker, within any ``window_s`` (0: none). Further tries wait ``backoff_s``, doubling, up to
    ``max_backoff_s``. ``from_env()`` reads ``TRITONRT_SERVER_RESTARTS`` and ``TRITONRT_MODEL_RELOADS``.

    Example::

        RecoveryPolicy(server_restarts=0)   # leave restarts to Docker or Kubernetes: stop at once
    """

    server_restarts: int = 3
    model_reloads: int = 3
    window_s: float = 600.0
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("server_restarts", "model_reloads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise PyTritonValidationError(f"RecoveryPolicy.{name}={value!r} must be a whole number >= 0.")
        for name in ("window_s", "backoff_s", "max_backoff_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise PyTritonValidationError(f"RecoveryPolicy.{name}={value!r} must be a number of seconds >= 0.")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RecoveryPolicy:
        """The defaults, with ``TRITONRT_SERVER_RESTARTS`` and ``TRITONRT_MODEL_RELOADS`` when set."""
        environ = os.environ if environ is None else environ
        values = {}
        variables = {"server_restarts": SERVER_RESTARTS_VARIABLE, "model_reloads": MODEL_RELOADS_VARIABLE}
        for field, variable in variables.items():
            raw = environ.get(variable, "").strip()
            if raw:
                if not raw.isdigit():
                    raise PyTritonValidationError(f"{variable}={raw!r}: use a whole number >= 0 (0 turns it off).")
                values[field] = int(raw)
        return cls(**values)


class _Budget:
    """The tries of one fault within the sliding window, and the wait before the next one."""

    def __init__(self, limit: int, policy: RecoveryPolicy):
        self.limit = limit
        self._policy = policy
        self._tries: collections.deque[float] = collections.deque()

    def used(self) -> int:
        horizon = time.monotonic() - self._policy.window_s
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
        self._tries.append(time.monotonic())
        return len(self._tries)


def describe_exit(code: int) -> str:
    """``"exit code 134 (SIGABRT)"``: a code above 128 names the signal that ended the process."""
    if code > 128:
        try:
            return f"exit code {code} ({signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"exit code {code}"


class Supervisor:
    """Runs recoveries one at a time on its own thread; see the module's docstring.

    ``restart_server()`` starts tritonserver again with the bound models (None where the server is not
    ours); ``reload_model(name)`` unloads and loads a model; ``server_live()`` says whether the server
    answers, ``model_ready(name)`` whether it reports the model ready, ``model_connected(name)`` whether every
    instance of the model is connected to its worker (a model whose instances connect again within
    ``reconnect_grace_s`` is not reloaded); ``give_up(reason)`` is called once
    when a fault cannot be recovered. The callables raise to say that a try failed.
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
    ):
        self.policy = policy
        self._restart_server = restart_server
        self._reload_model = reload_model
        self._server_live = server_live
        self._model_ready = model_ready
        self._model_connected = model_connected
        self._reconnect_grace_s = reconnect_grace_s
        self._give_up = give_up
        self._server_budget = _Budget(policy.server_restarts, policy)
        self._model_budgets: dict[str, _Budget] = {}
        self._events: collections.deque[tuple[str, str]] = collections.deque()  # the head is being handled
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
            if self._closed or any(kind == "server" for kind, _ in list(self._events)[1:]):
                return
            self._events.append(("server", str(code)))
            self._cv.notify_all()

    def model_lost(self, name: str) -> None:
        """Report that an instance of model ``name`` lost its worker while the model should be serving."""
        with self._cv:
            if self._closed or ("model", name) in self._events or self._has("server"):
                return
            self._events.append(("model", name))
            self._cv.notify_all()

    def close(self) -> None:
        """Stop the supervisor: a recovery that waits is dropped (one under way finishes its try)."""
        with self._cv:
            self._closed = True
            self._events.clear()
            self._cv.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=1)

    def _has(self, kind: str) -> bool:
        return any(queued == kind for queued, _ in self._events)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._events and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                kind, subject = self._events[0]
            done: str | None = None
            try:
                done = self._restart(int(subject)) if kind == "server" else self._reload(subject)
            except Exception as error:  # a bug in a recovery: stop rather than serve half broken
                LOGGER.exception("Recovering from a fault failed")
                self._give_up(f"tritonrt could not recover from a fault: {error}")
            with self._cv:
                if self._events and self._events[0] == (kind, subject):
                    self._events.popleft()
                if kind == "server":  # a restart loads every model again: earlier losses are moot
                    self._events = collections.deque(e for e in self._events if e[0] == "server")
            # Reported once the fault is off the queue: a new fault of the same kind from here on is handled.
            if done is not None:
                LOGGER.warning("%s", done)

    def _wait(self, seconds: float) -> bool:
        """Sleep ``seconds``; True when the supervisor was closed meanwhile."""
        with self._cv:
            return self._cv.wait_for(lambda: self._closed, timeout=seconds) if seconds > 0 else self._closed

    def _server_failed(self) -> bool:
        with self._cv:
            return self._has("server")

    def _restart(self, code: int) -> str | None:
        """Restart the server; the message that says it was done, if it was."""
        budget, window = self._server_budget, self.policy.window_s
        reason = f"tritonserver exited unexpectedly ({describe_exit(code)})"
        if self._restart_server is None:
            self._give_up(reason)
            return None
        while (delay := budget.next_delay()) is not None:
            LOGGER.error(
                "%s: restarting it%s (restart %d of at most %d in %.0f s)",
                reason, f" in {delay:.1f} s" if delay else "", budget.used() + 1, budget.limit, window,
            )  # fmt: skip
            if self._wait(delay):
                return None
            budget.spend()
            started = time.monotonic()
            try:
                self._restart_server()
            except Exception as error:
                reason = f"restarting tritonserver failed: {error}"
                continue
            if self._closed:
                return None
            return f"tritonserver restarted; its models are ready ({time.monotonic() - started:.1f} s)"
        self._give_up(
            f"{reason}; it was restarted {budget.used()} time(s) in the last {window:.0f} s, the most the "
            f"RecoveryPolicy allows (server_restarts={budget.limit})"
        )
        return None

    def _reload(self, name: str) -> str | None:
        """Reload the model unless its loss was no fault; the message that says it was done, if it was."""
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
        budget = self._model_budgets.setdefault(name, _Budget(self.policy.model_reloads, self.policy))
        reason = f"model {name!r} lost its connection to tritonserver (an instance of it went away)"
        while (delay := budget.next_delay()) is not None:
            LOGGER.error(
                "%s: reloading it%s (reload %d of at most %d in %.0f s)",
                reason, f" in {delay:.1f} s" if delay else "", budget.used() + 1, budget.limit, self.policy.window_s,
            )  # fmt: skip
            if self._wait(delay) or self._server_failed():
                return None
            budget.spend()
            started = time.monotonic()
            try:
                self._reload_model(name)
            except Exception as error:
                reason = f"reloading model {name!r} failed: {error}"
                continue
            return f"Model {name!r} reloaded and ready again ({time.monotonic() - started:.1f} s)"
        self._give_up(
            f"{reason}; it was reloaded {budget.used()} time(s) in the last {self.policy.window_s:.0f} s, the "
            f"most the RecoveryPolicy allows (model_reloads={budget.limit})"
        )
        return None
