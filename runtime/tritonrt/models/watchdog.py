"""The execution timeout: a batch that runs longer than the model's timeout is failed, and its worker dealt with.

One daemon thread per model with a timeout reads each instance's :class:`~tritonrt.models.instance.CallSlot`
a few times a second; a batch seen past the timeout at two looks in a row is expired with the instance's
``expire`` (a worker process is killed and replaced; a worker thread, which cannot be stopped, stops the service).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from tritonrt.models.instance import CallState, InstanceWorker

__all__ = ["Watchdog"]

_MAX_PERIOD_S = 0.1


class Watchdog:
    """Watch ``instances`` of model ``model_name`` for batches running past ``timeout_s``; :meth:`close` ends it."""

    def __init__(self, model_name: str, instances: Sequence[InstanceWorker], timeout_s: float):
        self.timeout_s = timeout_s
        self._instances = list(instances)
        self._closed = threading.Event()
        self._period_s = min(_MAX_PERIOD_S, timeout_s / 10)
        self._thread = threading.Thread(target=self._run, name=f"tritonrt-{model_name}-watchdog", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=1)

    def _run(self) -> None:
        overdue: dict[int, int] = {}  # instance -> the batch seen past the timeout at the last look
        while not self._closed.wait(self._period_s):
            for index, instance in enumerate(self._instances):
                running = instance.slot.read()
                if running.state is not CallState.CALLING or running.elapsed_s <= self.timeout_s:
                    overdue.pop(index, None)
                elif overdue.get(index) != running.seq:
                    overdue[index] = running.seq  # expired at the next look if still running: never on one read
                else:
                    instance.expire(running, self.timeout_s)
