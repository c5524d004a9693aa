"""Property tests of the Python codec: valid messages round-trip; hostile bytes raise WireError and nothing else.

The hostile-bytes test is aimed as the Rust fuzzer (native/tests/fuzz.rs) is: small valid seeds, mutations
concentrated on the header and the metadata (not on tensor data, which the decoder does not read), and a check
that the mutated messages reach each stage of decoding (refused header, refused body, decoded) in a fair share.
"""

from __future__ import annotations

import collections
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tritonrt.proxy import wire
from tritonrt.proxy.tensors import decode_bytes, encode_bytes
from tritonrt.proxy.wire import Header, RequestMeta, ResponseMeta, TensorMeta, WireError
from tritonrt.proxy.wire_decode import decode_body

names = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), min_size=1, max_size=12)
shapes = st.lists(st.integers(0, 6), max_size=4).map(tuple)
DATA_LENGTH = 1 << 15  # room for the largest inline tensor drawn: 6**4 elements of 8 bytes, +16


@st.composite
def tensors(
    draw: st.DrawFn, shapes: st.SearchStrategy[tuple[int, ...]] = shapes, data_length: int = DATA_LENGTH
) -> TensorMeta:
    dtype = draw(st.integers(1, 14))
    shape = draw(shapes)
    length = math.prod(shape) * wire.ELEMENT_SIZES[dtype]
    if dtype == wire.DTYPE_BYTES:
        length += draw(st.integers(0, 16))
    location = draw(st.sampled_from([wire.LOCATION_INLINE, wire.LOCATION_SENDER_REGION, wire.LOCATION_RECEIVER_REGION]))
    inline = location == wire.LOCATION_INLINE
    offset = draw(st.integers(0, data_length - length)) if inline else draw(st.integers(0, 1 << 40))
    return TensorMeta(draw(names), dtype, location, offset, length, shape)


parameters = st.dictionaries(
    names,
    st.one_of(st.text(max_size=8), st.integers(-(1 << 63), (1 << 63) - 1), st.booleans(), st.floats(allow_nan=False)),
    max_size=3,
)


def requests(tensor_strategy: st.SearchStrategy[TensorMeta] | None = None) -> st.SearchStrategy[RequestMeta]:
    return st.builds(
        RequestMeta,
        st.text(max_size=8),
        st.integers(0, (1 << 32) - 1),
        st.one_of(st.none(), st.integers(1, (1 << 64) - 1), st.text(max_size=8)),
        parameters,
        st.one_of(st.none(), st.lists(names, min_size=1, max_size=3)),
        st.lists(tensors() if tensor_strategy is None else tensor_strategy, max_size=3),
        st.one_of(st.just(""), st.text(max_size=120)),
    )


def responses(tensor_strategy: st.SearchStrategy[TensorMeta] | None = None) -> st.SearchStrategy[ResponseMeta]:
    return st.one_of(
        st.lists(tensors() if tensor_strategy is None else tensor_strategy, max_size=3).map(
            lambda outputs: ResponseMeta(wire.STATUS_OUTPUTS, outputs)
        ),
        st.builds(ResponseMeta, st.just(wire.STATUS_ERROR), st.just([]), st.integers(0, 7), st.text(max_size=20)),
        st.just(ResponseMeta(wire.STATUS_NONE, [])),
    )


def frame(kind: int, meta: bytes, count: int, data_length: int = DATA_LENGTH) -> bytes:
    header = Header(kind, count=count, seq=3, region_id=1, peer_region_id=2)
    return wire.encode_message(header, meta, data_length) + bytes(data_length)


def decode(raw: bytes):
    header = wire.decode_header(raw)
    return decode_body(header, raw)


@given(st.lists(requests(), max_size=4))
def test_batches_round_trip(batch):
    assert decode(frame(wire.KIND_BATCH, wire.encode_batch(batch), len(batch))) == batch


@given(st.lists(responses(), max_size=4))
def test_replies_round_trip(reply):
    assert decode(frame(wire.KIND_REPLY, wire.encode_reply(reply), len(reply))) == reply


metric_names = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,15}", fullmatch=True)
label_names = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,7}", fullmatch=True)
metric_updates = st.builds(
    wire.MetricUpdate,
    st.integers(0, 2),
    st.integers(0, 2),
    st.floats(allow_nan=False, allow_infinity=False),
    metric_names,
    st.text(max_size=20),
    st.lists(st.tuples(label_names, st.text(max_size=8)), max_size=3, unique_by=lambda pair: pair[0]).map(tuple),
    st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=4).map(lambda b: tuple(sorted(set(b)))),
)


@given(st.lists(metric_updates, max_size=4))
def test_metric_updates_round_trip(updates):
    assert decode(frame(wire.KIND_METRICS, wire.encode_metrics(updates), len(updates), 0)) == updates


call_ids = st.integers(1, (1 << 64) - 1)
versions = st.one_of(st.just(-1), st.integers(1, (1 << 63) - 1))
calls = st.builds(
    wire.Call, call_ids, st.sampled_from([0, wire.CALL_DECOUPLED]), versions, st.integers(0, (1 << 64) - 1), names,
    requests(),
)  # fmt: skip
call_responses = st.builds(wire.CallResponses, call_ids, st.lists(responses(), max_size=1))


@st.composite
def controls(draw: st.DrawFn, data_length: int = DATA_LENGTH) -> wire.Control:
    op = draw(st.integers(wire.CONTROL_IS_READY, wire.CONTROL_UNLOAD_DEPENDENTS))
    files: tuple[tuple[str, int, int], ...] = ()
    config = ""
    if op == wire.CONTROL_LOAD:
        config = draw(st.text(max_size=20))
        spans = st.integers(0, data_length).flatmap(lambda at: st.tuples(st.just(at), st.integers(0, data_length - at)))
        files = tuple((name, *span) for name, span in draw(st.lists(st.tuples(names, spans), max_size=3)))
    return wire.Control(draw(call_ids), op, draw(versions), draw(names), config, files)


control_results = st.one_of(
    st.builds(wire.ControlResult, call_ids, st.just(wire.STATUS_OUTPUTS), st.just(0), st.integers(0, 1)),
    st.builds(wire.ControlResult, call_ids, st.just(wire.STATUS_ERROR), st.integers(0, 7), st.just(0), st.text()),
)


def call_frame(kind: int, body, data_length: int = DATA_LENGTH) -> bytes:
    """A message of one of the calls' kinds (INFER ... CONTROL_RESULT) holding ``body``."""
    if kind == wire.KIND_INFER:
        return frame(kind, wire.encode_infer(body), 1, data_length)
    if kind == wire.KIND_INFER_RESPONSE:
        return frame(kind, wire.encode_infer_response(body), len(body.responses), data_length)
    if kind == wire.KIND_INFER_CANCEL:
        return frame(kind, wire.encode_infer_cancel(body), 0, 0)
    if kind == wire.KIND_CONTROL:
        return frame(kind, wire.encode_control(body), 0, data_length)
    return frame(kind, wire.encode_control_result(body), 0, 0)


@given(
    st.one_of(
        calls.map(lambda body: (wire.KIND_INFER, body)),
        call_responses.map(lambda body: (wire.KIND_INFER_RESPONSE, body)),
        call_ids.map(lambda body: (wire.KIND_INFER_CANCEL, body)),
        controls().map(lambda body: (wire.KIND_CONTROL, body)),
        control_results.map(lambda body: (wire.KIND_CONTROL_RESULT, body)),
    )
)
def test_calls_round_trip(message):
    kind, body = message
    assert decode(call_frame(kind, body)) == body


# Seeds for the hostile-bytes test: small tensors, so that the data is a small part of each message.
SEED_DATA_LENGTH = 3**3 * 8 + 16
seed_tensors = tensors(st.lists(st.integers(0, 3), max_size=3).map(tuple), SEED_DATA_LENGTH)
seeds = st.one_of(
    st.lists(requests(seed_tensors), min_size=1, max_size=3).map(
        lambda b: frame(wire.KIND_BATCH, wire.encode_batch(b), len(b), SEED_DATA_LENGTH)
    ),
    st.lists(responses(seed_tensors), min_size=1, max_size=3).map(
        lambda r: frame(wire.KIND_REPLY, wire.encode_reply(r), len(r), SEED_DATA_LENGTH)
    ),
    st.lists(metric_updates, min_size=1, max_size=3).map(
        lambda m: frame(wire.KIND_METRICS, wire.encode_metrics(m), len(m), 0)
    ),
    st.builds(wire.Call, call_ids, st.just(0), versions, st.integers(0, 9), names, requests(seed_tensors)).map(
        lambda c: call_frame(wire.KIND_INFER, c, SEED_DATA_LENGTH)
    ),
    st.builds(wire.CallResponses, call_ids, st.lists(responses(seed_tensors), min_size=1, max_size=1)).map(
        lambda r: call_frame(wire.KIND_INFER_RESPONSE, r, SEED_DATA_LENGTH)
    ),
    controls(SEED_DATA_LENGTH).map(lambda c: call_frame(wire.KIND_CONTROL, c, SEED_DATA_LENGTH)),
    control_results.map(lambda r: call_frame(wire.KIND_CONTROL_RESULT, r)),
)
# One mutation: its kind, where (taken modulo the span it applies to) and a value.
mutations = st.lists(
    st.tuples(st.integers(0, 7), st.integers(0, (1 << 32) - 1), st.integers(0, (1 << 64) - 1)), min_size=1, max_size=4
)
INTERESTING = [0, 1, 2, 0x7F, 0xFF, 0xFFFF, 0x7FFF_FFFF, 0xFFFF_FFFF, 1 << 62, (1 << 64) - 1]
META_LENGTH_AT, DATA_LENGTH_AT = 40, 48  # the header's fields (HEADER_LAYOUT)


def mutate(data: bytearray, kind: int, where: int, value: int) -> None:
    """One mutation of ``data``, as fuzz.rs's ``mutate`` does, but placed in the header and metadata (its
    first ``head`` bytes) except for truncation and appending."""
    head = min(len(data), wire.HEADER_SIZE + int.from_bytes(data[META_LENGTH_AT:44], "little")) if data else 0
    at = where % head if head else 0
    if kind == 0 and head:
        data[at] ^= 1 << (value % 8)
    elif kind == 1 and head:
        data[at] = value & 0xFF
    elif kind == 2 and head >= 8:  # an interesting integer over a 4- or 8-byte field (counts, lengths, dims)
        width = 4 if value & 1 else 8
        at = where % (head - width + 1)
        number = (INTERESTING[value % len(INTERESTING)] + (value >> 8) % 3 - 1) % (1 << 64)
        data[at : at + width] = number.to_bytes(8, "little")[:width]
    elif kind == 3:
        del data[where % (len(data) + 1) :]
    elif kind == 4:
        data += value.to_bytes(8, "little")[: where % 9]
    elif kind == 5 and head:  # a copy of up to 32 bytes of the head, inserted elsewhere in it
        start = where % head
        data[at:at] = data[start : start + value % 33]
    elif kind == 6 and len(data) > wire.HEADER_SIZE:
        # Lengths consistent with the mutated body, so that the body decoder is reached.
        meta = min(value % (len(data) - wire.HEADER_SIZE + 1), len(data) - wire.HEADER_SIZE)
        data[META_LENGTH_AT:44] = meta.to_bytes(4, "little")
        data_length = max(0, len(data) - wire.align(wire.HEADER_SIZE + meta))
        data[DATA_LENGTH_AT:56] = data_length.to_bytes(8, "little")
    else:
        data[at:at] = bytes([value & 0xFF])


def decode_stage(raw: bytes) -> int:
    """Decode as the worker does (header, then body); the stage reached: 0 refused header, 1 refused body, 2
    decoded. Raises what is not a WireError."""
    try:
        header = wire.decode_header(raw)
    except WireError:
        return 0
    try:
        decode_body(header, raw)
    except WireError:
        return 1
    return 2


def test_hostile_bytes_raise_wire_errors_only_and_reach_every_stage():
    reached: collections.Counter[int] = collections.Counter()

    @settings(max_examples=1000, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(seeds, mutations)
    def hostile(raw: bytes, changes: list[tuple[int, int, int]]) -> None:
        data = bytearray(raw)
        for kind, where, value in changes:
            mutate(data, kind, where, value)
        try:
            reached[decode_stage(bytes(data))] += 1
        except Exception as error:  # the property: nothing but WireError escapes
            raise AssertionError(f"{type(error).__name__}: {error}") from error

    hostile()
    total = sum(reached.values())
    # The mutations must exercise the body decoder both ways, not just bounce off the header check.
    assert all(reached[stage] > total / 20 for stage in (0, 1, 2)), f"stages reached: {dict(reached)}"


@given(st.lists(st.binary(max_size=20), max_size=6))
def test_bytes_tensors_round_trip(items):
    array = np.array(items + [b""], dtype=object)[:-1] if items else np.empty(0, dtype=object)
    decoded = decode_bytes(memoryview(encode_bytes(array)), (len(items),))
    assert decoded.tolist() == items


@given(st.binary(max_size=64), st.lists(st.integers(0, 5), max_size=3))
def test_hostile_bytes_tensors_raise_wire_errors_only(raw, shape):
    try:
        decode_bytes(memoryview(raw), shape)
    except WireError:
        pass
