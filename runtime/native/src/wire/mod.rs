//! The wire protocol, version 4, as defined in `runtime/docs/wire-protocol.md` (the one definition; the
//! tests check these constants and the golden messages against it).
//!
//! Decoding never trusts the peer: every count, length, offset, type and name is checked before use, and a
//! malformed message is an error value, never a panic.

mod decode;
mod encode;
mod header;
mod records;

pub use decode::decode_body;
pub use encode::{encode, encode_head};
pub use header::{Header, HEADER_SIZE};
pub use records::{
    Body, Call, Control, ControlResult, Correlation, File, Hello, Metric, Parameter, Request, Response, Tensor, Welcome,
};

use std::fmt;

pub const MAGIC: u32 = 0x5754_5254;
pub const VERSION: u16 = 4;
pub const DATA_ALIGN: usize = 64;

pub const KIND_HELLO: u16 = 1;
pub const KIND_WELCOME: u16 = 2;
pub const KIND_REFUSE: u16 = 3;
pub const KIND_BATCH: u16 = 4;
pub const KIND_REPLY: u16 = 5;
pub const KIND_BATCH_ERROR: u16 = 6;
pub const KIND_CANCEL: u16 = 7;
pub const KIND_ACK: u16 = 8;
pub const KIND_METRICS: u16 = 9;
pub const KIND_INFER: u16 = 10;
pub const KIND_INFER_RESPONSE: u16 = 11;
pub const KIND_INFER_CANCEL: u16 = 12;
pub const KIND_CONTROL: u16 = 13;
pub const KIND_CONTROL_RESULT: u16 = 14;

pub const FLAG_FINAL: u32 = 1;
pub const FLAG_RETAINED: u32 = 2;
pub const FLAG_NEW_REGION: u32 = 4;
pub const FLAG_DECOUPLED: u32 = 8;
pub const FLAG_RERUN: u32 = 16;

pub const LOCATION_INLINE: u8 = 0;
pub const LOCATION_SENDER_REGION: u8 = 1;
pub const LOCATION_RECEIVER_REGION: u8 = 2;

pub const STATUS_OUTPUTS: u8 = 0;
pub const STATUS_ERROR: u8 = 1;
pub const STATUS_NONE: u8 = 2;

pub const PARAMETER_STRING: u8 = 0;
pub const PARAMETER_INT: u8 = 1;
pub const PARAMETER_BOOL: u8 = 2;
pub const PARAMETER_DOUBLE: u8 = 3;

pub const CORRELATION_NONE: u8 = 0;
pub const CORRELATION_UINT: u8 = 1;
pub const CORRELATION_STRING: u8 = 2;

pub const ERROR_UNKNOWN: u8 = 0;
pub const ERROR_INTERNAL: u8 = 1;
pub const ERROR_NOT_FOUND: u8 = 2;
pub const ERROR_INVALID_ARG: u8 = 3;
pub const ERROR_UNAVAILABLE: u8 = 4;
pub const ERROR_UNSUPPORTED: u8 = 5;
pub const ERROR_ALREADY_EXISTS: u8 = 6;
pub const ERROR_CANCELLED: u8 = 7;

pub const MAX_META_BYTES: u32 = 16 << 20;
pub const MAX_DATA_BYTES: u64 = 256 << 20;
pub const MAX_COUNT: u32 = 1 << 16;
pub const MAX_NDIM: u8 = 32;
pub const MAX_NAME_BYTES: u32 = 4096;
pub const MAX_TEXT_BYTES: u32 = 1 << 20;
pub const MAX_REGION_BYTES: u64 = 1 << 40;
pub const TENSOR_FIXED_SIZE: usize = 24;
pub const REQUEST_FIXED_SIZE: usize = 32;
pub const RESPONSE_FIXED_SIZE: usize = 8;
pub const METRIC_FIXED_SIZE: usize = 16;
pub const METRIC_COUNTER: u8 = 0;
pub const METRIC_GAUGE: u8 = 1;
pub const METRIC_HISTOGRAM: u8 = 2;
pub const METRIC_ADD: u8 = 0;
pub const METRIC_SET: u8 = 1;
pub const METRIC_OBSERVE: u8 = 2;
pub const MAX_LABELS: u16 = 64;
pub const MAX_BUCKETS: u32 = 256;
pub const CALL_FIXED_SIZE: usize = 32;
pub const CALL_DECOUPLED: u32 = 1;
pub const CONTROL_FIXED_SIZE: usize = 24;
pub const CONTROL_RESULT_FIXED_SIZE: usize = 16;
pub const CONTROL_IS_READY: u8 = 0;
pub const CONTROL_LOAD: u8 = 1;
pub const CONTROL_UNLOAD: u8 = 2;
pub const CONTROL_UNLOAD_DEPENDENTS: u8 = 3;
pub const MAX_CALLS: u32 = 1024;

/// Every constant of the specification's constants block, by its name there.
pub const CONSTANTS: &[(&str, u64)] = &[
    ("MAGIC", MAGIC as u64),
    ("VERSION", VERSION as u64),
    ("HEADER_SIZE", HEADER_SIZE as u64),
    ("DATA_ALIGN", DATA_ALIGN as u64),
    ("KIND_HELLO", KIND_HELLO as u64),
    ("KIND_WELCOME", KIND_WELCOME as u64),
    ("KIND_REFUSE", KIND_REFUSE as u64),
    ("KIND_BATCH", KIND_BATCH as u64),
    ("KIND_REPLY", KIND_REPLY as u64),
    ("KIND_BATCH_ERROR", KIND_BATCH_ERROR as u64),
    ("KIND_CANCEL", KIND_CANCEL as u64),
    ("KIND_ACK", KIND_ACK as u64),
    ("KIND_METRICS", KIND_METRICS as u64),
    ("KIND_INFER", KIND_INFER as u64),
    ("KIND_INFER_RESPONSE", KIND_INFER_RESPONSE as u64),
    ("KIND_INFER_CANCEL", KIND_INFER_CANCEL as u64),
    ("KIND_CONTROL", KIND_CONTROL as u64),
    ("KIND_CONTROL_RESULT", KIND_CONTROL_RESULT as u64),
    ("FLAG_FINAL", FLAG_FINAL as u64),
    ("FLAG_RETAINED", FLAG_RETAINED as u64),
    ("FLAG_NEW_REGION", FLAG_NEW_REGION as u64),
    ("FLAG_DECOUPLED", FLAG_DECOUPLED as u64),
    ("FLAG_RERUN", FLAG_RERUN as u64),
    ("LOCATION_INLINE", LOCATION_INLINE as u64),
    ("LOCATION_SENDER_REGION", LOCATION_SENDER_REGION as u64),
    ("LOCATION_RECEIVER_REGION", LOCATION_RECEIVER_REGION as u64),
    ("STATUS_OUTPUTS", STATUS_OUTPUTS as u64),
    ("STATUS_ERROR", STATUS_ERROR as u64),
    ("STATUS_NONE", STATUS_NONE as u64),
    ("PARAMETER_STRING", PARAMETER_STRING as u64),
    ("PARAMETER_INT", PARAMETER_INT as u64),
    ("PARAMETER_BOOL", PARAMETER_BOOL as u64),
    ("PARAMETER_DOUBLE", PARAMETER_DOUBLE as u64),
    ("CORRELATION_NONE", CORRELATION_NONE as u64),
    ("CORRELATION_UINT", CORRELATION_UINT as u64),
    ("CORRELATION_STRING", CORRELATION_STRING as u64),
    ("DTYPE_BOOL", 1),
    ("DTYPE_UINT8", 2),
    ("DTYPE_UINT16", 3),
    ("DTYPE_UINT32", 4),
    ("DTYPE_UINT64", 5),
    ("DTYPE_INT8", 6),
    ("DTYPE_INT16", 7),
    ("DTYPE_INT32", 8),
    ("DTYPE_INT64", 9),
    ("DTYPE_FP16", 10),
    ("DTYPE_FP32", 11),
    ("DTYPE_FP64", 12),
    ("DTYPE_BYTES", 13),
    ("DTYPE_BF16", 14),
    ("ERROR_UNKNOWN", ERROR_UNKNOWN as u64),
    ("ERROR_INTERNAL", ERROR_INTERNAL as u64),
    ("ERROR_NOT_FOUND", ERROR_NOT_FOUND as u64),
    ("ERROR_INVALID_ARG", ERROR_INVALID_ARG as u64),
    ("ERROR_UNAVAILABLE", ERROR_UNAVAILABLE as u64),
    ("ERROR_UNSUPPORTED", ERROR_UNSUPPORTED as u64),
    ("ERROR_ALREADY_EXISTS", ERROR_ALREADY_EXISTS as u64),
    ("ERROR_CANCELLED", ERROR_CANCELLED as u64),
    ("MAX_META_BYTES", MAX_META_BYTES as u64),
    ("MAX_DATA_BYTES", MAX_DATA_BYTES),
    ("MAX_COUNT", MAX_COUNT as u64),
    ("MAX_NDIM", MAX_NDIM as u64),
    ("MAX_NAME_BYTES", MAX_NAME_BYTES as u64),
    ("MAX_TEXT_BYTES", MAX_TEXT_BYTES as u64),
    ("MAX_REGION_BYTES", MAX_REGION_BYTES),
    ("TENSOR_FIXED_SIZE", TENSOR_FIXED_SIZE as u64),
    ("REQUEST_FIXED_SIZE", REQUEST_FIXED_SIZE as u64),
    ("RESPONSE_FIXED_SIZE", RESPONSE_FIXED_SIZE as u64),
    ("METRIC_FIXED_SIZE", METRIC_FIXED_SIZE as u64),
    ("METRIC_COUNTER", METRIC_COUNTER as u64),
    ("METRIC_GAUGE", METRIC_GAUGE as u64),
    ("METRIC_HISTOGRAM", METRIC_HISTOGRAM as u64),
    ("METRIC_ADD", METRIC_ADD as u64),
    ("METRIC_SET", METRIC_SET as u64),
    ("METRIC_OBSERVE", METRIC_OBSERVE as u64),
    ("MAX_LABELS", MAX_LABELS as u64),
    ("MAX_BUCKETS", MAX_BUCKETS as u64),
    ("CALL_FIXED_SIZE", CALL_FIXED_SIZE as u64),
    ("CALL_DECOUPLED", CALL_DECOUPLED as u64),
    ("CONTROL_FIXED_SIZE", CONTROL_FIXED_SIZE as u64),
    ("CONTROL_RESULT_FIXED_SIZE", CONTROL_RESULT_FIXED_SIZE as u64),
    ("CONTROL_IS_READY", CONTROL_IS_READY as u64),
    ("CONTROL_LOAD", CONTROL_LOAD as u64),
    ("CONTROL_UNLOAD", CONTROL_UNLOAD as u64),
    ("CONTROL_UNLOAD_DEPENDENTS", CONTROL_UNLOAD_DEPENDENTS as u64),
    ("MAX_CALLS", MAX_CALLS as u64),
];

/// The constants as the specification's block writes them (`NAME = value` lines).
pub fn constants_text() -> String {
    CONSTANTS
        .iter()
        .map(
            |(name, value)| {
                if *name == "MAGIC" {
                    format!("{name} = {value:#x}\n")
                } else {
                    format!("{name} = {value}\n")
                }
            },
        )
        .collect()
}

/// What is wrong with a message from the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// Not a tritonrt message at all (the stream is out of step): the connection cannot go on.
    BadMagic(u32),
    /// The peer speaks another version of the protocol.
    Version { peer: u16 },
    /// A header field out of its limits: the message cannot be framed, the connection cannot go on.
    BadFrame(String),
    /// The message is framed, but its content is malformed: its requests fail, the connection goes on.
    Malformed(String),
}

impl WireError {
    /// True when the stream can no longer be read in step (close the connection).
    pub fn breaks_stream(&self) -> bool {
        !matches!(self, WireError::Malformed(_))
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::BadMagic(magic) => write!(f, "not a tritonrt message (magic {magic:#010x})"),
            WireError::Version { peer } => write!(
                f,
                "the peer speaks tritonrt wire protocol version {peer}, this backend speaks version {VERSION}: install \
                 the tritonrt runtime and its backend library from the same release"
            ),
            WireError::BadFrame(detail) => write!(f, "bad message header: {detail}"),
            WireError::Malformed(detail) => write!(f, "malformed message: {detail}"),
        }
    }
}

impl std::error::Error for WireError {}

/// `value` rounded up to a multiple of `DATA_ALIGN`.
pub fn align(value: usize) -> usize {
    value.div_ceil(DATA_ALIGN) * DATA_ALIGN
}
