"""Metrics a callable publishes on tritonserver's ``/metrics``, beside Triton's own ``nv_*`` families.

Close to prometheus-client::

    from tritonrt.metrics import Counter, Gauge, Histogram

    TOKENS = Counter("app_tokens_total", "Tokens generated", labelnames=("kind",))
    QUEUE = Gauge("app_queue_depth", "Requests waiting in the callable's own queue")
    LATENCY = Histogram("app_decode_seconds", "Time to decode one image", buckets=(0.001, 0.01, 0.1, 1.0))

    def infer(requests):
        TOKENS.labels(kind="prompt").inc(17)
        with LATENCY.time():
            ...

and Triton Python backend's ``pb_utils.MetricFamily`` (``MetricFamily(name, description, kind).Metric(labels=...)``
with ``increment``, ``set``, ``observe``, ``value``) for code written for that backend.

Updates are kept in this process and travel to the backend with the next answer a worker sends (a batch's
reply): an update made inside the callable is on ``/metrics`` when its batch is answered; one made elsewhere (a
background thread) when the next batch is. Triton registers each family once for the whole server, so the same
name from several worker processes adds up (counters, histograms) or shows the last value set (gauges). Names are
published exactly as written (no ``_total`` appended); ``nv_`` and ``tritonrt_`` are Triton's and tritonrt's own.
``value()`` is this process's view.
"""

from __future__ import annotations

import enum
import logging
import math
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import NamedTuple

__all__ = [
    "DEFAULT_BUCKETS",
    "REGISTRY",
    "Counter",
    "Gauge",
    "Histogram",
    "Metric",
    "MetricFamily",
    "MetricKind",
    "MetricOp",
    "MetricUpdate",
    "Registry",
]

_logger = logging.getLogger("tritonrt.metrics")

# prometheus-client's default buckets (seconds), without +Inf (Triton adds it).
DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
MAX_PENDING_OBSERVATIONS = 65536  # per histogram child between two answers; more are dropped with a warning
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_RESERVED = ("nv_", "tritonrt_")


class MetricKind(enum.IntEnum):
    """Triton's TRITONSERVER_MetricKind (and the wire protocol's METRIC_* kinds)."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


class MetricOp(enum.IntEnum):
    """What an update does (the wire protocol's METRIC_ADD, METRIC_SET, METRIC_OBSERVE)."""

    ADD = 0
    SET = 1
    OBSERVE = 2


class MetricUpdate(NamedTuple):
    """One update of one metric, self-describing: what a METRICS message carries to the backend."""

    family_kind: int
    op: int
    value: float
    name: str
    description: str
    labels: tuple[tuple[str, str], ...]
    buckets: tuple[float, ...]


class _Family(NamedTuple):
    kind: MetricKind
    name: str
    description: str
    buckets: tuple[float, ...]


class _Child:
    """One label set of a family: its value in this process and what the backend has not been sent yet."""

    __slots__ = ("family", "labels", "value", "delta", "set_pending", "observations", "dropped")

    def __init__(self, family: _Family, labels: tuple[tuple[str, str], ...]):
        self.family, self.labels = family, labels
        self.value = 0.0
        self.delta = 0.0
        self.set_pending = False
        self.observations: list[float] = []
        self.dropped = 0


def _check_label(metric: str, label: object) -> None:
    if not isinstance(label, str) or not _LABEL.match(label) or label.startswith("__"):
        raise ValueError(f"metric {metric!r}: label name {label!r} is not a Prometheus label name")


def _finite(value: float, what: str) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{what}: {value!r} is not a finite number (Prometheus metrics take finite values)")
    return number


class Registry:
    """Every metric of this process, and the updates not yet sent. ``pending`` is read without the lock on the
    hot path (a worker checks it per answer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self._children: dict[tuple[str, tuple[tuple[str, str], ...]], _Child] = {}
        self._dirty: dict[_Child, None] = {}
        self.pending = False

    def family(
        self, kind: MetricKind, name: str, description: str, buckets: Sequence[float] = (), *, own: bool = False
    ) -> _Family:
        """The family ``name``, declared now or before with the same kind, description and buckets."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"metric name {name!r}: use letters, digits, '_' and ':', not starting with a digit")
        if not own and name.startswith(_RESERVED):
            raise ValueError(f"metric name {name!r}: the prefixes nv_ and tritonrt_ are Triton's and tritonrt's own")
        bounds = tuple(_finite(bound, f"metric {name!r}: bucket") for bound in buckets)
        if kind == MetricKind.HISTOGRAM:
            if not bounds or any(later <= earlier for earlier, later in zip(bounds, bounds[1:], strict=False)):
                raise ValueError(f"histogram {name!r}: buckets {list(bounds)} must be increasing, at least one")
        declared = _Family(kind, name, str(description), bounds)
        with self._lock:
            family = self._families.setdefault(name, declared)
        if family != declared:
            raise ValueError(
                f"metric {name!r} is declared already as {family.kind.name.lower()} {family.description!r}"
                f" (buckets {list(family.buckets)}): declare it once, with one kind, description and buckets"
            )
        return family

    def child(self, family: _Family, labels: Mapping[str, object]) -> _Child:
        """The metric of ``family`` with these labels (label values are turned into text)."""
        pairs = []
        for key, value in labels.items():
            _check_label(family.name, key)
            pairs.append((key, str(value)))
        key_ = (family.name, tuple(pairs))
        with self._lock:
            found = self._children.get(key_)
            if found is None:
                found = self._children[key_] = _Child(family, key_[1])
        return found

    def add(self, child: _Child, amount: float) -> None:
        amount = _finite(amount, f"metric {child.family.name!r}")
        if child.family.kind == MetricKind.HISTOGRAM:
            raise ValueError(f"histogram {child.family.name!r}: use observe(), not an increment")
        if child.family.kind == MetricKind.COUNTER and amount < 0:
            raise ValueError(f"counter {child.family.name!r}: increment by {amount}; a counter only goes up")
        with self._lock:
            child.value += amount
            child.delta += amount
            self._mark(child)

    def set(self, child: _Child, value: float) -> None:
        value = _finite(value, f"gauge {child.family.name!r}")
        with self._lock:
            child.value = value
            child.set_pending, child.delta = True, 0.0
            self._mark(child)

    def observe(self, child: _Child, value: float) -> None:
        value = _finite(value, f"histogram {child.family.name!r}")
        with self._lock:
            if len(child.observations) >= MAX_PENDING_OBSERVATIONS:
                child.dropped += 1
                return
            child.observations.append(value)
            self._mark(child)

    def _mark(self, child: _Child) -> None:
        self._dirty[child] = None
        self.pending = True

    def drain(self) -> list[MetricUpdate]:
        """The updates since the last drain, in order of first change; nothing is pending after."""
        with self._lock:
            dirty, self._dirty, self.pending = self._dirty, {}, False
            updates = []
            for child in dirty:
                family = child.family
                head = (family.name, family.description, child.labels, family.buckets)
                if family.kind == MetricKind.HISTOGRAM:
                    updates += [
                        MetricUpdate(family.kind, MetricOp.OBSERVE, value, *head) for value in child.observations
                    ]
                    child.observations = []
                    if child.dropped:
                        _logger.warning(
                            "metric %r: %d observations dropped (over %d between two answers): observe less often",
                            family.name, child.dropped, MAX_PENDING_OBSERVATIONS,
                        )  # fmt: skip
                        child.dropped = 0
                elif child.set_pending:
                    updates.append(MetricUpdate(family.kind, MetricOp.SET, child.value, *head))
                else:  # (an increment by 0 too: it makes the series exist)
                    updates.append(MetricUpdate(family.kind, MetricOp.ADD, child.delta, *head))
                child.delta, child.set_pending = 0.0, False
            return updates

    def _after_fork(self) -> None:
        """In a worker process forked from the service: what the parent counted is not the child's to send
        (every child would send it again); gauges keep their values, and a set gauge is sent by each child."""
        self._lock = threading.Lock()
        for child in list(self._dirty):
            child.delta, child.observations = 0.0, []
            if not child.set_pending:
                del self._dirty[child]
        self.pending = bool(self._dirty)


REGISTRY = Registry()
os.register_at_fork(after_in_child=REGISTRY._after_fork)


class _Base:
    _kind: MetricKind

    def __init__(
        self,
        name: str,
        documentation: str = "",
        labelnames: Iterable[str] = (),
        *,
        buckets: Sequence[float] = (),
        registry: Registry = REGISTRY,
        _own: bool = False,
    ):
        self._registry = registry
        self._family = registry.family(self._kind, name, documentation, buckets, own=_own)
        self._labelnames = tuple(labelnames)
        for label in self._labelnames:
            _check_label(name, label)
        self._child = None if self._labelnames else registry.child(self._family, {})

    def _labelled(self, values: tuple[object, ...], named: dict[str, object]) -> _Child:
        if values and named:
            raise ValueError(f"metric {self._family.name!r}: give label values by position or by name, not both")
        if values:
            named = dict(zip(self._labelnames, values, strict=False))
            count = len(values)
        else:
            count = len(named)
        if count != len(self._labelnames) or set(named) != set(self._labelnames):
            raise ValueError(
                f"metric {self._family.name!r} has labels {list(self._labelnames)}: give a value for each "
                f"(got {list(named) if named else list(values)})"
            )
        return self._registry.child(self._family, {name: named[name] for name in self._labelnames})

    def _unlabelled(self) -> _Child:
        if self._child is None:
            raise ValueError(
                f"metric {self._family.name!r} has labels {list(self._labelnames)}: call .labels(...) first"
            )
        return self._child


class _CounterChild:
    __slots__ = ("_registry", "_child")

    def __init__(self, registry: Registry, child: _Child):
        self._registry, self._child = registry, child

    def inc(self, amount: float = 1.0) -> None:
        """Add ``amount`` (>= 0)."""
        self._registry.add(self._child, amount)

    def value(self) -> float:
        """This process's total."""
        return self._child.value


class _GaugeChild(_CounterChild):
    __slots__ = ()

    def dec(self, amount: float = 1.0) -> None:
        self._registry.add(self._child, -amount)

    def set(self, value: float) -> None:
        self._registry.set(self._child, value)


class _HistogramChild:
    __slots__ = ("_registry", "_child")

    def __init__(self, registry: Registry, child: _Child):
        self._registry, self._child = registry, child

    def observe(self, value: float) -> None:
        self._registry.observe(self._child, value)

    @contextmanager
    def time(self) -> Iterator[None]:
        """Observe the seconds the ``with`` block takes."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.observe(time.perf_counter() - start)


class Counter(_Base):
    """A value that only goes up (requests, tokens, errors). Name it ``..._total``."""

    _kind = MetricKind.COUNTER

    def labels(self, *values: object, **named: object) -> _CounterChild:
        return _CounterChild(self._registry, self._labelled(values, named))

    def inc(self, amount: float = 1.0) -> None:
        self._registry.add(self._unlabelled(), amount)

    def value(self) -> float:
        return self._unlabelled().value


class Gauge(_Base):
    """A value that goes up and down (queue depth, memory in use, a model's version)."""

    _kind = MetricKind.GAUGE

    def labels(self, *values: object, **named: object) -> _GaugeChild:
        return _GaugeChild(self._registry, self._labelled(values, named))

    def inc(self, amount: float = 1.0) -> None:
        self._registry.add(self._unlabelled(), amount)

    def dec(self, amount: float = 1.0) -> None:
        self._registry.add(self._unlabelled(), -amount)

    def set(self, value: float) -> None:
        self._registry.set(self._unlabelled(), value)

    def value(self) -> float:
        return self._unlabelled().value


class Histogram(_Base):
    """Observations counted into buckets (durations, sizes). ``buckets``: upper bounds, increasing."""

    _kind = MetricKind.HISTOGRAM

    def __init__(
        self,
        name: str,
        documentation: str = "",
        labelnames: Iterable[str] = (),
        *,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
        registry: Registry = REGISTRY,
        _own: bool = False,
    ):
        super().__init__(name, documentation, labelnames, buckets=buckets, registry=registry, _own=_own)

    def labels(self, *values: object, **named: object) -> _HistogramChild:
        return _HistogramChild(self._registry, self._labelled(values, named))

    def observe(self, value: float) -> None:
        self._registry.observe(self._unlabelled(), value)

    @contextmanager
    def time(self) -> Iterator[None]:
        with _HistogramChild(self._registry, self._unlabelled()).time():
            yield


class MetricFamily:
    """Triton Python backend's ``pb_utils.MetricFamily``: ``MetricFamily(name, description, kind)`` and
    ``.Metric(labels={...}, buckets=[...])``."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind, *, registry: Registry = REGISTRY):
        self._name, self._description, self._kind = name, description, MetricKind(kind)
        self._registry = registry
        if self._kind != MetricKind.HISTOGRAM:
            registry.family(self._kind, name, description)

    def Metric(self, labels: Mapping[str, object] | None = None, buckets: Sequence[float] | None = None) -> Metric:  # noqa: N802  (pb_utils's name)
        if (buckets is None) != (self._kind != MetricKind.HISTOGRAM):
            raise ValueError(f"metric {self._name!r}: buckets are for a HISTOGRAM family, and it needs them")
        family = self._registry.family(self._kind, self._name, self._description, buckets or ())
        return Metric(self._registry, self._registry.child(family, dict(labels or {})))


class Metric:
    """One labelled metric of a :class:`MetricFamily` (pb_utils's ``Metric``)."""

    __slots__ = ("_registry", "_child")

    def __init__(self, registry: Registry, child: _Child):
        self._registry, self._child = registry, child

    def increment(self, value: float) -> None:
        self._registry.add(self._child, value)

    def set(self, value: float) -> None:
        if self._child.family.kind != MetricKind.GAUGE:
            raise ValueError(f"metric {self._child.family.name!r}: set() is for gauges; use increment()")
        self._registry.set(self._child, value)

    def observe(self, value: float) -> None:
        if self._child.family.kind != MetricKind.HISTOGRAM:
            raise ValueError(f"metric {self._child.family.name!r}: observe() is for histograms")
        self._registry.observe(self._child, value)

    def value(self) -> float:
        """This process's value (counters and gauges)."""
        return self._child.value
