//! The metadata records of each message kind, as Rust values (`encode` writes them, `decode` reads them).

use std::borrow::Cow;

use super::*;
use crate::dtype::DataType;

/// A tensor descriptor: where its bytes are, what they hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor<'a> {
    pub name: &'a str,
    pub dtype: DataType,
    pub location: u8,
    pub offset: u64,
    pub byte_length: u64,
    pub shape: Cow<'a, [i64]>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Parameter<'a> {
    String(&'a str),
    Int(i64),
    Bool(bool),
    Double(f64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Correlation<'a> {
    None,
    Uint(u64),
    String(&'a str),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Request<'a> {
    pub id: &'a str,
    pub flags: u32,
    pub correlation: Correlation<'a>,
    pub parameters: Vec<(&'a str, Parameter<'a>)>,
    /// Empty: every output.
    pub requested_outputs: Vec<&'a str>,
    pub inputs: Vec<Tensor<'a>>,
    /// Triton's trace context of the request (OpenTelemetry: JSON of W3C headers); empty when not traced.
    pub trace_context: &'a str,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Response<'a> {
    Outputs(Vec<Tensor<'a>>),
    Error { code: u8, message: &'a str },
    Nothing,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello<'a> {
    pub instance_index: u32,
    pub max_batch_size: u32,
    pub api_major: u32,
    pub api_minor: u32,
    pub model_name: &'a str,
    pub token: &'a str,
    pub backend_version: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome<'a> {
    pub worker_pid: u32,
    pub inline_threshold: u32,
    pub spin_us: u32,
    pub region_limit: u64,
    pub worker_version: &'a str,
}

/// One update of one metric (a METRICS record), checked: a Prometheus name, label names, a finite value, the
/// operation its kind allows, increasing finite buckets for a histogram (none for the other kinds).
#[derive(Debug, Clone, PartialEq)]
pub struct Metric<'a> {
    pub family_kind: u8,
    pub op: u8,
    pub value: f64,
    pub name: &'a str,
    pub description: &'a str,
    pub labels: Vec<(&'a str, &'a str)>,
    pub buckets: Vec<f64>,
}

/// A message's metadata, by kind.
/// A call of another model (INFER): who is called and how; the request follows.
#[derive(Debug, Clone, PartialEq)]
pub struct Call<'a> {
    pub call_id: u64,
    pub call_flags: u32,
    /// -1: the server's choice.
    pub model_version: i64,
    /// 0: none.
    pub timeout_us: u64,
    pub model_name: &'a str,
    pub request: Request<'a>,
}

/// A file of a model to load: its path in the model's folder, and where its bytes lie in the data section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File<'a> {
    pub path: &'a str,
    pub offset: u64,
    pub length: u64,
}

/// A request to the model repository (CONTROL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control<'a> {
    pub call_id: u64,
    pub op: u8,
    pub model_version: i64,
    pub model_name: &'a str,
    pub config: &'a str,
    pub files: Vec<File<'a>>,
}

/// The answer to a CONTROL: done (with `ready` for CONTROL_IS_READY), or an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlResult<'a> {
    pub call_id: u64,
    pub error: Option<(u8, &'a str)>,
    pub ready: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Body<'a> {
    Hello(Hello<'a>),
    Welcome(Welcome<'a>),
    Refuse(&'a str),
    Batch(Vec<Request<'a>>),
    Reply(Vec<Response<'a>>),
    BatchError {
        code: u8,
        message: &'a str,
    },
    Cancel(Vec<u32>),
    /// The count of replies processed.
    Ack(u32),
    Metrics(Vec<Metric<'a>>),
    Infer(Call<'a>),
    InferResponse {
        call_id: u64,
        responses: Vec<Response<'a>>,
    },
    InferCancel(u64),
    Control(Control<'a>),
    ControlResult(ControlResult<'a>),
}

impl Body<'_> {
    pub fn kind(&self) -> u16 {
        match self {
            Body::Hello(_) => KIND_HELLO,
            Body::Welcome(_) => KIND_WELCOME,
            Body::Refuse(_) => KIND_REFUSE,
            Body::Batch(_) => KIND_BATCH,
            Body::Reply(_) => KIND_REPLY,
            Body::BatchError { .. } => KIND_BATCH_ERROR,
            Body::Cancel(_) => KIND_CANCEL,
            Body::Ack(_) => KIND_ACK,
            Body::Metrics(_) => KIND_METRICS,
            Body::Infer(_) => KIND_INFER,
            Body::InferResponse { .. } => KIND_INFER_RESPONSE,
            Body::InferCancel(_) => KIND_INFER_CANCEL,
            Body::Control(_) => KIND_CONTROL,
            Body::ControlResult(_) => KIND_CONTROL_RESULT,
        }
    }

    /// The header's count field for this body.
    pub(super) fn count(&self) -> u32 {
        match self {
            Body::Batch(requests) => requests.len() as u32,
            Body::Reply(responses) => responses.len() as u32,
            Body::Cancel(indices) => indices.len() as u32,
            Body::Ack(count) => *count,
            Body::Metrics(metrics) => metrics.len() as u32,
            Body::Infer(_) => 1,
            Body::InferResponse { responses, .. } => responses.len() as u32,
            _ => 0,
        }
    }
}
