//! Checked decoding of the metadata records: every count, length, offset, type and name is checked before use.

use std::borrow::Cow;

use super::*;
use crate::dtype::{check_byte_length, DataType};

fn malformed(detail: impl Into<String>) -> WireError {
    WireError::Malformed(detail.into())
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize, what: &str) -> Result<&'a [u8], WireError> {
        let end = self.at.checked_add(count).filter(|end| *end <= self.bytes.len()).ok_or_else(|| {
            malformed(format!("{what} runs past the metadata's end ({} of {} bytes read)", self.at, self.bytes.len()))
        })?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }
    fn u8(&mut self, what: &str) -> Result<u8, WireError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self, what: &str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self, what: &str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }
    fn text(&mut self, length: u32, limit: u32, what: &str) -> Result<&'a str, WireError> {
        if length > limit {
            return Err(malformed(format!("{what} has {length} bytes (limit {limit})")));
        }
        let bytes = self.take(length as usize, what)?;
        std::str::from_utf8(bytes).map_err(|_| malformed(format!("{what} is not UTF-8")))
    }
    fn str(&mut self, limit: u32, what: &str) -> Result<&'a str, WireError> {
        let length = self.u32(what)?;
        self.text(length, limit, what)
    }
    fn name(&mut self, what: &str) -> Result<&'a str, WireError> {
        let length = self.u32(what)?;
        self.name_of(length, what)
    }
    fn name_of(&mut self, length: u32, what: &str) -> Result<&'a str, WireError> {
        let name = self.text(length, MAX_NAME_BYTES, what)?;
        if name.is_empty() || name.contains('\0') {
            return Err(malformed(format!("{what} {name:?} is empty or holds a NUL byte")));
        }
        Ok(name)
    }
    /// A count of records of at least `min_size` bytes each, checked against what is left to read, so that
    /// no peer-sent count sizes an allocation beyond the message itself.
    fn count(&self, count: u32, min_size: usize, what: &str) -> Result<usize, WireError> {
        let count = count as usize;
        if count.saturating_mul(min_size) > self.bytes.len() - self.at {
            return Err(malformed(format!(
                "{count} {what} cannot fit in the {} bytes left",
                self.bytes.len() - self.at
            )));
        }
        Ok(count)
    }
    fn tensor(&mut self, header: &Header, what: &str) -> Result<Tensor<'a>, WireError> {
        let name_length = self.u32(what)?;
        let code = self.u8(what)?;
        let dtype =
            DataType::from_code(code as u32).ok_or_else(|| malformed(format!("{what}: unknown data type {code}")))?;
        let location = self.u8(what)?;
        let ndim = self.u8(what)?;
        self.u8(what)?;
        let offset = self.u64(what)?;
        let byte_length = self.u64(what)?;
        if ndim > MAX_NDIM {
            return Err(malformed(format!("{what}: {ndim} dimensions (limit {MAX_NDIM})")));
        }
        let mut shape = Vec::with_capacity(ndim as usize);
        for _ in 0..ndim {
            shape.push(self.u64(what)? as i64);
        }
        let name = self.name_of(name_length, what)?;
        check_byte_length(dtype, &shape, byte_length).map_err(|e| malformed(format!("{what} {name:?}: {e}")))?;
        match location {
            LOCATION_INLINE => {
                let end = offset.checked_add(byte_length);
                if end.is_none_or(|end| end > header.data_length) {
                    return Err(malformed(format!(
                        "{what} {name:?}: bytes {offset}+{byte_length} lie outside the {}-byte data section",
                        header.data_length
                    )));
                }
            }
            LOCATION_SENDER_REGION if header.region_id == 0 => {
                return Err(malformed(format!(
                    "{what} {name:?} is in the sender's region, but the message names none"
                )));
            }
            LOCATION_RECEIVER_REGION if header.peer_region_id == 0 => {
                return Err(malformed(format!(
                    "{what} {name:?} is in the receiver's region, but the message names none"
                )));
            }
            LOCATION_SENDER_REGION | LOCATION_RECEIVER_REGION => {
                offset
                    .checked_add(byte_length)
                    .ok_or_else(|| malformed(format!("{what} {name:?}: offset overflows")))?;
            }
            other => return Err(malformed(format!("{what} {name:?}: unknown location {other}"))),
        }
        Ok(Tensor { name, dtype, location, offset, byte_length, shape: Cow::Owned(shape) })
    }
    fn tensors(&mut self, count: u32, header: &Header, what: &str) -> Result<Vec<Tensor<'a>>, WireError> {
        let count = self.count(count, TENSOR_FIXED_SIZE, what)?;
        (0..count).map(|_| self.tensor(header, what)).collect()
    }
    fn request(&mut self, header: &Header, index: usize) -> Result<Request<'a>, WireError> {
        let what = format!("request {index}");
        let input_count = self.u32(&what)?;
        let output_count = self.u32(&what)?;
        let parameter_count = self.u32(&what)?;
        let flags = self.u32(&what)?;
        let correlation_kind = self.u8(&what)?;
        self.take(7, &what)?;
        let correlation_id = self.u64(&what)?;
        let id = self.str(MAX_TEXT_BYTES, &format!("{what}: its id"))?;
        let correlation = match correlation_kind {
            CORRELATION_NONE => Correlation::None,
            CORRELATION_UINT => Correlation::Uint(correlation_id),
            CORRELATION_STRING => {
                Correlation::String(self.str(MAX_TEXT_BYTES, &format!("{what}: its correlation id"))?)
            }
            other => return Err(malformed(format!("{what}: unknown correlation id kind {other}"))),
        };
        let parameter_count = self.count(parameter_count, 6, &format!("parameters of {what}"))?;
        let mut parameters = Vec::with_capacity(parameter_count);
        for _ in 0..parameter_count {
            let kind = self.u8(&what)?;
            let key = self.name(&format!("{what}: a parameter's key"))?;
            let value = match kind {
                PARAMETER_STRING => Parameter::String(self.str(MAX_TEXT_BYTES, &format!("{what}: parameter {key:?}"))?),
                PARAMETER_INT => Parameter::Int(self.u64(&what)? as i64),
                PARAMETER_BOOL => match self.u8(&what)? {
                    0 => Parameter::Bool(false),
                    1 => Parameter::Bool(true),
                    other => return Err(malformed(format!("{what}: parameter {key:?} is a bool of value {other}"))),
                },
                PARAMETER_DOUBLE => Parameter::Double(f64::from_bits(self.u64(&what)?)),
                other => return Err(malformed(format!("{what}: parameter {key:?} has unknown type {other}"))),
            };
            parameters.push((key, value));
        }
        let output_count = self.count(output_count, 5, &format!("requested outputs of {what}"))?;
        let mut requested_outputs = Vec::with_capacity(output_count);
        for _ in 0..output_count {
            requested_outputs.push(self.name(&format!("{what}: a requested output"))?);
        }
        let inputs = self.tensors(input_count, header, &format!("{what}: input"))?;
        let trace_context = self.str(MAX_TEXT_BYTES, &format!("{what}: its trace context"))?;
        Ok(Request { id, flags, correlation, parameters, requested_outputs, inputs, trace_context })
    }
    fn f64(&mut self, what: &str) -> Result<f64, WireError> {
        let value = f64::from_bits(self.u64(what)?);
        if !value.is_finite() {
            return Err(malformed(format!("{what}: {value} is not a finite number")));
        }
        Ok(value)
    }
    fn metric(&mut self, index: usize) -> Result<Metric<'a>, WireError> {
        let what = format!("metric update {index}");
        let family_kind = self.u8(&what)?;
        let op = self.u8(&what)?;
        let label_count = self.u16(&what)?;
        let bucket_count = self.u32(&what)?;
        let value = self.f64(&what)?;
        let allowed = match family_kind {
            METRIC_COUNTER => op == METRIC_ADD && value >= 0.0,
            METRIC_GAUGE => op == METRIC_ADD || op == METRIC_SET,
            METRIC_HISTOGRAM => op == METRIC_OBSERVE,
            other => return Err(malformed(format!("{what}: unknown metric kind {other}"))),
        };
        if !allowed {
            return Err(malformed(format!(
                "{what}: operation {op} with value {value} is not one a kind {family_kind} allows (a counter adds \
                 values >= 0, a gauge adds or sets, a histogram observes)"
            )));
        }
        let name = self.name(&format!("{what}: its name"))?;
        if !is_metric_name(name) {
            return Err(malformed(format!("{what}: {name:?} is not a Prometheus metric name")));
        }
        let description = self.str(MAX_TEXT_BYTES, &format!("{what}: its description"))?;
        if label_count > MAX_LABELS {
            return Err(malformed(format!("{what}: {label_count} labels (limit {MAX_LABELS})")));
        }
        let mut labels: Vec<(&str, &str)> = Vec::with_capacity(self.count(label_count as u32, 8, &what)?);
        for _ in 0..label_count {
            let key = self.name(&format!("{what}: a label name"))?;
            if !is_label_name(key) {
                return Err(malformed(format!(
                    "{what}: label {key:?} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)"
                )));
            }
            if labels.iter().any(|(seen, _)| *seen == key) {
                return Err(malformed(format!("{what}: label {key:?} is there twice")));
            }
            labels.push((key, self.str(MAX_TEXT_BYTES, &format!("{what}: label {key:?}"))?));
        }
        let histogram = family_kind == METRIC_HISTOGRAM;
        if (histogram && !(1..=MAX_BUCKETS).contains(&bucket_count)) || (!histogram && bucket_count != 0) {
            return Err(malformed(format!("{what}: {bucket_count} buckets for a metric of kind {family_kind}")));
        }
        let mut buckets: Vec<f64> = Vec::with_capacity(self.count(bucket_count, 8, &what)?);
        for _ in 0..bucket_count {
            let bound = self.f64(&format!("{what}: a bucket"))?;
            if buckets.last().is_some_and(|last| *last >= bound) {
                return Err(malformed(format!("{what}: buckets must increase ({bound} follows a larger one)")));
            }
            buckets.push(bound);
        }
        Ok(Metric { family_kind, op, value, name, description, labels, buckets })
    }
    /// A call id: not 0.
    fn call_id(&mut self, what: &str) -> Result<u64, WireError> {
        match self.u64(what)? {
            0 => Err(malformed(format!("{what}: call id 0"))),
            id => Ok(id),
        }
    }
    /// A model version: -1 (the server's choice) or >= 1.
    fn version(&mut self, what: &str) -> Result<i64, WireError> {
        match self.u64(what)? as i64 {
            version if version == -1 || version >= 1 => Ok(version),
            version => Err(malformed(format!("{what}: model version {version} (-1 or >= 1)"))),
        }
    }
    fn response(&mut self, header: &Header, index: usize) -> Result<Response<'a>, WireError> {
        let what = format!("response {index}");
        let status = self.u8(&what)?;
        let code = self.u8(&what)?;
        self.u16(&what)?;
        let n = self.u32(&what)?;
        match status {
            STATUS_OUTPUTS => Ok(Response::Outputs(self.tensors(n, header, &format!("{what}: output"))?)),
            STATUS_ERROR => {
                if code > ERROR_CANCELLED {
                    return Err(malformed(format!("{what}: unknown error code {code}")));
                }
                Ok(Response::Error { code, message: self.text(n, MAX_TEXT_BYTES, &format!("{what}: its message"))? })
            }
            STATUS_NONE if n == 0 => Ok(Response::Nothing),
            other => Err(malformed(format!("{what}: unknown status {other} (n = {n})"))),
        }
    }
}

/// A Prometheus metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn is_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|first| first.is_ascii_alphabetic() || first == b'_' || first == b':')
        && bytes.all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b':')
}

/// A Prometheus label name: `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__` (reserved).
fn is_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    !name.starts_with("__")
        && bytes.next().is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}

/// Decode the metadata `meta` of a message whose header is `header`. Every field is checked; inline tensors
/// must lie inside the data section. Region bounds are checked where the region is read.
pub fn decode_body<'a>(header: &Header, meta: &'a [u8]) -> Result<Body<'a>, WireError> {
    let mut reader = Reader { bytes: meta, at: 0 };
    let body = match header.kind {
        KIND_HELLO => Body::Hello(Hello {
            instance_index: reader.u32("HELLO")?,
            max_batch_size: reader.u32("HELLO")?,
            api_major: reader.u32("HELLO")?,
            api_minor: reader.u32("HELLO")?,
            model_name: reader.name("HELLO: the model name")?,
            token: reader.str(MAX_TEXT_BYTES, "HELLO: the token")?,
            backend_version: reader.str(MAX_TEXT_BYTES, "HELLO: the backend version")?,
        }),
        KIND_WELCOME => {
            let worker_pid = reader.u32("WELCOME")?;
            let inline_threshold = reader.u32("WELCOME")?;
            let spin_us = reader.u32("WELCOME")?;
            reader.u32("WELCOME")?;
            let region_limit = reader.u64("WELCOME")?;
            let worker_version = reader.str(MAX_TEXT_BYTES, "WELCOME: the worker version")?;
            Body::Welcome(Welcome { worker_pid, inline_threshold, spin_us, region_limit, worker_version })
        }
        KIND_REFUSE => Body::Refuse(reader.str(MAX_TEXT_BYTES, "REFUSE: the message")?),
        KIND_BATCH => {
            let count = reader.count(header.count, REQUEST_FIXED_SIZE, "requests")?;
            Body::Batch((0..count).map(|index| reader.request(header, index)).collect::<Result<_, _>>()?)
        }
        KIND_REPLY => {
            let count = reader.count(header.count, RESPONSE_FIXED_SIZE, "responses")?;
            Body::Reply((0..count).map(|index| reader.response(header, index)).collect::<Result<_, _>>()?)
        }
        KIND_BATCH_ERROR => {
            let code = reader.u8("BATCH_ERROR")?;
            reader.take(3, "BATCH_ERROR")?;
            if code > ERROR_CANCELLED {
                return Err(malformed(format!("BATCH_ERROR: unknown error code {code}")));
            }
            Body::BatchError { code, message: reader.str(MAX_TEXT_BYTES, "BATCH_ERROR: the message")? }
        }
        KIND_CANCEL => {
            let count = reader.count(header.count, 4, "cancelled requests")?;
            Body::Cancel((0..count).map(|_| reader.u32("CANCEL")).collect::<Result<_, _>>()?)
        }
        KIND_ACK => Body::Ack(header.count),
        KIND_METRICS => {
            let count = reader.count(header.count, METRIC_FIXED_SIZE + 8, "metric updates")?;
            Body::Metrics((0..count).map(|index| reader.metric(index)).collect::<Result<_, _>>()?)
        }
        KIND_INFER => {
            if header.count != 1 {
                return Err(malformed(format!("INFER: {} requests (one per call)", header.count)));
            }
            let call_id = reader.call_id("INFER")?;
            let call_flags = reader.u32("INFER")?;
            reader.u32("INFER")?;
            let model_version = reader.version("INFER")?;
            let timeout_us = reader.u64("INFER")?;
            let model_name = reader.name("INFER: the model name")?;
            let request = reader.request(header, 0)?;
            Body::Infer(Call { call_id, call_flags, model_version, timeout_us, model_name, request })
        }
        KIND_INFER_RESPONSE => {
            let call_id = reader.call_id("INFER_RESPONSE")?;
            if header.count > 1 {
                return Err(malformed(format!("INFER_RESPONSE: {} responses (at most one)", header.count)));
            }
            let responses = (0..header.count as usize).map(|index| reader.response(header, index));
            Body::InferResponse { call_id, responses: responses.collect::<Result<_, _>>()? }
        }
        KIND_INFER_CANCEL => Body::InferCancel(reader.call_id("INFER_CANCEL")?),
        KIND_CONTROL => {
            let call_id = reader.call_id("CONTROL")?;
            let op = reader.u8("CONTROL")?;
            reader.take(7, "CONTROL")?;
            if op > CONTROL_UNLOAD_DEPENDENTS {
                return Err(malformed(format!("CONTROL: unknown operation {op}")));
            }
            let model_version = reader.version("CONTROL")?;
            let model_name = reader.name("CONTROL: the model name")?;
            let config = reader.str(MAX_TEXT_BYTES, "CONTROL: the configuration")?;
            let file_count = reader.u32("CONTROL")?;
            let count = reader.count(file_count, 4 + 16, "CONTROL: files")?;
            let mut files = Vec::with_capacity(count);
            for _ in 0..count {
                let path = reader.name("CONTROL: a file's path")?;
                let (offset, length) = (reader.u64("CONTROL")?, reader.u64("CONTROL")?);
                if offset.checked_add(length).is_none_or(|end| end > header.data_length) {
                    return Err(malformed(format!(
                        "CONTROL: file {path:?}: bytes {offset}+{length} lie outside the {}-byte data section",
                        header.data_length
                    )));
                }
                files.push(File { path, offset, length });
            }
            Body::Control(Control { call_id, op, model_version, model_name, config, files })
        }
        KIND_CONTROL_RESULT => {
            let call_id = reader.call_id("CONTROL_RESULT")?;
            let status = reader.u8("CONTROL_RESULT")?;
            let code = reader.u8("CONTROL_RESULT")?;
            let ready = reader.u8("CONTROL_RESULT")?;
            reader.take(5, "CONTROL_RESULT")?;
            let message = reader.str(MAX_TEXT_BYTES, "CONTROL_RESULT: the message")?;
            if ready > 1 || code > ERROR_CANCELLED {
                return Err(malformed(format!("CONTROL_RESULT: ready {ready}, error code {code}")));
            }
            let error = match status {
                STATUS_OUTPUTS => None,
                STATUS_ERROR => Some((code, message)),
                other => return Err(malformed(format!("CONTROL_RESULT: unknown status {other}"))),
            };
            Body::ControlResult(ControlResult { call_id, error, ready: ready == 1 })
        }
        other => return Err(malformed(format!("unknown message kind {other}"))),
    };
    if reader.at != meta.len() {
        return Err(malformed(format!("{} bytes of metadata left over after the records", meta.len() - reader.at)));
    }
    Ok(body)
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
