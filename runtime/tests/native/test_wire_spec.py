"""The Python codec against the specification and the golden messages that the Rust backend checks too.

``TRITONRT_UPDATE_GOLDEN=1`` rewrites the golden .bin files from vectors.json (then the Rust tests must agree).
"""

from __future__ import annotations

import ctypes
import json
import os

import pytest
from native_testlib import GOLDEN_DIR, spec_constants

from tritonrt.proxy import wire
from tritonrt.proxy.wire import Header, Hello, RequestMeta, ResponseMeta, TensorMeta, Welcome
from tritonrt.proxy.wire_decode import decode_body

VECTORS = json.loads((GOLDEN_DIR / "vectors.json").read_text())
_PARAMETER_TYPES = {"string": str, "int": int, "bool": bool, "double": float}
_STATUS = {"outputs": wire.STATUS_OUTPUTS, "error": wire.STATUS_ERROR, "none": wire.STATUS_NONE}


def _tensor(spec: dict) -> TensorMeta:
    return TensorMeta(
        spec["name"], spec["dtype"], spec["location"], spec["offset"], spec["byte_length"], tuple(spec["shape"])
    )


def _request(r: dict) -> RequestMeta:
    return RequestMeta(
        r["id"], r["flags"], r["correlation"],
        {key: _PARAMETER_TYPES[kind_](value) for key, kind_, value in r["parameters"]},
        r["requested_outputs"] or None, [_tensor(t) for t in r["inputs"]], r["trace_context"],
    )  # fmt: skip


def _response(r: dict) -> ResponseMeta:
    return ResponseMeta(
        _STATUS[r["status"]], [_tensor(t) for t in r.get("outputs", [])], r.get("code", 0), r.get("message", "")
    )


def logical(vector: dict):
    """(header, body, data) of a vector as the Python codec represents them."""
    h, b = vector["header"], vector["body"]
    kind = getattr(wire, f"KIND_{h['kind']}")
    data = bytes.fromhex(vector.get("data_hex", ""))
    if kind == wire.KIND_HELLO:
        body = Hello(**b)
    elif kind == wire.KIND_WELCOME:
        body = Welcome(**b)
    elif kind == wire.KIND_REFUSE:
        body = b["message"]
    elif kind == wire.KIND_BATCH:
        body = [_request(r) for r in b["requests"]]
    elif kind == wire.KIND_REPLY:
        body = [_response(r) for r in b["responses"]]
    elif kind == wire.KIND_INFER:
        fields = ("call_id", "call_flags", "model_version", "timeout_us", "model_name")
        body = wire.Call(*(b[key] for key in fields), _request(b["request"]))
    elif kind == wire.KIND_INFER_RESPONSE:
        body = wire.CallResponses(b["call_id"], [_response(r) for r in b["responses"]])
    elif kind == wire.KIND_INFER_CANCEL:
        body = b["call_id"]
    elif kind == wire.KIND_CONTROL:
        files = tuple((path, offset, length) for path, offset, length in b["files"])
        body = wire.Control(b["call_id"], b["op"], b["model_version"], b["model_name"], b["config"], files)
    elif kind == wire.KIND_CONTROL_RESULT:
        body = wire.ControlResult(b["call_id"], _STATUS[b["status"]], b["code"], b["ready"], b["message"])
    elif kind == wire.KIND_BATCH_ERROR:
        body = (b["code"], b["message"])
    elif kind == wire.KIND_CANCEL:
        body = b["indices"]
    elif kind == wire.KIND_METRICS:
        body = [
            wire.MetricUpdate(
                m["family_kind"], m["op"], m["value"], m["name"], m["description"],
                tuple((key, value) for key, value in m["labels"]), tuple(m["buckets"]),
            )
            for m in b["metrics"]
        ]  # fmt: skip
    else:
        body = h["count"]
    if kind in (wire.KIND_BATCH, wire.KIND_REPLY, wire.KIND_CANCEL, wire.KIND_METRICS):
        count = len(body)
    elif kind == wire.KIND_INFER:
        count = 1
    elif kind == wire.KIND_INFER_RESPONSE:
        count = len(body.responses)
    else:
        count = h.get("count", 0)
    fields = {key: h.get(key, 0) for key in ("flags", "seq", "region_size", "region_id", "peer_region_id")}
    return Header(kind, count=count, **fields), body, data


def encode(vector: dict) -> bytes:
    header, body, data = logical(vector)
    kind = header.kind
    meta = {
        wire.KIND_HELLO: wire.encode_hello,
        wire.KIND_WELCOME: wire.encode_welcome,
        wire.KIND_REFUSE: wire.encode_text,
        wire.KIND_BATCH: wire.encode_batch,
        wire.KIND_REPLY: wire.encode_reply,
        wire.KIND_BATCH_ERROR: lambda body: wire.encode_batch_error(*body),
        wire.KIND_CANCEL: wire.encode_cancel,
        wire.KIND_ACK: lambda body: b"",
        wire.KIND_METRICS: wire.encode_metrics,
        wire.KIND_INFER: wire.encode_infer,
        wire.KIND_INFER_RESPONSE: wire.encode_infer_response,
        wire.KIND_INFER_CANCEL: wire.encode_infer_cancel,
        wire.KIND_CONTROL: wire.encode_control,
        wire.KIND_CONTROL_RESULT: wire.encode_control_result,
    }[kind](body)
    return wire.encode_message(header, meta, len(data)) + data


def test_constants_match_the_specification():
    assert wire.CONSTANTS == spec_constants()


def test_constants_match_the_backend_library(native_library):
    library = ctypes.CDLL(str(native_library))
    library.tritonrt_wire_constants.restype = ctypes.c_char_p
    text = library.tritonrt_wire_constants().decode()
    compiled = {name: int(value, 0) for name, _, value in (line.partition(" = ") for line in text.splitlines())}
    assert compiled == spec_constants()


def test_layout_sizes_match_the_specification():
    constants = spec_constants()
    assert wire.HEADER_LAYOUT.size == constants["HEADER_SIZE"]
    assert wire.TENSOR_LAYOUT.size == constants["TENSOR_FIXED_SIZE"]
    assert wire.REQUEST_LAYOUT.size == constants["REQUEST_FIXED_SIZE"]
    assert wire.RESPONSE_LAYOUT.size == constants["RESPONSE_FIXED_SIZE"]
    assert wire.METRIC_LAYOUT.size == constants["METRIC_FIXED_SIZE"]
    assert wire.CALL_LAYOUT.size == constants["CALL_FIXED_SIZE"]
    assert wire.CONTROL_LAYOUT.size == constants["CONTROL_FIXED_SIZE"]
    assert wire.CONTROL_RESULT_LAYOUT.size == constants["CONTROL_RESULT_FIXED_SIZE"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_golden_message_is_encoded_byte_for_byte(vector):
    path = GOLDEN_DIR / f"{vector['name']}.bin"
    encoded = encode(vector)
    if os.environ.get("TRITONRT_UPDATE_GOLDEN") == "1":
        path.write_bytes(encoded)
    assert encoded == path.read_bytes()


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_golden_message_decodes_to_its_description(vector):
    raw = (GOLDEN_DIR / f"{vector['name']}.bin").read_bytes()
    header, body, data = logical(vector)
    decoded = wire.decode_header(raw)
    assert decoded._replace(meta_length=0, data_length=0) == header
    assert decoded.total_length == len(raw)
    assert decode_body(decoded, raw) == body
    assert raw[decoded.data_start :] == data


def test_the_golden_set_covers_every_kind():
    kinds = {getattr(wire, f"KIND_{vector['header']['kind']}") for vector in VECTORS}
    assert kinds == {value for name, value in wire.CONSTANTS.items() if name.startswith("KIND_")}
