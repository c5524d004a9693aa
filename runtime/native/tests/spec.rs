//! The Rust codec against the specification (runtime/docs/wire-protocol.md) and the golden messages that the
//! Python side checks too (tests/golden/: vectors.json describes each message, <name>.bin holds its bytes).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::PathBuf;

use triton_tritonrt::dtype::DataType;
use triton_tritonrt::json::{self, Json};
use triton_tritonrt::wire::{
    self, decode_body, encode, Body, Call, Control, ControlResult, Correlation, File, Header, Hello, Metric, Parameter,
    Request, Response, Tensor, Welcome, HEADER_SIZE, METRIC_ADD, METRIC_COUNTER, METRIC_HISTOGRAM, METRIC_OBSERVE,
    METRIC_SET,
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn spec_constants() -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(root().join("../docs/wire-protocol.md")).expect("the specification");
    let block =
        text.split("```constants\n").nth(1).and_then(|rest| rest.split("```").next()).expect("a constants block");
    block
        .lines()
        .map(|line| {
            let (name, value) = line.split_once(" = ").expect("NAME = value");
            let value = match value.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
                None => value.parse().unwrap(),
            };
            (name.to_string(), value)
        })
        .collect()
}

#[test]
fn constants_match_the_specification() {
    let ours: BTreeMap<String, u64> = wire::CONSTANTS.iter().map(|(name, value)| (name.to_string(), *value)).collect();
    assert_eq!(ours, spec_constants());
    let text: BTreeMap<String, u64> = wire::constants_text()
        .lines()
        .map(|line| line.split_once(" = ").unwrap())
        .map(|(name, value)| {
            (
                name.to_string(),
                value
                    .strip_prefix("0x")
                    .map_or_else(|| value.parse().unwrap(), |h| u64::from_str_radix(h, 16).unwrap()),
            )
        })
        .collect();
    assert_eq!(text, spec_constants());
}

fn int(value: &Json) -> i64 {
    value.as_i64().unwrap_or_else(|| panic!("an integer, not {value:?}"))
}

fn text(value: &Json) -> &str {
    value.as_str().unwrap_or_else(|| panic!("a string, not {value:?}"))
}

fn float(value: &Json) -> f64 {
    match value {
        Json::Number(number) => number.parse().unwrap(),
        other => panic!("a number, not {other:?}"),
    }
}

fn field<'a>(object: &'a Json, key: &str) -> &'a Json {
    object.get(key).unwrap_or_else(|| panic!("no {key:?} in {object:?}"))
}

fn tensor(spec: &Json) -> Tensor<'_> {
    Tensor {
        name: text(field(spec, "name")),
        dtype: DataType::from_code(int(field(spec, "dtype")) as u32).unwrap(),
        location: int(field(spec, "location")) as u8,
        offset: int(field(spec, "offset")) as u64,
        byte_length: int(field(spec, "byte_length")) as u64,
        shape: Cow::Owned(field(spec, "shape").as_array().unwrap().iter().map(int).collect()),
    }
}

/// A vector's header and body as the Rust codec represents them, and its data section.
fn request(r: &Json) -> Request<'_> {
    Request {
        id: text(field(r, "id")),
        trace_context: text(field(r, "trace_context")),
        flags: int(field(r, "flags")) as u32,
        correlation: match field(r, "correlation") {
            Json::Null => Correlation::None,
            Json::String(id) => Correlation::String(id),
            other => Correlation::Uint(int(other) as u64),
        },
        parameters: field(r, "parameters")
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let p = p.as_array().unwrap();
                let value = match text(&p[1]) {
                    "string" => Parameter::String(text(&p[2])),
                    "int" => Parameter::Int(int(&p[2])),
                    "bool" => Parameter::Bool(p[2].as_bool().unwrap()),
                    _ => Parameter::Double(float(&p[2])),
                };
                (text(&p[0]), value)
            })
            .collect(),
        requested_outputs: field(r, "requested_outputs").as_array().unwrap().iter().map(text).collect(),
        inputs: field(r, "inputs").as_array().unwrap().iter().map(tensor).collect(),
    }
}

fn response(r: &Json) -> Response<'_> {
    match text(field(r, "status")) {
        "outputs" => Response::Outputs(field(r, "outputs").as_array().unwrap().iter().map(tensor).collect()),
        "error" => Response::Error { code: int(field(r, "code")) as u8, message: text(field(r, "message")) },
        _ => Response::Nothing,
    }
}

fn logical(vector: &Json) -> (Header, Body<'_>, Vec<u8>) {
    let h = field(vector, "header");
    let b = field(vector, "body");
    let number = |key: &str| h.get(key).map_or(0, int) as u64;
    let kind_name = text(field(h, "kind"));
    let kind = wire::CONSTANTS.iter().find(|(name, _)| *name == format!("KIND_{kind_name}")).unwrap().1 as u16;
    let body = match kind {
        wire::KIND_HELLO => Body::Hello(Hello {
            instance_index: int(field(b, "instance_index")) as u32,
            max_batch_size: int(field(b, "max_batch_size")) as u32,
            api_major: int(field(b, "api_major")) as u32,
            api_minor: int(field(b, "api_minor")) as u32,
            model_name: text(field(b, "model_name")),
            token: text(field(b, "token")),
            backend_version: text(field(b, "backend_version")),
        }),
        wire::KIND_WELCOME => Body::Welcome(Welcome {
            worker_pid: int(field(b, "worker_pid")) as u32,
            inline_threshold: int(field(b, "inline_threshold")) as u32,
            spin_us: int(field(b, "spin_us")) as u32,
            region_limit: int(field(b, "region_limit")) as u64,
            worker_version: text(field(b, "worker_version")),
        }),
        wire::KIND_REFUSE => Body::Refuse(text(field(b, "message"))),
        wire::KIND_BATCH => Body::Batch(field(b, "requests").as_array().unwrap().iter().map(request).collect()),
        wire::KIND_REPLY => Body::Reply(field(b, "responses").as_array().unwrap().iter().map(response).collect()),
        wire::KIND_BATCH_ERROR => {
            Body::BatchError { code: int(field(b, "code")) as u8, message: text(field(b, "message")) }
        }
        wire::KIND_CANCEL => {
            Body::Cancel(field(b, "indices").as_array().unwrap().iter().map(|i| int(i) as u32).collect())
        }
        wire::KIND_METRICS => Body::Metrics(
            field(b, "metrics")
                .as_array()
                .unwrap()
                .iter()
                .map(|m| Metric {
                    family_kind: int(field(m, "family_kind")) as u8,
                    op: int(field(m, "op")) as u8,
                    value: float(field(m, "value")),
                    name: text(field(m, "name")),
                    description: text(field(m, "description")),
                    labels: field(m, "labels")
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|pair| {
                            let pair = pair.as_array().unwrap();
                            (text(&pair[0]), text(&pair[1]))
                        })
                        .collect(),
                    buckets: field(m, "buckets").as_array().unwrap().iter().map(float).collect(),
                })
                .collect(),
        ),
        wire::KIND_INFER => Body::Infer(Call {
            call_id: int(field(b, "call_id")) as u64,
            call_flags: int(field(b, "call_flags")) as u32,
            model_version: int(field(b, "model_version")),
            timeout_us: int(field(b, "timeout_us")) as u64,
            model_name: text(field(b, "model_name")),
            request: request(field(b, "request")),
        }),
        wire::KIND_INFER_RESPONSE => Body::InferResponse {
            call_id: int(field(b, "call_id")) as u64,
            responses: field(b, "responses").as_array().unwrap().iter().map(response).collect(),
        },
        wire::KIND_INFER_CANCEL => Body::InferCancel(int(field(b, "call_id")) as u64),
        wire::KIND_CONTROL => Body::Control(Control {
            call_id: int(field(b, "call_id")) as u64,
            op: int(field(b, "op")) as u8,
            model_version: int(field(b, "model_version")),
            model_name: text(field(b, "model_name")),
            config: text(field(b, "config")),
            files: field(b, "files")
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    let f = f.as_array().unwrap();
                    File { path: text(&f[0]), offset: int(&f[1]) as u64, length: int(&f[2]) as u64 }
                })
                .collect(),
        }),
        wire::KIND_CONTROL_RESULT => Body::ControlResult(ControlResult {
            call_id: int(field(b, "call_id")) as u64,
            error: (text(field(b, "status")) == "error")
                .then(|| (int(field(b, "code")) as u8, text(field(b, "message")))),
            ready: int(field(b, "ready")) == 1,
        }),
        _ => Body::Ack(number("count") as u32),
    };
    let header = Header {
        kind,
        flags: number("flags") as u32,
        seq: number("seq"),
        region_size: number("region_size"),
        region_id: number("region_id") as u32,
        peer_region_id: number("peer_region_id") as u32,
        ..Header::default()
    };
    let data = vector.get("data_hex").map_or(Vec::new(), |hex| {
        let hex = text(hex);
        (0..hex.len()).step_by(2).map(|at| u8::from_str_radix(&hex[at..at + 2], 16).unwrap()).collect()
    });
    (header, body, data)
}

fn vectors() -> Json {
    json::parse(&std::fs::read_to_string(root().join("tests/golden/vectors.json")).unwrap()).unwrap()
}

#[test]
fn golden_messages_encode_byte_for_byte_and_decode_to_their_description() {
    let vectors = vectors();
    let vectors = vectors.as_array().unwrap();
    assert_eq!(vectors.len(), 14, "one vector per kind");
    for vector in vectors {
        let name = text(field(vector, "name"));
        let raw = std::fs::read(root().join(format!("tests/golden/{name}.bin"))).unwrap();
        let (header, body, data) = logical(vector);
        let mut encoded = Vec::new();
        encode(&header, &body, &data, &mut encoded);
        assert_eq!(encoded, raw, "{name}: the Rust encoder differs from the golden bytes");
        let decoded = Header::decode(raw[..HEADER_SIZE].try_into().unwrap()).unwrap();
        assert_eq!(decoded.total_length(), raw.len(), "{name}");
        assert_eq!(
            (decoded.kind, decoded.flags, decoded.seq, decoded.region_size),
            (header.kind, header.flags, header.seq, header.region_size),
            "{name}"
        );
        assert_eq!((decoded.region_id, decoded.peer_region_id), (header.region_id, header.peer_region_id), "{name}");
        let meta = &raw[HEADER_SIZE..HEADER_SIZE + decoded.meta_length as usize];
        assert_eq!(decode_body(&decoded, meta).unwrap(), body, "{name}");
        assert_eq!(&raw[decoded.data_start()..], &data[..], "{name}");
    }
}

/// The Metric record's rules (the specification's table): each refused with what is wrong.
#[test]
fn metric_updates_are_checked() {
    type Change = fn(&mut Metric<'static>);
    let cases: Vec<(Change, &str)> = vec![
        (|m| m.value = -1.0, "not one a kind 0 allows"),
        (|m| m.op = METRIC_SET, "not one a kind 0 allows"),
        (|m| m.value = f64::NAN, "not a finite number"),
        (|m| m.name = "2x", "not a Prometheus metric name"),
        (|m| m.labels = vec![("__x", "v")], "not a label name"),
        (|m| m.labels = vec![("a", "1"), ("a", "2")], "there twice"),
        (|m| m.buckets = vec![1.0], "1 buckets for a metric of kind 0"),
        (|m| m.family_kind = 7, "unknown metric kind 7"),
        (
            |m| {
                m.family_kind = METRIC_HISTOGRAM;
                m.op = METRIC_OBSERVE;
                m.buckets = vec![1.0, 1.0];
            },
            "buckets must increase",
        ),
        (
            |m| {
                m.family_kind = METRIC_HISTOGRAM;
                m.op = METRIC_OBSERVE;
            },
            "0 buckets for a metric of kind 2",
        ),
    ];
    for (change, expected) in cases {
        let mut metric = Metric {
            family_kind: METRIC_COUNTER,
            op: METRIC_ADD,
            value: 2.0,
            name: "app_total",
            description: "d",
            labels: vec![("model", "m")],
            buckets: vec![],
        };
        change(&mut metric);
        let mut out = Vec::new();
        encode(&Header { seq: 4, ..Header::default() }, &Body::Metrics(vec![metric]), &[], &mut out);
        let header = Header::decode(out[..HEADER_SIZE].try_into().unwrap()).unwrap();
        let error = decode_body(&header, &out[HEADER_SIZE..HEADER_SIZE + header.meta_length as usize]).unwrap_err();
        assert!(error.to_string().contains(expected), "{expected}: {error}");
    }
}
