"""One OpenTelemetry trace from a client's span through Triton's to the callable's, collected by a real OTLP/HTTP
receiver (a local HTTP server decoding ExportTraceServiceRequest) to which Triton and the worker export."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import numpy as np
import pytest

otel_trace = pytest.importorskip("opentelemetry.trace", reason="needs tritonrt[telemetry] (opentelemetry)")
from google.protobuf import json_format  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402

from tritonrt import bls  # noqa: E402
from tritonrt.client import DecoupledModelClient, ModelClient  # noqa: E402
from tritonrt.model_config import ModelConfig, Tensor  # noqa: E402
from tritonrt.proxy import telemetry  # noqa: E402

pytestmark = pytest.mark.integration
WORKER_MODES = ("thread", "process")

COLLECT_TIMEOUT_S = 60
WORKER_SPAN = "tritonrt_execute"
CALLABLE_SPAN = "double"
BLS_SPAN = "tritonrt_bls"


class Span(NamedTuple):
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span


def _ids_to_base64(value: object) -> object:
    """OTLP/JSON writes trace and span ids in hex where protobuf's JSON mapping has base64: convert them."""
    if isinstance(value, dict):
        return {
            key: base64.b64encode(bytes.fromhex(item)).decode() if key in _ID_FIELDS else _ids_to_base64(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_ids_to_base64(item) for item in value]
    return value


_ID_FIELDS = {"traceId", "spanId", "parentSpanId"}


def decode(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    """An export in OTLP/HTTP's protobuf (Python's exporter) or JSON encoding (Triton's C++ exporter)."""
    request = ExportTraceServiceRequest()
    if content_type.startswith("application/json"):
        json_format.ParseDict(_ids_to_base64(json.loads(body)), request, ignore_unknown_fields=True)
    else:
        request.ParseFromString(body)
    return request


class Receiver:
    """An OTLP/HTTP trace receiver on a free local port: every span it was sent."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.add(decode(body, self.headers.get("Content-Type", "")))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def add(self, request: ExportTraceServiceRequest) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            service = attributes.get("service.name", "")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        Span(service, span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex())
                    )
        with self._lock:
            self.spans.extend(spans)

    def trace(self, trace_id: str) -> list[Span]:
        with self._lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def wait_for(self, trace_id: str, complete: Callable[[list[Span]], bool]) -> list[Span]:
        """The trace's spans once ``complete`` says they are all there, or at the deadline (exporters send in
        batches, Triton's every few seconds)."""
        deadline = time.monotonic() + COLLECT_TIMEOUT_S
        while True:
            spans = self.trace(trace_id)
            if complete(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)

    def next_worker_span(self, seen: int) -> Span | None:
        """The first worker span after the ``seen`` ones received so far (None at the deadline)."""
        deadline = time.monotonic() + COLLECT_TIMEOUT_S
        while time.monotonic() < deadline:
            with self._lock:
                workers = [span for span in self.spans if span.name == WORKER_SPAN]
            if len(workers) > seen:
                return workers[seen]
            time.sleep(0.05)
        return None

    def worker_spans(self) -> int:
        with self._lock:
            return sum(span.name == WORKER_SPAN for span in self.spans)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def traced_double(requests):
    responses = []
    for request in requests:
        with request.traced_span(CALLABLE_SPAN):
            responses.append({"y": request["x"] * 2})
    return responses


def traced_pipeline(requests):
    """Calls traced_double by BLS: the call's span, and the callee's spans under it, join the request's trace."""
    return [{"y": bls.infer("traced_double", x=request["x"])["y"]} for request in requests]


def traced_countdown(requests):
    """Decoupled: three responses per request, the work in a traced span."""
    starts = []
    for request in requests:
        with request.traced_span(CALLABLE_SPAN):
            starts.append(request["x"] * 0 + 3)
    for step in range(3):
        yield [{"y": start - step} for start in starts]


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def worker_tracer(receiver) -> Iterator[None]:
    """The callables' tracer, set as a PyTriton program sets it; exporting each span as it ends."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.url)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(telemetry, "_tracer", None)
        telemetry.set_telemetry_tracer(provider.get_tracer("tritonrt-tests"))
        yield
    provider.shutdown()


@pytest.fixture(scope="module")
def server(start_triton, receiver, worker_tracer):
    server = start_triton(
        trace_config=[
            "mode=opentelemetry",
            f"opentelemetry,url={receiver.url}",
            "opentelemetry,resource=service.name=triton-under-test",
            "rate=1",
            "level=TIMESTAMPS",
        ]
    )
    server.triton.bind(
        "traced_double",
        traced_double,
        [Tensor(name="x", dtype=np.float32, shape=(-1,))],
        [Tensor(name="y", dtype=np.float32, shape=(-1,))],
        config=ModelConfig(max_batch_size=8),
    )
    server.triton.bind(
        "traced_pipeline",
        traced_pipeline,
        [Tensor(name="x", dtype=np.float32, shape=(-1,))],
        [Tensor(name="y", dtype=np.float32, shape=(-1,))],
        config=ModelConfig(max_batch_size=8),
    )
    server.triton.bind(
        "traced_countdown",
        traced_countdown,
        [Tensor(name="x", dtype=np.float32, shape=(-1,))],
        [Tensor(name="y", dtype=np.float32, shape=(-1,))],
        config=ModelConfig(max_batch_size=8, decoupled=True),
    )
    return server


@pytest.fixture
def client_tracer():
    """The caller's own tracer (its spans need not be exported: the test knows their ids)."""
    provider = TracerProvider()
    yield provider.get_tracer("tritonrt-tests-client")
    provider.shutdown()


def call_in_span(server, client_tracer, protocol: str) -> Any:
    """One call from inside a client span; the span."""
    x = np.arange(3, dtype=np.float32)
    if protocol == "grpc-stream":
        with DecoupledModelClient(f"grpc://{server.grpc_url}", "traced_countdown") as stream_client:
            with client_tracer.start_as_current_span(f"client-{protocol}") as client_span:
                steps = [response["y"] for response in stream_client.infer_sample(x=x)]
        np.testing.assert_array_equal(np.stack(steps), [[3, 3, 3], [2, 2, 2], [1, 1, 1]])
    else:
        url = server.http_url if protocol == "http" else f"grpc://{server.grpc_url}"
        with ModelClient(url, "traced_double") as client:
            with client_tracer.start_as_current_span(f"client-{protocol}") as client_span:
                result = client.infer_sample(x=x)
        np.testing.assert_array_equal(result["y"], x * 2)
    return client_span


@pytest.mark.parametrize("protocol", ["http", "grpc", "grpc-stream"])
def test_one_trace_runs_from_the_client_through_triton_to_the_callable(server, receiver, client_tracer, protocol):
    # Triton 24.10's gRPC frontend now and then starts a fresh trace instead of continuing the client's (its
    # InferRequest span then has no parent; seen over gRPC in a few of about 20 runs of this module, not over
    # HTTP): the call is made again, at most 3 times, until the worker's span joins the client's trace.
    for _ in range(3):
        seen = receiver.worker_spans()
        client_span = call_in_span(server, client_tracer, protocol)
        worker = receiver.next_worker_span(seen)
        if worker is not None and worker.trace_id == f"{client_span.get_span_context().trace_id:032x}":
            break
    context = client_span.get_span_context()
    trace_id, client_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"

    # Over a gRPC stream Triton ends (and exports) its request span only when the stream ends, which a
    # DecoupledModelClient keeps open: seen missing for over 60 s in 2 of about 20 runs. There the test checks the
    # trace id and the spans below Triton's model span, which Triton exports as the request completes.
    root_expected = protocol != "grpc-stream"

    def complete(spans: list[Span]) -> bool:
        """The worker's and the callable's spans, the worker's parent, and a Triton span continuing the client's."""
        ids = {span.span_id for span in spans}
        workers = [span for span in spans if span.name == WORKER_SPAN]
        return (
            any(span.name == CALLABLE_SPAN for span in spans)
            and all(span.parent_id in ids for span in workers)
            and bool(workers)
            and (not root_expected or any(span.parent_id == client_id for span in spans))
        )

    spans = receiver.wait_for(trace_id, complete)
    by_id = {span.span_id: span for span in spans}
    triton_spans = [span for span in spans if span.service == "triton-under-test"]
    assert triton_spans, f"Triton exported no span of the client's trace {trace_id}; received: {receiver.spans}"
    if root_expected:
        triton_roots = [span for span in triton_spans if by_id.get(span.parent_id) not in triton_spans]
        assert {span.parent_id for span in triton_roots} == {client_id}, "Triton's trace continues the client's span"
    (worker,) = [span for span in spans if span.name == WORKER_SPAN]
    assert by_id[worker.parent_id] in triton_spans, "the worker's span is a child of one of Triton's"
    (inner,) = [span for span in spans if span.name == CALLABLE_SPAN]
    assert inner.parent_id == worker.span_id, "request.traced_span opens a child of the worker's span"


def test_a_call_and_its_callee_join_the_callers_trace(server, receiver, client_tracer):
    """A BLS call is a span (tritonrt_bls) under the caller's worker span; Triton traces the callee's request as a
    child of the caller's (as for the Python backend's calls): its model span sits under the caller's model span,
    with the callee's worker and callable spans below it, all in the client's trace."""
    x = np.arange(3, dtype=np.float32)
    with ModelClient(server.http_url, "traced_pipeline") as client:
        with client_tracer.start_as_current_span("client-bls") as client_span:
            np.testing.assert_array_equal(client.infer_sample(x=x)["y"], x * 2)
    trace_id = f"{client_span.get_span_context().trace_id:032x}"

    def named(spans: list[Span], name: str) -> list[Span]:
        return [span for span in spans if span.name == name]

    def complete(spans: list[Span]) -> bool:
        return bool(named(spans, BLS_SPAN) and named(spans, CALLABLE_SPAN) and named(spans, "traced_double"))

    spans = receiver.wait_for(trace_id, complete)
    by_id = {span.span_id: span for span in spans}
    tree = "; ".join(f"{span.service}/{span.name} {span.span_id[:6]}<-{span.parent_id[:6]}" for span in spans)
    (call,) = named(spans, BLS_SPAN)
    assert by_id[call.parent_id].name == WORKER_SPAN, f"the call's span is a child of the caller's worker span: {tree}"
    (callee_model,) = named(spans, "traced_double")
    assert by_id[callee_model.parent_id].name == "traced_pipeline", f"the callee's model span: {tree}"
    (callee_work,) = named(spans, CALLABLE_SPAN)
    chain, span = [], callee_work
    while span.parent_id in by_id:
        span = by_id[span.parent_id]
        chain.append(span.name)
    assert chain[:3] == [WORKER_SPAN, "traced_double", "traced_pipeline"], f"the callee's work: {tree}"


def test_without_a_tracer_set_one_is_built_from_the_trace_config(receiver):
    """The tracer tritonrt builds (a fresh process: the global provider is set once per process) exports to the
    trace config's url with its resource attributes, and a worker's end flushes it."""
    program = (
        "from tritonrt.proxy import telemetry\n"
        "from tritonrt.triton import _start_callable_tracing\n"
        f"_start_callable_tracing(['mode=opentelemetry', 'opentelemetry,url={receiver.url}',\n"
        "                         'opentelemetry,resource=service.name=built-by-tritonrt'])\n"
        "with telemetry.get_telemetry_tracer().start_as_current_span('built') as span:\n"
        "    print(format(span.get_span_context().trace_id, '032x'))\n"
        "telemetry.flush_spans()\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    trace_id = result.stdout.strip()
    (span,) = receiver.wait_for(trace_id, bool)
    assert (span.name, span.service) == ("built", "built-by-tritonrt")
