"""The callables' spans (tritonrt.proxy.telemetry) and the clients' traceparent, without a server."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs tritonrt[telemetry] (opentelemetry)")
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from tritonrt.client._tracing import add_trace_headers  # noqa: E402
from tritonrt.proxy import telemetry  # noqa: E402
from tritonrt.proxy.types import Request  # noqa: E402

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRITON_CONTEXT = f'{{"traceparent":"00-{TRACE_ID}-{PARENT_ID}-01"}}'


@pytest.fixture
def exported(monkeypatch):
    """The spans the callables' tracer exports (a tracer set as a PyTriton program sets it)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry, "_tracer", None)
    telemetry.set_telemetry_tracer(provider.get_tracer("test"))
    yield exporter
    provider.shutdown()


def request() -> Request:
    return Request({"x": np.ones(1, np.float32)})


def test_a_second_tracer_is_refused(exported):
    with pytest.raises(ValueError, match="already set"):
        telemetry.set_telemetry_tracer(object())


@pytest.mark.parametrize(
    ("trace_config", "url"),
    [
        (None, None),
        (["rate=1", "level=TIMESTAMPS"], None),
        (["mode=opentelemetry"], "http://localhost:4318/v1/traces"),
        (
            ["mode=opentelemetry", "opentelemetry,url=http://collector:4318/v1/traces"],
            "http://collector:4318/v1/traces",
        ),
    ],
)
def test_the_otlp_url_is_read_from_an_opentelemetry_trace_config(trace_config, url):
    assert telemetry.opentelemetry_url(trace_config) == url


def test_a_traced_request_runs_in_a_child_of_tritons_span_and_traced_span_nests_in_it(exported):
    requests = [request(), request()]
    with telemetry.request_spans(requests, [TRITON_CONTEXT, ""], "model"):
        assert requests[1].span is None
        with requests[0].traced_span("inner") as inner:
            assert inner is not None
        with requests[1].traced_span("untraced") as untraced:
            assert untraced is None
    spans = {span.name: span for span in exported.get_finished_spans()}
    assert set(spans) == {"inner", "tritonrt_execute"}
    execute = spans["tritonrt_execute"]
    assert f"{execute.context.trace_id:032x}" == TRACE_ID
    assert f"{execute.parent.span_id:016x}" == PARENT_ID
    assert spans["inner"].parent.span_id == execute.context.span_id
    assert execute.status.status_code is StatusCode.OK
    assert execute.attributes["triton.model_name"] == "model"


def test_a_failed_batch_marks_its_spans_failed(exported):
    with telemetry.request_spans([request()], [TRITON_CONTEXT], "model") as spans:
        spans.fail("the callable raised")
    (execute,) = exported.get_finished_spans()
    assert execute.status.status_code is StatusCode.ERROR
    assert execute.status.description == "the callable raised"


@pytest.mark.parametrize("context", ["", "not json {", '["a list"]', '{"traceparent": "00-garbage"}'])
def test_requests_without_a_readable_context_get_no_span(exported, context):
    requests = [request()]
    with telemetry.request_spans(requests, [context], "model"):
        assert requests[0].span is None
    assert exported.get_finished_spans() == ()


def test_without_a_tracer_nothing_is_traced(monkeypatch):
    monkeypatch.setattr(telemetry, "_tracer", None)
    requests = [request()]
    with telemetry.request_spans(requests, [TRITON_CONTEXT], "model"):
        assert requests[0].span is None
        with requests[0].traced_span("inner") as inner:
            assert inner is None


def test_clients_send_the_active_spans_traceparent():
    tracer = TracerProvider().get_tracer("client")
    assert add_trace_headers({"x-other": "1"}) == {"x-other": "1"}
    with tracer.start_as_current_span("call") as span:
        headers = add_trace_headers({"x-other": "1"})
        context = span.get_span_context()
        assert headers["traceparent"].startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")
        assert headers["x-other"] == "1"
        assert add_trace_headers({"traceparent": "mine"}) == {"traceparent": "mine"}


def test_tracing_configured_without_opentelemetry_says_what_to_install(monkeypatch, caplog):
    from tritonrt import triton

    monkeypatch.setattr(telemetry, "_tracer", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)  # not installed
    triton._start_callable_tracing(["mode=opentelemetry"])
    assert telemetry.get_telemetry_tracer() is None
    assert "pip install 'tritonrt[telemetry]'" in caplog.text
    assert "serve without spans of their own" in caplog.text
