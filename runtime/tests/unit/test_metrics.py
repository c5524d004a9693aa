"""tritonrt.metrics: the callable's metrics API (prometheus-client's shape and pb_utils's), what it refuses, and
the updates it drains for the backend (one per changed metric, in order; nothing twice; none across a fork)."""

from __future__ import annotations

import math
import os

import pytest

from tritonrt.metrics import (
    Counter,
    Gauge,
    Histogram,
    MetricFamily,
    MetricKind,
    MetricOp,
    MetricUpdate,
    Registry,
)
from tritonrt.proxy import wire


@pytest.fixture
def registry() -> Registry:
    return Registry()


def test_counter_updates_are_summed_per_label_set_until_drained(registry):
    tokens = Counter("app_tokens_total", "Tokens generated", ("kind",), registry=registry)
    tokens.labels(kind="prompt").inc(3)
    tokens.labels("prompt").inc()
    tokens.labels(kind="completion").inc(2.5)
    assert registry.pending
    assert registry.drain() == [
        MetricUpdate(MetricKind.COUNTER, MetricOp.ADD, 4.0, "app_tokens_total", "Tokens generated",
                     (("kind", "prompt"),), ()),
        MetricUpdate(MetricKind.COUNTER, MetricOp.ADD, 2.5, "app_tokens_total", "Tokens generated",
                     (("kind", "completion"),), ()),
    ]  # fmt: skip
    assert not registry.pending and registry.drain() == []
    assert tokens.labels(kind="prompt").value() == 4.0  # this process's total survives the drain


def test_a_gauge_sends_its_value_once_set_and_its_change_otherwise(registry):
    depth = Gauge("app_queue_depth", registry=registry)
    depth.inc(2)
    depth.dec()
    assert [(u.op, u.value) for u in registry.drain()] == [(MetricOp.ADD, 1.0)]
    depth.set(7)
    depth.inc()
    assert [(u.op, u.value) for u in registry.drain()] == [(MetricOp.SET, 8.0)]
    assert depth.value() == 8.0


def test_a_histogram_sends_every_observation_with_its_buckets(registry):
    latency = Histogram("app_latency_seconds", "Latency", buckets=(0.1, 0.5, 1.0), registry=registry)
    latency.observe(0.2)
    with latency.time():
        pass
    updates = registry.drain()
    assert [u.op for u in updates] == [MetricOp.OBSERVE, MetricOp.OBSERVE]
    assert updates[0].value == 0.2 and 0 <= updates[1].value < 0.1
    assert updates[0].buckets == (0.1, 0.5, 1.0)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda r: Counter("2bad", registry=r), "not starting with a digit"),
        (lambda r: Counter("nv_inference_count", registry=r), "Triton's and tritonrt's own"),
        (lambda r: Counter("tritonrt_x_total", registry=r), "Triton's and tritonrt's own"),
        (lambda r: Counter("app_x_total", labelnames=("__x",), registry=r), "not a Prometheus label name"),
        (lambda r: Histogram("app_h", buckets=(1.0, 0.5), registry=r), "must be increasing"),
        (lambda r: Histogram("app_h", buckets=(), registry=r), "at least one"),
        (lambda r: Histogram("app_h", buckets=(0.1, math.inf), registry=r), "not a finite number"),
    ],
)
def test_bad_declarations_are_refused_with_what_to_change(registry, make, match):
    with pytest.raises(ValueError, match=match):
        make(registry)


def test_bad_updates_are_refused_and_nothing_is_sent(registry):
    count = Counter("app_c_total", registry=registry)
    with pytest.raises(ValueError, match="a counter only goes up"):
        count.inc(-1)
    with pytest.raises(ValueError, match="not a finite number"):
        Gauge("app_g", registry=registry).set(math.nan)
    labelled = Counter("app_l_total", labelnames=("model",), registry=registry)
    with pytest.raises(ValueError, match=r"call \.labels\(...\) first"):
        labelled.inc()
    with pytest.raises(ValueError, match="give a value for each"):
        labelled.labels(model="a", extra="b")
    assert registry.drain() == []


def test_a_name_is_one_family_declared_once(registry):
    first = Counter("app_same_total", "Same", registry=registry)
    again = Counter("app_same_total", "Same", registry=registry)  # a module imported twice, a notebook cell run again
    first.inc()
    again.inc()
    assert registry.drain()[0].value == 2.0
    with pytest.raises(ValueError, match="declared already as counter"):
        Gauge("app_same_total", "Same", registry=registry)


def test_pb_utils_metric_family(registry):
    family = MetricFamily("app_requests_total", "Requests", MetricFamily.COUNTER, registry=registry)
    metric = family.Metric(labels={"model": "m", "version": 1})
    metric.increment(2)
    assert metric.value() == 2.0
    with pytest.raises(ValueError, match="set\\(\\) is for gauges"):
        metric.set(1)
    hist = MetricFamily("app_sizes", "Sizes", MetricFamily.HISTOGRAM, registry=registry)
    with pytest.raises(ValueError, match="buckets are for a HISTOGRAM family"):
        hist.Metric(labels={})
    hist.Metric(labels={}, buckets=[1, 10]).observe(3)
    assert [(u.name, u.op, u.labels) for u in registry.drain()] == [
        ("app_requests_total", MetricOp.ADD, (("model", "m"), ("version", "1"))),
        ("app_sizes", MetricOp.OBSERVE, ()),
    ]


def test_kinds_and_operations_are_the_wire_protocols():
    assert [MetricKind.COUNTER, MetricKind.GAUGE, MetricKind.HISTOGRAM] == [
        wire.METRIC_COUNTER, wire.METRIC_GAUGE, wire.METRIC_HISTOGRAM
    ]  # fmt: skip
    assert [MetricOp.ADD, MetricOp.SET, MetricOp.OBSERVE] == [wire.METRIC_ADD, wire.METRIC_SET, wire.METRIC_OBSERVE]


def test_a_forked_child_sends_what_it_counts_not_what_its_parent_had_pending(registry):
    counter = Counter("app_fork_total", registry=registry)
    gauge = Gauge("app_fork_gauge", registry=registry)
    counter.inc(5)
    gauge.set(3)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what the fork hook leaves (the module's REGISTRY runs it; this one by hand)
        registry._after_fork()
        counter.inc()
        os.write(write, repr([(u.name, u.op, u.value) for u in registry.drain()]).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child == repr([("app_fork_gauge", MetricOp.SET, 3.0), ("app_fork_total", MetricOp.ADD, 1.0)])
    assert [(u.name, u.value) for u in registry.drain()] == [("app_fork_total", 5.0), ("app_fork_gauge", 3.0)]
