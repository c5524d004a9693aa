//! Encoding: a message's header, metadata records and padding, written into one buffer.

use super::*;

struct Writer<'o>(&'o mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, value: u8) {
        self.0.push(value);
    }
    fn u16(&mut self, value: u16) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn str(&mut self, value: &str) {
        self.u32(value.len() as u32);
        self.0.extend_from_slice(value.as_bytes());
    }
    fn tensor(&mut self, tensor: &Tensor<'_>) {
        self.u32(tensor.name.len() as u32);
        self.u8(tensor.dtype as u8);
        self.u8(tensor.location);
        self.u8(tensor.shape.len() as u8);
        self.u8(0);
        self.u64(tensor.offset);
        self.u64(tensor.byte_length);
        for &dim in tensor.shape.iter() {
            self.u64(dim as u64);
        }
        self.0.extend_from_slice(tensor.name.as_bytes());
    }
    fn request(&mut self, request: &Request<'_>) {
        self.u32(request.inputs.len() as u32);
        self.u32(request.requested_outputs.len() as u32);
        self.u32(request.parameters.len() as u32);
        self.u32(request.flags);
        let (kind, id) = match request.correlation {
            Correlation::None => (CORRELATION_NONE, 0),
            Correlation::Uint(id) => (CORRELATION_UINT, id),
            Correlation::String(_) => (CORRELATION_STRING, 0),
        };
        self.u8(kind);
        self.0.extend_from_slice(&[0; 7]);
        self.u64(id);
        self.str(request.id);
        if let Correlation::String(id) = request.correlation {
            self.str(id);
        }
        for (key, value) in &request.parameters {
            match *value {
                Parameter::String(text) => {
                    self.u8(PARAMETER_STRING);
                    self.str(key);
                    self.str(text);
                }
                Parameter::Int(number) => {
                    self.u8(PARAMETER_INT);
                    self.str(key);
                    self.u64(number as u64);
                }
                Parameter::Bool(flag) => {
                    self.u8(PARAMETER_BOOL);
                    self.str(key);
                    self.u8(flag as u8);
                }
                Parameter::Double(number) => {
                    self.u8(PARAMETER_DOUBLE);
                    self.str(key);
                    self.u64(number.to_bits());
                }
            }
        }
        for name in &request.requested_outputs {
            self.str(name);
        }
        for tensor in &request.inputs {
            self.tensor(tensor);
        }
        self.str(request.trace_context);
    }
    fn metric(&mut self, metric: &Metric<'_>) {
        self.u8(metric.family_kind);
        self.u8(metric.op);
        self.u16(metric.labels.len() as u16);
        self.u32(metric.buckets.len() as u32);
        self.u64(metric.value.to_bits());
        self.str(metric.name);
        self.str(metric.description);
        for (key, value) in &metric.labels {
            self.str(key);
            self.str(value);
        }
        for bound in &metric.buckets {
            self.u64(bound.to_bits());
        }
    }
    fn response(&mut self, response: &Response<'_>) {
        match response {
            Response::Outputs(outputs) => {
                self.u8(STATUS_OUTPUTS);
                self.u8(0);
                self.u16(0);
                self.u32(outputs.len() as u32);
                for tensor in outputs {
                    self.tensor(tensor);
                }
            }
            Response::Error { code, message } => {
                self.u8(STATUS_ERROR);
                self.u8(*code);
                self.u16(0);
                self.u32(message.len() as u32);
                self.0.extend_from_slice(message.as_bytes());
            }
            Response::Nothing => {
                self.u8(STATUS_NONE);
                self.u8(0);
                self.u16(0);
                self.u32(0);
            }
        }
    }
}

/// Write the header, the metadata of `body` and the padding before the data section into `out` (cleared
/// first). The caller appends exactly `data_length` bytes of data afterwards. `header`'s kind, count,
/// meta_length and data_length are set from `body` and `data_length`.
pub fn encode_head(header: &Header, body: &Body<'_>, data_length: u64, out: &mut Vec<u8>) {
    out.clear();
    out.resize(HEADER_SIZE, 0);
    let mut writer = Writer(out);
    match body {
        Body::Hello(hello) => {
            writer.u32(hello.instance_index);
            writer.u32(hello.max_batch_size);
            writer.u32(hello.api_major);
            writer.u32(hello.api_minor);
            writer.str(hello.model_name);
            writer.str(hello.token);
            writer.str(hello.backend_version);
        }
        Body::Welcome(welcome) => {
            writer.u32(welcome.worker_pid);
            writer.u32(welcome.inline_threshold);
            writer.u32(welcome.spin_us);
            writer.u32(0);
            writer.u64(welcome.region_limit);
            writer.str(welcome.worker_version);
        }
        Body::Refuse(message) => writer.str(message),
        Body::Batch(requests) => requests.iter().for_each(|request| writer.request(request)),
        Body::Reply(responses) => responses.iter().for_each(|response| writer.response(response)),
        Body::BatchError { code, message } => {
            writer.u8(*code);
            writer.0.extend_from_slice(&[0; 3]);
            writer.str(message);
        }
        Body::Cancel(indices) => indices.iter().for_each(|&index| writer.u32(index)),
        Body::Ack(_) => {}
        Body::Metrics(metrics) => metrics.iter().for_each(|metric| writer.metric(metric)),
        Body::Infer(call) => {
            writer.u64(call.call_id);
            writer.u32(call.call_flags);
            writer.u32(0);
            writer.u64(call.model_version as u64);
            writer.u64(call.timeout_us);
            writer.str(call.model_name);
            writer.request(&call.request);
        }
        Body::InferResponse { call_id, responses } => {
            writer.u64(*call_id);
            responses.iter().for_each(|response| writer.response(response));
        }
        Body::InferCancel(call_id) => writer.u64(*call_id),
        Body::Control(control) => {
            writer.u64(control.call_id);
            writer.u8(control.op);
            writer.0.extend_from_slice(&[0; 7]);
            writer.u64(control.model_version as u64);
            writer.str(control.model_name);
            writer.str(control.config);
            writer.u32(control.files.len() as u32);
            for file in &control.files {
                writer.str(file.path);
                writer.u64(file.offset);
                writer.u64(file.length);
            }
        }
        Body::ControlResult(result) => {
            writer.u64(result.call_id);
            let (status, code, message) = match result.error {
                Some((code, message)) => (STATUS_ERROR, code, message),
                None => (STATUS_OUTPUTS, 0, ""),
            };
            writer.u8(status);
            writer.u8(code);
            writer.u8(u8::from(result.ready));
            writer.0.extend_from_slice(&[0; 5]);
            writer.str(message);
        }
    }
    let header = Header {
        kind: body.kind(),
        count: body.count(),
        meta_length: (out.len() - HEADER_SIZE) as u32,
        data_length,
        ..*header
    };
    header.encode(&mut out[..HEADER_SIZE]);
    out.resize(header.data_start(), 0);
}

/// A whole message: header, metadata and `data`.
pub fn encode(header: &Header, body: &Body<'_>, data: &[u8], out: &mut Vec<u8>) {
    encode_head(header, body, data.len() as u64, out);
    out.extend_from_slice(data);
}
