"""What the tuner varies: one candidate setting, the values each dimension may take, and the tuning file's form.

Example::

    start = Candidate(max_batch_size=64, max_queue_delay_us=100, preferred=False, instances=1, workers="thread")
    space = Space(max_batch_size=(8, 32, 64, 128), max_queue_delay_us=(0, 100, 1000), instances=(1, 2))
    space.values(start, "max_batch_size")   # (8, 32, 64, 128)
    start.replace("instances", 2).label      # "bs64 q100us 2i thread"
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["DIMENSIONS", "WORKER_MODES", "Candidate", "Space", "ladder"]

# The dimensions in the order the search walks them: the largest effect first. Instances (with the worker mode)
# lead: a callable's Python work holds the GIL, and where it bounds throughput only more instances in worker
# processes lift it, by up to the number of cores; a batch size moves a batching model's throughput by less.
DIMENSIONS = ("instances", "max_batch_size", "max_queue_delay_us", "preferred", "workers")
WORKER_MODES = ("thread", "process")


def ladder(max_batch_size: int) -> list[int]:
    """The preferred batch sizes of a candidate with ``preferred`` on: 4, 8, 16, ... below ``max_batch_size``,
    and it; empty below 8 (too few sizes to prefer among)."""
    if max_batch_size < 8:
        return []
    sizes = [size for size in (2**power for power in range(2, 20)) if size < max_batch_size]
    return [*sizes, max_batch_size]


@dataclasses.dataclass(frozen=True, slots=True)
class Candidate:
    """One setting of the service. ``max_batch_size`` 0: the model does not batch (the batch dimensions stay).

    ``preferred``: the dynamic batcher's preferred batch sizes are the powers of two from 4 below ``max_batch_size``
    and it: it sends a batch as soon as it reaches one of them instead of filling it within
    ``max_queue_delay_us``. Off, Triton forms the largest batch it can (it reports that as
    ``preferred_batch_size: [max_batch_size]``).
    """

    max_batch_size: int
    max_queue_delay_us: int
    preferred: bool
    instances: int
    workers: str = "thread"

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 0

    @property
    def preferred_batch_sizes(self) -> list[int]:
        return ladder(self.max_batch_size) if self.preferred else []

    @property
    def label(self) -> str:
        """A short name for tables and charts: ``bs64 q100us pref 2i thread``."""
        parts = [f"bs{self.max_batch_size}", f"q{self.max_queue_delay_us}us"] if self.batching else ["no batching"]
        if self.preferred_batch_sizes:
            parts.append("pref")
        parts += [f"{self.instances}i", self.workers]
        return " ".join(parts)

    def replace(self, dimension: str, value: Any) -> Candidate:
        """This candidate with one dimension changed (``preferred`` off where no ladder fits the batch size)."""
        changed = dataclasses.replace(self, **{dimension: value})
        if changed.preferred and not ladder(changed.max_batch_size):
            changed = dataclasses.replace(changed, preferred=False)
        return changed

    def tuning(self) -> dict[str, Any]:
        """The tuning file's content for this candidate (``src/<package>/tuning.json``)."""
        document: dict[str, Any] = {"instances": self.instances}
        if self.batching:
            document["max_batch_size"] = self.max_batch_size
            document["max_queue_delay_us"] = self.max_queue_delay_us
            document["preferred_batch_sizes"] = self.preferred_batch_sizes
        document["workers"] = self.workers  # always: a service's own default may be either mode
        return document


@dataclasses.dataclass(frozen=True, slots=True)
class Space:
    """The values tried per dimension; a dimension left empty keeps the starting candidate's value."""

    max_batch_size: tuple[int, ...] = ()
    max_queue_delay_us: tuple[int, ...] = ()
    preferred: tuple[bool, ...] = (False, True)
    instances: tuple[int, ...] = ()
    workers: tuple[str, ...] = ("thread",)

    def values(self, start: Candidate, dimension: str) -> tuple[Any, ...]:
        """The sorted values of ``dimension``, the starting candidate's own included.

        A model that does not batch has one value for each batching dimension: its own.
        """
        own = getattr(start, dimension)
        if not start.batching and dimension in ("max_batch_size", "max_queue_delay_us", "preferred"):
            return (own,)
        if dimension == "preferred" and not ladder(start.max_batch_size):
            return (False,)
        if dimension == "workers":
            chosen = tuple(self.workers)
            return chosen if own in chosen else (own, *chosen)
        return tuple(sorted({own, *getattr(self, dimension)}))
