"""The callable's metrics (tritonrt.metrics) on tritonserver's /metrics beside Triton's nv_* families, registered
through Triton's custom metrics API, and tritonrt's own per-model metrics; with worker threads and worker
processes (two processes' counts add up)."""

from __future__ import annotations

import re
import threading
import time
import urllib.request

import numpy as np
import pytest

from tritonrt.metrics import Counter, Gauge, Histogram, MetricFamily
from tritonrt.model_config import DynamicBatcher, ModelConfig, Tensor

pytestmark = pytest.mark.integration
WORKER_MODES = ("thread", "process")

TAG = Tensor(name="tag", dtype=np.int32, shape=(1,))
OUT = Tensor(name="out", dtype=np.int32, shape=(1,))
TOKENS = Counter("app_tokens_total", "Tokens the test model counted", ("model", "kind"))
DEPTH = Gauge("app_queue_depth", "What the test model set last")
ROWS = Histogram("app_rows", "Requests per call", ("model",), buckets=(1, 2, 4, 8))
# pb_utils's shape, as code written for Triton's Python backend declares it
CALLS = MetricFamily("app_calls_total", "Calls of the pb_utils-style model", MetricFamily.COUNTER)
SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")


def counting(requests):
    TOKENS.labels(model="counting", kind="prompt").inc(3 * len(requests))
    DEPTH.set(len(requests))
    ROWS.labels("counting").observe(len(requests))
    return [{"out": request["tag"]} for request in requests]


def pb_utils_style(requests):
    CALLS.Metric(labels={"model": "pb_utils_style"}).increment(1)
    return [{"out": request["tag"]} for request in requests]


def picky(requests):
    """Raises for a batch of several requests: tritonrt runs each alone (a rerun); alone each passes."""
    if len(requests) > 1:
        raise ValueError("only one at a time")
    return [{"out": request["tag"]} for request in requests]


@pytest.fixture(scope="module")
def server(start_triton):
    server = start_triton()
    one = ModelConfig(batching=False)
    server.triton.bind("counting", [counting, counting], [TAG], [OUT], config=one)
    server.triton.bind("pb_utils_style", pb_utils_style, [TAG], [OUT], config=one)
    slow_batcher = DynamicBatcher(max_queue_delay_microseconds=500_000)  # two requests sent together: one batch
    batched = ModelConfig(max_batch_size=4, batcher=slow_batcher)
    server.triton.bind("picky", picky, [TAG], [OUT], config=batched)
    return server


def scrape(server) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """/metrics as {(name, labels): value}."""
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    series = {}
    for line in text.splitlines():
        match = SERIES.match(line)
        if match and not line.startswith("#"):
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
            series[(match.group(1), labels)] = float(match.group(3))
    return series


def value(series, name: str, **labels: str) -> float:
    """The one series of ``name`` with (at least) these labels."""
    found = [v for (n, have), v in series.items() if n == name and set(labels.items()) <= have]
    assert len(found) == 1, f"{name}{labels}: {len(found)} series in {sorted(k for k in series if k[0] == name)}"
    return found[0]


def test_the_callables_metrics_are_on_tritons_metrics_endpoint(server):
    for tag in range(6):  # two instances (threads or processes): each counts what it served
        server.infer("http", "counting", {"tag": np.array([tag], np.int32)})
    series = scrape(server)
    assert value(series, "app_tokens_total", model="counting", kind="prompt") == 18
    assert value(series, "app_queue_depth") == 1
    assert value(series, "app_rows_count", model="counting") == 6
    assert value(series, "app_rows_bucket", model="counting", le="1") == 6
    assert value(series, "app_rows_sum", model="counting") == 6
    # Beside Triton's own: which Triton counts after the response left (ours are applied before), so it may lag.
    deadline = time.monotonic() + 10
    while value(series, "nv_inference_request_success", model="counting") < 6 and time.monotonic() < deadline:
        time.sleep(0.1)
        series = scrape(server)
    assert value(series, "nv_inference_request_success", model="counting") == 6
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    assert "# HELP app_tokens_total Tokens the test model counted" in text
    assert "# TYPE app_rows histogram" in text


def test_pb_utils_metric_families_work_the_same(server):
    for tag in range(3):
        server.infer("grpc", "pb_utils_style", {"tag": np.array([tag], np.int32)})
    assert value(scrape(server), "app_calls_total", model="pb_utils_style") == 3


def test_tritonrts_own_metrics_are_published_per_model(server):
    server.infer("http", "counting", {"tag": np.array([1], np.int32)})
    series = scrape(server)
    busy = [v for (n, labels), v in series.items() if n == "tritonrt_instance_busy_seconds_total"
            and ("model", "counting") in labels]  # fmt: skip
    assert len(busy) == 2 and sum(busy) > 0  # one series per instance, time spent on batches
    for counter in ("tritonrt_batch_reruns_total", "tritonrt_worker_reconnects_total",
                    "tritonrt_requests_cancelled_total", "tritonrt_worker_restarts_total"):  # fmt: skip
        assert value(series, counter, model="counting") == 0, counter  # published at 0 (with the first answer)


def test_a_batch_rerun_request_by_request_is_counted(server):
    # (the worker's counters of a model appear, at 0, with the first answer its process sends: with worker
    # processes picky's has sent none yet; with threads, another model's answer took them)
    reruns_before = [v for (n, labels), v in scrape(server).items()
                     if n == "tritonrt_batch_reruns_total" and ("model", "picky") in labels]  # fmt: skip
    assert reruns_before in ([], [0.0])
    outcomes: list[object] = []

    def send(tag: int) -> None:
        client = server.http_client()
        try:
            outcomes.append(server.infer("http", "picky", {"tag": np.array([[tag]], np.int32)}, client=client))
        finally:
            client.close()

    threads = [threading.Thread(target=send, args=(tag,)) for tag in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(outcomes) == 2  # both answered, each run alone
    series = scrape(server)
    batches = value(series, "nv_inference_exec_count", model="picky")
    reruns = value(series, "tritonrt_batch_reruns_total", model="picky")
    assert batches == 1, "the two requests were not batched together (the batcher waits 0.5 s for a second)"
    assert reruns == 1  # the one batch of two raised, and ran again request by request
