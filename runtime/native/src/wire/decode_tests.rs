//! Round trips and refusals of the checked decoder.

use super::*;

fn sample_batch() -> Vec<Request<'static>> {
    vec![
        Request {
            id: "r1",
            trace_context: r#"{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#,
            flags: 0,
            correlation: Correlation::None,
            parameters: vec![
                ("s", Parameter::String("x")),
                ("i", Parameter::Int(-3)),
                ("b", Parameter::Bool(true)),
                ("d", Parameter::Double(0.5)),
            ],
            requested_outputs: vec!["OUT"],
            inputs: vec![Tensor {
                name: "IN",
                dtype: DataType::Fp32,
                location: LOCATION_INLINE,
                offset: 0,
                byte_length: 8,
                shape: Cow::Owned(vec![1, 2]),
            }],
        },
        Request {
            id: "",
            trace_context: "",
            flags: 3,
            correlation: Correlation::String("seq-7"),
            parameters: vec![],
            requested_outputs: vec![],
            inputs: vec![Tensor {
                name: "IN",
                dtype: DataType::Bytes,
                location: LOCATION_SENDER_REGION,
                offset: 64,
                byte_length: 9,
                shape: Cow::Owned(vec![1]),
            }],
        },
    ]
}

fn sample_metrics() -> Vec<Metric<'static>> {
    vec![
        Metric {
            family_kind: METRIC_COUNTER,
            op: METRIC_ADD,
            value: 2.0,
            name: "app_total",
            description: "d",
            labels: vec![("model", "m")],
            buckets: vec![],
        },
        Metric {
            family_kind: METRIC_HISTOGRAM,
            op: METRIC_OBSERVE,
            value: 0.3,
            name: "app:seconds",
            description: "",
            labels: vec![],
            buckets: vec![0.1, 1.0],
        },
    ]
}

fn framed(body: &Body<'_>, data: &[u8], region_id: u32) -> (Header, Vec<u8>) {
    let mut out = Vec::new();
    encode(&Header { seq: 4, region_id, ..Header::default() }, body, data, &mut out);
    let header = Header::decode(out[..HEADER_SIZE].try_into().unwrap()).unwrap();
    (header, out)
}

#[test]
fn every_kind_round_trips() {
    let bodies = vec![
        Body::Hello(Hello {
            instance_index: 1,
            max_batch_size: 8,
            api_major: 1,
            api_minor: 19,
            model_name: "m",
            token: "t",
            backend_version: "v",
        }),
        Body::Welcome(Welcome {
            worker_pid: 7,
            inline_threshold: 65536,
            spin_us: 200,
            region_limit: 1 << 30,
            worker_version: "w",
        }),
        Body::Refuse("no"),
        Body::Batch(sample_batch()),
        Body::Reply(vec![
            Response::Outputs(vec![Tensor {
                name: "OUT",
                dtype: DataType::Bool,
                location: LOCATION_RECEIVER_REGION,
                offset: 3,
                byte_length: 2,
                shape: Cow::Owned(vec![2]),
            }]),
            Response::Error { code: ERROR_INVALID_ARG, message: "bad" },
            Response::Nothing,
        ]),
        Body::BatchError { code: ERROR_INTERNAL, message: "boom" },
        Body::Cancel(vec![0, 5]),
        Body::Ack(3),
        Body::Metrics(sample_metrics()),
        Body::Infer(Call {
            call_id: 5,
            call_flags: CALL_DECOUPLED,
            model_version: -1,
            timeout_us: 250_000,
            model_name: "identity",
            request: sample_batch().remove(1),
        }),
        Body::InferResponse { call_id: 5, responses: vec![Response::Error { code: ERROR_NOT_FOUND, message: "x" }] },
        Body::InferResponse { call_id: 5, responses: vec![] },
        Body::InferCancel(5),
        Body::Control(Control {
            call_id: 9,
            op: CONTROL_LOAD,
            model_version: -1,
            model_name: "simple",
            config: "{}",
            files: vec![File { path: "1/model.onnx", offset: 2, length: 6 }],
        }),
        Body::ControlResult(ControlResult { call_id: 9, error: None, ready: true }),
        Body::ControlResult(ControlResult { call_id: 9, error: Some((ERROR_NOT_FOUND, "no")), ready: false }),
    ];
    for body in bodies {
        let mut out = Vec::new();
        let header = Header { seq: 4, region_id: 1, peer_region_id: 2, ..Header::default() };
        encode(&header, &body, &[0; 8], &mut out);
        let decoded_header = Header::decode(out[..HEADER_SIZE].try_into().unwrap()).unwrap();
        assert_eq!(out.len(), decoded_header.total_length());
        let meta = &out[HEADER_SIZE..HEADER_SIZE + decoded_header.meta_length as usize];
        assert_eq!(decode_body(&decoded_header, meta).unwrap(), body);
    }
}

#[test]
fn inline_tensors_must_lie_in_the_data_section() {
    let mut batch = sample_batch();
    batch.truncate(1);
    batch[0].inputs[0].offset = 1;
    let (header, out) = framed(&Body::Batch(batch), &[0; 8], 0);
    let error = decode_body(&header, &out[HEADER_SIZE..HEADER_SIZE + header.meta_length as usize]).unwrap_err();
    assert!(error.to_string().contains("outside the 8-byte data section"), "{error}");
}

#[test]
fn regional_tensors_need_a_region() {
    let (header, out) = framed(&Body::Batch(sample_batch()), &[0; 8], 0);
    let error = decode_body(&header, &out[HEADER_SIZE..HEADER_SIZE + header.meta_length as usize]).unwrap_err();
    assert!(error.to_string().contains("names none"), "{error}");
}

#[test]
fn counts_cannot_size_allocations_beyond_the_message() {
    let header = Header { kind: KIND_BATCH, count: MAX_COUNT, meta_length: 10, ..Header::default() };
    let error = decode_body(&header, &[0; 10]).unwrap_err();
    assert!(error.to_string().contains("cannot fit"), "{error}");
}

#[test]
fn shape_and_length_must_agree() {
    let mut batch = sample_batch();
    batch.truncate(1);
    batch[0].inputs[0].shape = Cow::Owned(vec![1, 1 << 62]);
    let (header, out) = framed(&Body::Batch(batch), &[0; 8], 0);
    let error = decode_body(&header, &out[HEADER_SIZE..HEADER_SIZE + header.meta_length as usize]).unwrap_err();
    assert!(error.to_string().contains("2^64 bytes"), "{error}");
}
