"""OpenTelemetry spans for the inference callable, as PyTriton 0.7's ``pytriton.proxy.telemetry``.

With Triton's OpenTelemetry trace mode (``TritonConfig(trace_config=["mode=opentelemetry",
"opentelemetry,url=http://collector:4318/v1/traces", ...])``) every traced request reaches the worker with Triton's
trace context (the wire's ``trace context``: a JSON object of W3C headers). The worker then opens one span per
request, a child of Triton's, around the callable (``request.span``); the callable opens its own children with
``request.traced_span(name)``. The tracer is the one given to :func:`set_telemetry_tracer`, or else one that
tritonrt builds from ``trace_config`` (OTLP/HTTP to its ``url``). OpenTelemetry is optional: ``pip install
tritonrt[telemetry]``; without a tracer nothing is traced and ``traced_span`` does nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = [
    "BatchSpans",
    "build_tracer",
    "end_request_spans",
    "flush_spans",
    "get_telemetry_tracer",
    "opentelemetry_url",
    "request_spans",
    "set_telemetry_tracer",
    "start_request_spans",
    "traced_span",
]

LOGGER = logging.getLogger("tritonrt.proxy")

_MISSING = (
    "Tracing is configured (TritonConfig(trace_config=['mode=opentelemetry', ...])), but OpenTelemetry is not "
    "installed: pip install 'tritonrt[telemetry]' (opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)."
)
_SPAN_NAME = "tritonrt_execute"

_tracer: Any = None
_provider: Any = None  # the provider tritonrt built, flushed when a worker ends


def set_telemetry_tracer(tracer: Any) -> None:
    """Use ``tracer`` (an OpenTelemetry Tracer) for the callables' spans. Set it once, before the models serve
    (worker processes take the tracer set when they start).

    Raises:
        ValueError: a tracer was set already.
    """
    global _tracer
    if _tracer is not None:
        raise ValueError("Telemetry tracer is already set")
    _tracer = tracer


def get_telemetry_tracer() -> Any:
    """The tracer set by :func:`set_telemetry_tracer` (or built from ``trace_config``); None if there is none."""
    return _tracer


def opentelemetry_url(trace_config: Sequence[str] | None) -> str | None:
    """The OTLP/HTTP url of ``trace_config`` when it selects OpenTelemetry mode (Triton's default url when it
    names none); None when it does not select that mode."""
    entries = [entry.replace(" ", "") for entry in trace_config or ()]
    if "mode=opentelemetry" not in entries:
        return None
    urls = [entry.partition("=")[2] for entry in entries if entry.startswith("opentelemetry,url=")]
    return urls[-1] if urls else "http://localhost:4318/v1/traces"


def _resource_attributes(trace_config: Sequence[str]) -> dict[str, str]:
    attributes = {}
    for entry in trace_config:
        if entry.startswith("opentelemetry,resource="):
            key, _, value = entry.partition("=")[2].partition("=")
            attributes[key.strip()] = value.strip()
    return attributes


def build_tracer(trace_config: Sequence[str]) -> Any:
    """A tracer exporting OTLP/HTTP to ``trace_config``'s url, with its ``opentelemetry,resource=`` attributes
    (``service.name`` defaults to ``tritonrt``); also made the global tracer provider if none was set, so that
    the callable's own ``opentelemetry.trace.get_tracer(...)`` spans go there too.

    Raises:
        ImportError: OpenTelemetry's SDK or OTLP/HTTP exporter is not installed (the message says what to do).
    """
    global _provider
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as error:
        raise ImportError(_MISSING) from error
    attributes = {"service.name": "tritonrt", **_resource_attributes(trace_config)}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=opentelemetry_url(trace_config))))
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)
    _provider = provider
    return provider.get_tracer("tritonrt")


def flush_spans() -> None:
    """Export the spans that tritonrt's own provider still holds (a worker that ends calls it)."""
    if _provider is not None:
        _provider.force_flush()


def _parent_context(trace_context: str) -> Any:
    """The OpenTelemetry context of Triton's span, from the wire's trace context (JSON headers, or a bare
    ``traceparent``); None when there is none or it cannot be read."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    text = trace_context.strip()
    try:
        carrier = json.loads(text) if text.startswith("{") else {"traceparent": text}
    except ValueError:
        LOGGER.debug("an unreadable trace context from Triton: %r", trace_context)
        return None
    if not isinstance(carrier, dict):
        return None
    from opentelemetry import trace

    context = TraceContextTextMapPropagator().extract({str(key): str(value) for key, value in carrier.items()})
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def start_request_spans(requests: Sequence[Any], trace_contexts: Sequence[str], model_name: str) -> list[Any] | None:
    """Open a span per traced request, a child of Triton's, and set it as ``request.span``; None (nothing to end)
    when no tracer is set or no request is traced."""
    tracer = _tracer
    if tracer is None or not any(trace_contexts):
        return None
    spans = []
    for request, trace_context in zip(requests, trace_contexts, strict=True):
        span = None
        if trace_context:
            parent = _parent_context(trace_context)
            if parent is not None:
                span = tracer.start_span(_SPAN_NAME, context=parent, attributes={"triton.model_name": model_name})
        request.span = span
        spans.append(span)
    return spans


def end_request_spans(spans: list[Any] | None, error: str | None = None) -> None:
    """End the spans :func:`start_request_spans` opened, with an error status if the batch failed."""
    if not spans:
        return
    from opentelemetry.trace import Status, StatusCode

    status = Status(StatusCode.OK) if error is None else Status(StatusCode.ERROR, error)
    for span in spans:
        if span is not None:
            span.set_status(status)
            span.end()


class BatchSpans:
    """The spans of one batch's requests while the callable runs; :meth:`fail` marks them failed. A context
    manager: leaving it ends the spans (a batch of one traced request runs with its span current, so that the
    callable's own spans become its children)."""

    __slots__ = ("_current", "error", "spans")

    def __init__(self, spans: list[Any] | None):
        self.spans = spans
        self.error: str | None = None
        self._current: Any = None

    def fail(self, message: str) -> None:
        if self.spans is not None:
            self.error = message

    def __enter__(self) -> BatchSpans:
        spans = self.spans
        if spans is not None and len(spans) == 1 and spans[0] is not None:
            from opentelemetry import trace

            self._current = trace.use_span(spans[0], end_on_exit=False, record_exception=False)
            self._current.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: Any) -> None:
        if self.spans is None:
            return
        if error is not None:
            self.fail(f"{kind.__name__ if kind else 'Error'}: {error}")
        try:
            if self._current is not None:
                self._current.__exit__(None, None, None)
        finally:
            end_request_spans(self.spans, self.error)


_UNTRACED = BatchSpans(None)  # shared by every untraced batch: entering and leaving it does nothing


def request_spans(requests: Sequence[Any], trace_contexts: Sequence[str], model_name: str) -> BatchSpans:
    """The requests' spans (:func:`start_request_spans`) as a context manager for the callable's run."""
    if _tracer is None:  # (the common case: no call to make)
        return _UNTRACED
    spans = start_request_spans(requests, trace_contexts, model_name)
    return _UNTRACED if spans is None else BatchSpans(spans)


@contextmanager
def traced_span(request: Any, span_name: str, **kwargs: Any) -> Iterator[Any]:
    """Run the block in a span named ``span_name``, a child of the request's span (yields it); without one (not
    traced, no tracer) the block runs untraced (yields None). ``kwargs`` go to ``Tracer.start_as_current_span``."""
    span, tracer = getattr(request, "span", None), _tracer
    if span is None or tracer is None:
        yield None
        return
    from opentelemetry import trace

    with trace.use_span(span, end_on_exit=False, record_exception=False):
        with tracer.start_as_current_span(span_name, **kwargs) as child:
            yield child
