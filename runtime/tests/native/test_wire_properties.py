"""Property tests of the Python codec: valid messages round-trip; hostile bytes raise WireError and nothing else."""

from __future__ import annotations

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
def tensors(draw) -> TensorMeta:
    dtype = draw(st.integers(1, 14))
    shape = draw(shapes)
    length = math.prod(shape) * wire.ELEMENT_SIZES[dtype]
    if dtype == wire.DTYPE_BYTES:
        length += draw(st.integers(0, 16))
    location = draw(st.sampled_from([wire.LOCATION_INLINE, wire.LOCATION_SENDER_REGION, wire.LOCATION_RECEIVER_REGION]))
    inline = location == wire.LOCATION_INLINE
    offset = draw(st.integers(0, DATA_LENGTH - length)) if inline else draw(st.integers(0, 1 << 40))
    return TensorMeta(draw(names), dtype, location, offset, length, shape)


parameters = st.dictionaries(
    names,
    st.one_of(st.text(max_size=8), st.integers(-(1 << 63), (1 << 63) - 1), st.booleans(), st.floats(allow_nan=False)),
    max_size=3,
)
requests = st.builds(
    RequestMeta,
    st.text(max_size=8),
    st.integers(0, 1 << 32 - 1),
    st.one_of(st.none(), st.integers(1, (1 << 64) - 1), st.text(max_size=8)),
    parameters,
    st.one_of(st.none(), st.lists(names, min_size=1, max_size=3)),
    st.lists(tensors(), max_size=3),
)
responses = st.one_of(
    st.lists(tensors(), max_size=3).map(lambda outputs: ResponseMeta(wire.STATUS_OUTPUTS, outputs)),
    st.builds(ResponseMeta, st.just(wire.STATUS_ERROR), st.just([]), st.integers(0, 7), st.text(max_size=20)),
    st.just(ResponseMeta(wire.STATUS_NONE, [])),
)


def frame(kind: int, meta: bytes, count: int) -> bytes:
    header = Header(kind, count=count, seq=3, region_id=1, peer_region_id=2)
    return wire.encode_message(header, meta, DATA_LENGTH) + bytes(DATA_LENGTH)


def decode(raw: bytes):
    header = wire.decode_header(raw)
    return decode_body(header, raw)


@given(st.lists(requests, max_size=4))
def test_batches_round_trip(batch):
    assert decode(frame(wire.KIND_BATCH, wire.encode_batch(batch), len(batch))) == batch


@given(st.lists(responses, max_size=4))
def test_replies_round_trip(reply):
    assert decode(frame(wire.KIND_REPLY, wire.encode_reply(reply), len(reply))) == reply


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.lists(requests, min_size=1, max_size=3).map(lambda b: frame(wire.KIND_BATCH, wire.encode_batch(b), len(b))),
        st.lists(responses, min_size=1, max_size=3).map(lambda r: frame(wire.KIND_REPLY, wire.encode_reply(r), len(r))),
    ),
    st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=8),
    st.integers(0, 1 << 16),
)
def test_hostile_bytes_raise_wire_errors_only(raw, changes, cut):
    data = bytearray(raw)
    for position, value in changes:
        data[position % len(data)] = value
    for candidate in (bytes(data), bytes(data[: cut % (len(data) + 1)])):
        try:
            decode(candidate)
        except WireError:
            pass
        except Exception as error:  # noqa: BLE001 - the property: nothing but WireError escapes
            raise AssertionError(f"{type(error).__name__}: {error}") from error


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
