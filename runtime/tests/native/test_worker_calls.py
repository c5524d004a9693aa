"""Calls of other models from an inference callable (BLS, tritonrt.bls) on the worker's side, driven by a backend
written in Python (FakeBackend): the INFER a call sends, the INFER_RESPONSE answers it gets back (inline, in the
backend's region), streams and their cancellation, errors, concurrent calls, calls outside a request, the
model loading API."""

from __future__ import annotations

import array
import asyncio
import contextvars
import json
import mmap
import os
import socket
import threading

import numpy as np
import pytest
from worker_harness import Harness

from tritonrt import bls
from tritonrt.proxy import wire
from tritonrt.proxy.wire import ResponseMeta, TensorMeta
from tritonrt.proxy.wire_decode import decode_body


def read(h: Harness, kind: int):
    """The next message from the worker, which must be of ``kind``: (header, body, message bytes)."""
    header, message = h.backend.read()
    assert header.kind == kind, f"expected kind {kind}, got {header.kind}"
    return header, decode_body(header, message), message


def inline_input(header, message: bytes, tensor: TensorMeta) -> np.ndarray:
    assert tensor.location == wire.LOCATION_INLINE
    start = header.data_start + tensor.offset
    return np.frombuffer(message[start : start + tensor.byte_length], np.float32).reshape(tensor.shape)


def respond(h: Harness, call_id: int, outputs=None, *, error=None, final=True, region=False, announce=False, at=0):
    """An INFER_RESPONSE for ``call_id``: FP32 ``outputs`` (name -> array) inline or in the backend's region
    (from offset ``at``), or an ``error`` (code, message), or nothing (None and no error: a final without a
    response)."""
    backend = h.backend
    responses, data, offset = [], b"", at if region else 0
    if error is not None:
        responses.append(ResponseMeta(wire.STATUS_ERROR, [], *error))
    elif outputs is not None:
        tensors = []
        for name, value in outputs.items():
            raw = np.ascontiguousarray(value, np.float32).tobytes()
            location = wire.LOCATION_SENDER_REGION if region else wire.LOCATION_INLINE
            tensors.append(TensorMeta(name, wire.DTYPE_FP32, location, offset, len(raw), np.shape(value)))
            if region:
                backend.region.map[offset : offset + len(raw)] = raw
            else:
                data += raw
            offset += wire.align(len(raw))
            data += bytes(wire.align(len(data)) - len(data)) if not region else b""
        responses.append(ResponseMeta(wire.STATUS_OUTPUTS, tensors))
    flags = (wire.FLAG_FINAL if final else 0) | (wire.FLAG_NEW_REGION if announce else 0)
    header = wire.Header(
        wire.KIND_INFER_RESPONSE, flags, len(responses), backend.seq, backend.region.size if announce else 0,
        backend.region.id if region else 0,
    )  # fmt: skip
    meta = wire.encode_infer_response(wire.CallResponses(call_id, responses))
    message = wire.encode_message(header, meta, len(data)) + data
    fds = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [backend.region.fd]))] if announce else []
    backend.sock.sendmsg([message], fds)


def control_result(h: Harness, call_id: int, *, ready: int = 0, error: tuple[int, str] | None = None) -> None:
    status = wire.STATUS_OUTPUTS if error is None else wire.STATUS_ERROR
    code, message = error if error is not None else (0, "")
    result = wire.ControlResult(call_id, status, code, ready, message)
    header = wire.Header(wire.KIND_CONTROL_RESULT, 0, 0, h.backend.seq)
    h.backend.sock.sendall(wire.encode_message(header, wire.encode_control_result(result)))


def test_a_call_sends_its_request_and_answers_with_the_callees_outputs(harness):
    def infer(requests):
        request = bls.InferenceRequest(
            "callee", ["y"], [bls.Tensor("x", requests[0]["x"] * 2)], request_id="r", correlation_id="s",
            flags=bls.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START, timeout=60_000_000, parameters={"k": 1},
        )  # fmt: skip
        response = request.exec()
        assert not response.has_error(), response.error()
        y = bls.get_output_tensor_by_name(response, "y").as_numpy()
        assert y.flags.writeable and y.flags.owndata  # (small: copied out of the received message)
        return [{"y": y + 1}]

    h = harness(infer)
    seq = h.send([[1.0, 2.0]])
    header, call, message = read(h, wire.KIND_INFER)
    assert header.seq == seq and header.count == 1
    assert (call.model_name, call.timeout_us, call.model_version, call.call_flags) == ("callee", 60_000_000, -1, 0)
    request = call.request
    assert (request.id, request.correlation_id, request.flags) == ("r", "s", 1)
    assert request.parameters == {"k": 1} and request.requested_outputs == ["y"]
    np.testing.assert_array_equal(inline_input(header, message, request.inputs[0]), [[2.0, 4.0]])
    respond(h, call.call_id, {"y": np.array([[10.0, 20.0]])})
    header, responses = h.reply()
    assert header.kind == wire.KIND_REPLY and header.flags & wire.FLAG_FINAL
    assert responses[0].status == wire.STATUS_OUTPUTS, responses[0]


def test_large_tensors_travel_through_the_regions_and_an_output_returns_by_reference(harness):
    """An input over the inline threshold goes in the worker's region (the caller's own input too: the protocol
    passes a call's inputs by copy); an output in the backend's region is viewed (no copy) and, returned as the
    callable's output, goes back by reference."""
    seen = {}

    def infer(requests):
        outputs = bls.infer("callee", x=requests[0]["x"])  # 4 KiB in the backend's region: over the threshold
        seen["writeable"] = outputs["y"].flags.writeable
        return [{"y": outputs["y"]}]

    h = harness(infer)
    h.backend.new_region(1 << 20)
    h.send([np.arange(1024, dtype=np.float32).tolist()], region=True, announce=True)
    header, call, _ = read(h, wire.KIND_INFER)
    tensor = call.request.inputs[0]
    assert tensor.location == wire.LOCATION_SENDER_REGION and header.flags & wire.FLAG_NEW_REGION
    fd = h.backend.fds.pop()
    try:
        region = mmap.mmap(fd, header.region_size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    sent = np.frombuffer(region, np.float32, 1024, tensor.offset)
    np.testing.assert_array_equal(sent, np.arange(1024, dtype=np.float32))
    del sent
    region.close()
    respond(h, call.call_id, {"y": np.full((1, 512), 3.0)}, region=True, at=8192)
    header, responses = h.reply()
    output = responses[0].outputs[0]
    assert output.location == wire.LOCATION_RECEIVER_REGION and header.peer_region_id == h.backend.region.id
    assert seen["writeable"] is False  # a view of the backend's region, mapped read-only


def test_an_error_response_names_the_callee_and_infer_raises_it(harness):
    outcomes = []

    def infer(requests):
        response = bls.InferenceRequest("missing", [], [bls.Tensor("x", requests[0]["x"])]).exec()
        outcomes.append((response.has_error(), response.error().code(), response.error().message()))
        try:
            bls.infer("missing", x=requests[0]["x"])
        except bls.TritonModelException as error:
            outcomes.append(str(error))
        return [{"y": requests[0]["x"]}]

    h = harness(infer)
    h.send([[1.0]])
    for _ in range(2):
        _, call, _ = read(h, wire.KIND_INFER)
        respond(h, call.call_id, error=(wire.ERROR_NOT_FOUND, "no such model"))
    assert h.reply()[1][0].status == wire.STATUS_OUTPUTS
    assert outcomes == [
        (True, bls.TritonError.NOT_FOUND, "model 'missing': no such model"),
        "model 'missing': no such model",
    ]


def test_a_decoupled_call_iterates_its_responses_and_cancel_sends_infer_cancel(harness):
    got = []

    def infer(requests):
        responses = bls.InferenceRequest("stream", ["y"], [bls.Tensor("x", requests[0]["x"])]).exec(decoupled=True)
        for index, response in enumerate(responses):
            got.append([t.as_numpy().tolist() for t in response.output_tensors()])
            if index == 1:
                responses.cancel()
        return [{"y": requests[0]["x"]}]

    h = harness(infer)
    h.send([[1.0]])
    _, call, _ = read(h, wire.KIND_INFER)
    assert call.call_flags == wire.CALL_DECOUPLED
    respond(h, call.call_id, {"y": [[1.0]]}, final=False)
    respond(h, call.call_id, {"y": [[2.0]]}, final=False)
    header, cancelled, _ = read(h, wire.KIND_INFER_CANCEL)
    assert cancelled == call.call_id and header.seq == h.backend.seq
    respond(h, call.call_id, {"y": [[3.0]]}, final=False)  # already on its way: still delivered
    respond(h, call.call_id, None)  # the end, without a response
    assert h.reply()[0].flags & wire.FLAG_FINAL
    assert got == [[[[1.0]]], [[[2.0]]], [[[3.0]]], []]


def test_concurrent_calls_of_one_callable_each_get_their_own_answer(harness):
    results = {}

    def infer(requests):
        def call(value: float) -> None:
            results[value] = bls.infer("callee", x=np.array([[value]], np.float32))["y"].tolist()

        threads = [threading.Thread(target=contextvars.copy_context().run, args=(call, v)) for v in (1.0, 2.0)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [{"y": requests[0]["x"]}]

    h = harness(infer)
    h.send([[0.0]])
    calls = []
    for _ in range(2):
        header, call, message = read(h, wire.KIND_INFER)
        calls.append((call.call_id, inline_input(header, message, call.request.inputs[0])[0, 0]))
    for call_id, value in reversed(calls):  # answered in the other order
        respond(h, call_id, {"y": [[value * 10]]})
    assert h.reply()[0].flags & wire.FLAG_FINAL
    assert results == {1.0: [[10.0]], 2.0: [[20.0]]}


def test_async_calls_run_together(harness):
    async def infer(requests):
        x = requests[0]["x"]
        first, second = await asyncio.gather(
            bls.InferenceRequest("a", [], [bls.Tensor("x", x)]).async_exec(), bls.infer_async("b", x=x + 1)
        )
        return [{"y": first.output_tensors()[0].as_numpy() + second["y"]}]

    h = harness(infer)
    h.send([[1.0]])
    calls = {}
    for _ in range(2):  # both sent before either is answered
        _, call, _ = read(h, wire.KIND_INFER)
        calls[call.model_name] = call.call_id
    respond(h, calls["b"], {"y": [[20.0]]})
    respond(h, calls["a"], {"y": [[1.0]]})
    header, message = h.backend.read()
    assert header.kind == wire.KIND_REPLY
    y = decode_body(header, message)[0].outputs[0]
    start = header.data_start + y.offset
    assert np.frombuffer(message[start : start + 4], np.float32).tolist() == [21.0]


def test_a_cancelled_request_cancels_its_call(harness):
    seen = []

    def infer(requests):
        response = bls.InferenceRequest("slow", [], [bls.Tensor("x", requests[0]["x"])]).exec()
        seen.append((response.error().code(), requests[0].is_cancelled()))
        return [{"y": requests[0]["x"]}]

    h = harness(infer)
    h.send([[1.0]])
    _, call, _ = read(h, wire.KIND_INFER)
    h.backend.send_control(wire.KIND_CANCEL, 1, wire.encode_cancel([0]))
    _, cancelled, _ = read(h, wire.KIND_INFER_CANCEL)
    assert cancelled == call.call_id
    respond(h, call.call_id, error=(wire.ERROR_CANCELLED, "the call was cancelled"))
    h.reply()
    assert seen == [(bls.TritonError.CANCELLED, True)]


def test_calls_outside_a_request_raise_saying_where_they_work(harness):
    with pytest.raises(bls.TritonModelException, match="only while a request is being executed"):
        bls.infer("callee", x=np.zeros(1, np.float32))
    errors = []
    late = threading.Event()

    def infer(requests):
        def outside() -> None:  # a thread started without the callable's context
            try:
                bls.infer("callee", x=np.zeros(1, np.float32))
            except bls.TritonModelException as error:
                errors.append(str(error))

        thread = threading.Thread(target=outside)
        thread.start()
        thread.join()
        context = contextvars.copy_context()

        def after() -> None:  # the callable's context, once its request was answered
            late.wait(5)
            try:
                bls.infer("callee", x=np.zeros(1, np.float32))
            except bls.TritonModelException as error:
                errors.append(str(error))

        threading.Thread(target=context.run, args=(after,), daemon=True).start()
        return [{"y": requests[0]["x"]}]

    h = harness(infer)
    h.send([[1.0]])
    assert h.reply()[0].kind == wire.KIND_REPLY
    late.set()
    while len(errors) < 2:
        threading.Event().wait(0.01)
    assert all("contextvars.copy_context().run" in error for error in errors), errors


def test_a_bad_tensor_raises_before_anything_is_sent(harness):
    errors = []

    def infer(requests):
        for value in (np.array([1j]), np.array([object()], dtype=object)):
            try:
                bls.infer("callee", bad=value)
            except bls.TritonModelException as error:
                errors.append(str(error))
        return [{"y": requests[0]["x"]}]

    h = harness(infer)
    h.send([[1.0]])
    assert h.reply()[0].kind == wire.KIND_REPLY  # (no INFER came first)
    assert len(errors) == 2 and all("input 'bad' of the call of model 'callee'" in error for error in errors)


def test_the_model_loading_api_sends_control_messages(harness):
    outcomes = []

    def infer(requests):
        outcomes.append(bls.is_model_ready("simple", "2"))
        bls.load_model("simple", config='{"max_batch_size": 16}', files={"file:1/model.onnx": b"\xde\xad"})
        try:
            bls.unload_model("simple", unload_dependents=True)
        except bls.TritonModelException as error:
            outcomes.append(str(error))
        return [{"y": requests[0]["x"]}]

    h = harness(infer)
    h.send([[1.0]])
    _, ready, _ = read(h, wire.KIND_CONTROL)
    assert (ready.op, ready.model_name, ready.model_version) == (wire.CONTROL_IS_READY, "simple", 2)
    control_result(h, ready.call_id, ready=1)
    header, load, message = read(h, wire.KIND_CONTROL)
    assert (load.op, load.config) == (wire.CONTROL_LOAD, '{"max_batch_size": 16}')
    assert load.files == (("1/model.onnx", 0, 2),)
    assert message[header.data_start :] == b"\xde\xad"
    control_result(h, load.call_id)
    _, unload, _ = read(h, wire.KIND_CONTROL)
    assert unload.op == wire.CONTROL_UNLOAD_DEPENDENTS
    control_result(h, unload.call_id, error=(wire.ERROR_UNSUPPORTED, "explicit model control mode is off"))
    h.reply()
    assert outcomes == [True, "model 'simple': explicit model control mode is off"]


def test_an_ack_does_not_free_the_region_space_of_a_calls_inputs(harness):
    """The backend reads a call's inputs when it reads the INFER, which may be after an ACK of the batch's
    replies: the worker's region space of those inputs is used again only from the next batch on."""

    def infer(requests):
        bls.infer("a", x=np.full((1, 1024), 1.0, np.float32))
        bls.infer("b", x=np.full((1, 1024), 2.0, np.float32))
        return [{"y": requests[0]["x"]}]

    h = harness(infer)
    h.send([[1.0]])
    header, first, _ = read(h, wire.KIND_INFER)
    fd = h.backend.fds.pop()
    region = mmap.mmap(fd, header.region_size, access=mmap.ACCESS_READ)
    os.close(fd)
    h.backend.send_control(wire.KIND_ACK, 0)
    respond(h, first.call_id, {"y": [[0.0]]})
    _, second, _ = read(h, wire.KIND_INFER)
    respond(h, second.call_id, {"y": [[0.0]]})
    h.reply()
    a, b = first.request.inputs[0], second.request.inputs[0]
    assert b.offset >= a.offset + a.byte_length
    assert np.frombuffer(region, np.float32, 1024, a.offset).min() == 1.0  # not overwritten by b
    region.close()


def test_a_call_still_waiting_after_its_request_was_answered_ends_and_the_worker_serves_on(harness):
    """A thread of the callable that still waits for its call when the request is answered (and reads the
    connection meanwhile) gets an error; the next batch, read by that thread, reaches the worker."""
    outcome: list[str] = []
    made: list[Harness] = []

    def infer(requests):
        if requests[0]["x"][0, 0] == 1.0:

            def wait() -> None:
                response = bls.InferenceRequest("slow", [], [bls.Tensor("x", np.zeros(1, np.float32))]).exec()
                outcome.append(response.error().message())

            threading.Thread(target=contextvars.copy_context().run, args=(wait,)).start()
            connection = made[0].worker._connection
            while not connection._reading:  # (until the thread reads the connection for its answer)
                threading.Event().wait(0.001)
        return [{"y": requests[0]["x"]}]

    h = harness(infer)
    made.append(h)
    h.send([[1.0]])
    _, call, _ = read(h, wire.KIND_INFER)
    assert h.reply()[0].kind == wire.KIND_REPLY
    seq = h.send([[2.0]])
    header, _ = h.reply()
    assert header.seq == seq and header.kind == wire.KIND_REPLY
    assert outcome and "answered before the call ended" in outcome[0]
    respond(h, call.call_id, {"y": [[0.0]]})  # a late answer of the old call is dropped
    seq = h.send([[3.0]])
    assert h.reply()[0].seq == seq


def test_a_traced_call_has_a_span_under_the_requests_and_passes_its_context_on(harness, monkeypatch):
    pytest.importorskip("opentelemetry.sdk", reason="needs tritonrt[telemetry] (opentelemetry)")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tritonrt.proxy import telemetry

    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry, "_tracer", provider.get_tracer("test"))

    def infer(requests):
        return [{"y": bls.infer("callee", x=requests[0]["x"])["y"]}]

    h = harness(infer)
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    raw = np.ones((1, 1), np.float32).tobytes()
    x = TensorMeta("x", wire.DTYPE_FP32, wire.LOCATION_INLINE, 0, len(raw), (1, 1))
    context = f'{{"traceparent":"00-{trace_id}-b7ad6b7169203331-01"}}'
    h.backend.send_batch([wire.RequestMeta("", 0, None, {}, None, [x], context)], raw)
    _, call, _ = read(h, wire.KIND_INFER)
    respond(h, call.call_id, {"y": [[2.0]]})
    h.reply()
    provider.shutdown()
    spans = {span.name: span for span in exporter.get_finished_spans()}
    request_span, call_span = spans["tritonrt_execute"], spans["tritonrt_bls"]
    assert call_span.parent.span_id == request_span.context.span_id
    assert call_span.attributes["triton.model_name"] == "callee"
    _, sent_trace, sent_span, _ = json.loads(call.request.trace_context)["traceparent"].split("-")
    assert (sent_trace, sent_span) == (trace_id, format(call_span.context.span_id, "016x"))


def test_async_decoupled_calls_iterate_and_infer_stream_cancels_when_closed_early(harness):
    got = []

    async def infer(requests):
        x = requests[0]["x"]
        responses = await bls.InferenceRequest("stream", [], [bls.Tensor("x", x)]).async_exec(decoupled=True)
        async for response in responses:
            got.append(len(response.output_tensors()))
        for outputs in bls.infer_stream("stream", x=x):
            got.append(outputs["y"].tolist())
            break  # closing the stream early cancels the call
        return [{"y": x}]

    h = harness(infer)
    h.send([[1.0]])
    _, first, _ = read(h, wire.KIND_INFER)
    respond(h, first.call_id, {"y": [[1.0]]}, final=False)
    respond(h, first.call_id, {"y": [[2.0]]})
    _, second, _ = read(h, wire.KIND_INFER)
    assert second.call_flags == wire.CALL_DECOUPLED
    respond(h, second.call_id, {"y": [[5.0]]}, final=False)
    _, cancelled, _ = read(h, wire.KIND_INFER_CANCEL)
    assert cancelled == second.call_id
    respond(h, second.call_id, None)
    assert h.reply()[0].flags & wire.FLAG_FINAL
    assert got == [1, 1, [[5.0]]]


def test_the_backend_counts_the_calls_it_gets_and_the_worker_only_those_it_could_not_send(harness):
    # The backend counts each call (tritonrt_bls_*) as its last response arrives: a call that reached it sends
    # no METRICS message; one that failed in the worker (inputs beyond the region limit) is counted there.
    def infer(requests):
        assert bls.infer("callee", x=requests[0]["x"])["y"].tolist() == [[5.0]]
        try:
            bls.infer("too_big", x=np.zeros(4 << 20, np.float32))
        except bls.TritonModelException as error:
            assert "region limit" in str(error)
        else:
            raise AssertionError("a call beyond the region limit was sent")
        return [{"y": requests[0]["x"]}]

    h = harness(infer)
    h.send([[1.0]])
    _, call, _ = read(h, wire.KIND_INFER)
    respond(h, call.call_id, {"y": np.array([[5.0]])})
    header, _ = h.reply()
    assert header.kind == wire.KIND_REPLY
    updates = [update for update in h.backend.metrics if update.name.startswith("tritonrt_bls_")]
    counted = sorted((update.name, tuple(sorted(update.labels)), update.value > 0) for update in updates)
    labels = (("callee", "too_big"), ("model", "m"))
    assert counted == [
        ("tritonrt_bls_calls_total", labels, True),
        ("tritonrt_bls_errors_total", labels, True),
        ("tritonrt_bls_seconds", labels, True),
    ], counted
