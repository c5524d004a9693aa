"""What a worker and a backend instance agree on at the handshake: the worker's settings (sent in its WELCOME)
and the identity an instance must present (checked against its HELLO). See :mod:`tritonrt.proxy.listener`."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from tritonrt.proxy.regions import default_region_limit

__all__ = ["InstanceIdentity", "WorkerSettings"]


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    """What the worker tells the backend in its WELCOME, and how it waits itself.

    ``from_env()`` reads ``TRITONRT_SPIN_US`` and ``TRITONRT_WORKER_SPIN_US`` (microseconds, 0: never poll).
    Polling spares a wake-up per message where a core is free, and costs one where none is. The backend polls
    for a reply (50 us by default), and only while replies keep coming within that time: for slower models it
    sleeps at once. The worker waits for the next batch asleep (its wait is the clients' think time).
    """

    inline_threshold: int = 64 << 10  # tensors of this many bytes or more travel through shared memory
    spin_us: int = 50  # the backend polls this long for a reply before it sleeps (0: never)
    region_limit: int = dataclasses.field(default_factory=default_region_limit)
    worker_spin_us: int = 0  # this side polls this long for the next batch before it sleeps

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerSettings:
        """The defaults, with ``TRITONRT_SPIN_US`` and ``TRITONRT_WORKER_SPIN_US`` when set."""
        environ = os.environ if environ is None else environ
        values = {}
        for field, variable in (("spin_us", "TRITONRT_SPIN_US"), ("worker_spin_us", "TRITONRT_WORKER_SPIN_US")):
            raw = environ.get(variable, "").strip()
            if raw:
                if not raw.isdigit():
                    raise ValueError(f"{variable}={raw!r}: use a whole number of microseconds >= 0 (0: no polling)")
                values[field] = int(raw)
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class InstanceIdentity:
    """What a backend instance must present to be served."""

    model_name: str
    instance_index: int
    token: str
    decoupled: bool = False
    max_batch_size: int = 0
