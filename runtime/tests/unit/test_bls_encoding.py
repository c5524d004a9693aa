"""The INFER a call sends: encode_call's common-case packing (per-callee parts kept) is byte for byte the wire
codec's encoding of the same call, and decodes back to it."""

from __future__ import annotations

import pytest

from tritonrt.proxy import wire
from tritonrt.proxy.calls import CallRequest, encode_call
from tritonrt.proxy.outgoing import Outgoing
from tritonrt.proxy.wire import LOCATION_INLINE, LOCATION_SENDER_REGION, Call, RequestMeta, TensorMeta
from tritonrt.proxy.wire_decode import decode_body

INPUTS = [
    Outgoing(b"x", wire.DTYPE_FP32, LOCATION_INLINE, 0, 64, (16,), None),
    Outgoing("é".encode(), wire.DTYPE_INT64, LOCATION_SENDER_REGION, 4096, 8 * 6, (2, 3), None),
]

CALLS = [
    CallRequest("identity", ["y"]),
    CallRequest("identity", None),
    CallRequest("identity", []),
    CallRequest("générateur", ["a", "b"], decoupled=True, timeout_us=1500, model_version=3, flags=2),
    CallRequest("identity", ["y"], trace_context='{"traceparent":"00-1-2-01"}'),
    CallRequest("identity", ["y"], request_id="r1"),
    CallRequest("identity", ["y"], correlation_id=7, flags=1),
    CallRequest("identity", ["y"], correlation_id="session"),
    CallRequest("identity", ["y"], parameters={"k": 1, "s": "v", "b": True, "f": 0.5}),
]


def by_the_codec(call_id: int, call: CallRequest, inputs: list[Outgoing]) -> bytearray:
    tensors = [TensorMeta(t.name.decode(), t.dtype, t.location, t.offset, t.byte_length, t.shape) for t in inputs]
    request = RequestMeta(call.request_id, call.flags, call.correlation_id, dict(call.parameters),
                          call.requested_outputs, tensors, call.trace_context)  # fmt: skip
    flags = wire.CALL_DECOUPLED if call.decoupled else 0
    return wire.encode_infer(Call(call_id, flags, call.model_version, call.timeout_us, call.model_name, request))


@pytest.mark.parametrize("call", CALLS, ids=range(len(CALLS)))
@pytest.mark.parametrize("count", [0, 1, 2])
def test_a_calls_infer_is_the_codecs_encoding_each_time(call, count):
    inputs = INPUTS[:count]
    for call_id in (1, 2, 1 << 40):  # (the second and third from the kept parts)
        encoded = encode_call(call_id, call, inputs)
        assert encoded == by_the_codec(call_id, call, inputs)
    if count > 1:
        return  # (decoding the region's tensor needs a region)
    message = bytearray(wire.encode_message(wire.Header(wire.KIND_INFER, 0, 1, 5), encoded, 64)) + bytes(64)
    decoded = decode_body(wire.decode_header(message), message)
    assert (decoded.call_id, decoded.model_name, decoded.timeout_us) == (1 << 40, call.model_name, call.timeout_us)
    assert [tensor.name for tensor in decoded.request.inputs] == [t.name.decode() for t in inputs]
