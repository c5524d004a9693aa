//! One model instance's executor: sends each batch to the worker as one message, waits for the answer
//! (forwarding cancellations), and answers every request.

use std::borrow::Cow;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::batch::{Batch, Buffer, Failure, Input};
use crate::channel::{Broken, Channel, Incoming};
use crate::dtype::{check_byte_length, check_bytes_serialization, element_count, DataType};
use crate::sys::{self, Mapping};
use crate::wire::{
    self, align, decode_body, encode_head, Body, Header, Hello, Response, Tensor, ERROR_CANCELLED, ERROR_INTERNAL,
    ERROR_INVALID_ARG, ERROR_UNAVAILABLE, FLAG_FINAL, FLAG_NEW_REGION, FLAG_RETAINED, KIND_BATCH_ERROR, KIND_REPLY,
    LOCATION_INLINE, LOCATION_RECEIVER_REGION, LOCATION_SENDER_REGION, MAX_DATA_BYTES,
};

/// How often a wait for the worker's answer checks whether clients cancelled.
const CANCEL_CHECK_MS: i32 = 50;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub const BACKEND_VERSION: &str = concat!("tritonrt-backend ", env!("CARGO_PKG_VERSION"));

/// Who this instance talks to, and what it tells the worker in its HELLO.
#[derive(Debug, Clone)]
pub struct Target {
    pub model_name: String,
    pub instance_index: u32,
    pub max_batch_size: u32,
    pub decoupled: bool,
    pub sequence: bool,
    pub socket: PathBuf,
    pub token: String,
    pub owner: u32,
    pub api_version: (u32, u32),
}

/// When the model's computation (the worker's part) started and ended, and the batch's size (for
/// Triton's statistics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    pub compute_start_ns: u64,
    pub compute_end_ns: u64,
    pub batch_size: u64,
}

pub struct Executor {
    pub target: Target,
    channel: Option<Channel>,
    seq: u64,
    message: Vec<u8>,
}

/// A request of the batch that reached the worker: its index in the batch, and whether it has its final
/// answer.
struct Live {
    index: usize,
    done: bool,
    cancel_sent: bool,
    requested: Vec<String>,
}

impl Executor {
    pub fn new(target: Target) -> Executor {
        Executor { target, channel: None, seq: 0, message: Vec::new() }
    }

    /// Connect and shake hands, unless connected.
    pub fn connect(&mut self) -> Result<(), String> {
        if self.channel.is_some() {
            return Ok(());
        }
        let target = &self.target;
        let hello = Hello {
            instance_index: target.instance_index,
            max_batch_size: target.max_batch_size,
            api_major: target.api_version.0,
            api_minor: target.api_version.1,
            model_name: &target.model_name,
            token: &target.token,
            backend_version: BACKEND_VERSION,
        };
        let channel = Channel::connect(&target.socket, &hello, target.decoupled, target.owner, HANDSHAKE_TIMEOUT)?;
        self.channel = Some(channel);
        Ok(())
    }

    /// Drop the connection; the next batch connects again.
    pub fn disconnect(&mut self) {
        self.channel = None;
    }

    /// Ok while the worker is connected (reconnecting if it went away and is back).
    pub fn ready(&mut self) -> Result<(), String> {
        if self.channel.as_ref().is_some_and(Channel::peer_closed) {
            self.channel = None;
        }
        self.connect()
    }

    /// Answer every request of `batch`. Never fails as a whole: each request gets its response or its error.
    pub fn execute<B: Batch>(&mut self, batch: &mut B) -> Timing {
        let mut timing = Timing { batch_size: 0, ..Timing::default() };
        if self.channel.as_ref().is_some_and(Channel::peer_closed) {
            self.channel = None;
        }
        if let Err(error) = self.connect() {
            let failure = Failure::new(ERROR_UNAVAILABLE, format!("tritonrt: {error}"));
            (0..batch.len()).for_each(|index| batch.fail(index, &failure));
            return timing;
        }
        let mut live = Vec::with_capacity(batch.len());
        match self.send_batch(batch, &mut live, &mut timing) {
            Ok(()) => {}
            Err(SendError::Requests(failure)) => {
                live.iter().for_each(|request| batch.fail(request.index, &failure));
                return timing;
            }
            Err(SendError::Broken(Broken(error))) => {
                self.channel = None;
                let failure = self.lost(error);
                live.iter().for_each(|request| batch.fail(request.index, &failure));
                return timing;
            }
        }
        if live.is_empty() {
            return timing;
        }
        timing.compute_start_ns = sys::monotonic_ns();
        if let Err(Broken(error)) = self.await_answer(batch, &mut live) {
            self.channel = None;
            let failure = self.lost(error);
            for request in live.iter_mut().filter(|request| !request.done) {
                batch.fail(request.index, &failure);
                request.done = true;
            }
        }
        timing.compute_end_ns = sys::monotonic_ns();
        for request in live.iter().filter(|request| !request.done) {
            // The answer ended without a final response for this request.
            if self.target.decoupled {
                batch.finish(request.index);
            } else {
                let message = "tritonrt: the worker's reply had no response for this request";
                batch.fail(request.index, &Failure::new(ERROR_INTERNAL, message));
            }
        }
        timing
    }

    fn lost(&self, error: String) -> Failure {
        Failure::new(
            ERROR_UNAVAILABLE,
            format!("tritonrt: lost the process serving model {:?}: {error}", self.target.model_name),
        )
    }

    /// Read and check the requests, fail those that cannot be sent, and send the others as one BATCH.
    fn send_batch<B: Batch>(
        &mut self,
        batch: &mut B,
        live: &mut Vec<Live>,
        timing: &mut Timing,
    ) -> Result<(), SendError> {
        let channel = self.channel.as_mut().expect("connected");
        let threshold = channel.settings.inline_threshold.max(1);
        let mut views = Vec::with_capacity(batch.len());
        let mut failed = Vec::new();
        for index in 0..batch.len() {
            if batch.is_cancelled(index) {
                failed.push((index, Failure::new(ERROR_CANCELLED, "tritonrt: the request was cancelled")));
                continue;
            }
            match batch
                .read(index, self.target.sequence)
                .and_then(|view| check_inputs(&view.inputs, batch).map(|()| view))
            {
                Ok(view) => {
                    timing.batch_size += request_batch_size(&view.inputs, self.target.max_batch_size);
                    live.push(Live {
                        index,
                        done: false,
                        cancel_sent: false,
                        requested: view.requested_outputs.iter().map(|name| name.to_string()).collect(),
                    });
                    views.push(view);
                }
                Err(failure) => failed.push((index, failure)),
            }
        }
        // Where each input goes: inline or in our region; the tensors of one name back to back per location.
        let mut placement: Vec<Vec<(u8, u64)>> =
            views.iter().map(|view| vec![(LOCATION_INLINE, 0); view.inputs.len()]).collect();
        let mut names: Vec<&str> = Vec::new();
        for view in &views {
            for input in &view.inputs {
                if !names.contains(&input.name) {
                    names.push(input.name);
                }
            }
        }
        let (mut inline_end, mut region_end) = (0usize, 0u64);
        for name in names {
            let (mut inline_started, mut region_started) = (false, false);
            for (request, view) in views.iter().enumerate() {
                for (slot, input) in view.inputs.iter().enumerate().filter(|(_, input)| input.name == name) {
                    let size = input.byte_size();
                    let inline = size < threshold && (align(inline_end) as u64 + size) <= MAX_DATA_BYTES;
                    placement[request][slot] = if inline {
                        if !inline_started {
                            inline_end = align(inline_end);
                            inline_started = true;
                        }
                        let offset = inline_end as u64;
                        inline_end += size as usize;
                        (LOCATION_INLINE, offset)
                    } else {
                        if !region_started {
                            region_end = align(region_end as usize) as u64;
                            region_started = true;
                        }
                        let offset = region_end;
                        region_end += size;
                        (LOCATION_SENDER_REGION, offset)
                    };
                }
            }
        }
        let (region_id, announce) = if region_end > 0 {
            match channel.own_region(region_end) {
                Ok((region, announce)) => (region.id, announce),
                Err(error) => {
                    for (index, failure) in failed {
                        batch.fail(index, &failure);
                    }
                    return Err(SendError::Requests(Failure::new(ERROR_UNAVAILABLE, format!("tritonrt: {error}"))));
                }
            }
        } else {
            (0, false)
        };
        let requests: Vec<wire::Request<'_>> = views
            .iter()
            .zip(&placement)
            .map(|(view, places)| wire::Request {
                id: view.id,
                flags: view.flags,
                correlation: view.correlation,
                parameters: view.parameters.clone(),
                requested_outputs: view.requested_outputs.clone(),
                inputs: view
                    .inputs
                    .iter()
                    .zip(places)
                    .map(|(input, &(location, offset))| Tensor {
                        name: input.name,
                        dtype: input.dtype,
                        location,
                        offset,
                        byte_length: input.byte_size(),
                        shape: Cow::Borrowed(input.shape),
                    })
                    .collect(),
            })
            .collect();
        self.seq += 1;
        let header = Header {
            seq: self.seq,
            flags: if announce { FLAG_NEW_REGION } else { 0 },
            region_id,
            region_size: if announce { channel.own_region(0).map(|(region, _)| region.size()).unwrap_or(0) } else { 0 },
            ..Header::default()
        };
        let message = &mut self.message;
        encode_head(&header, &Body::Batch(requests), inline_end as u64, message);
        let data_start = message.len();
        message.resize(data_start + inline_end, 0);
        let mut copy_error = None;
        for (view, places) in views.iter().zip(&placement) {
            for (input, &(location, offset)) in view.inputs.iter().zip(places) {
                let result = if location == LOCATION_INLINE {
                    let start = data_start + offset as usize;
                    copy_input(input, batch, &mut |at, bytes| {
                        message[start + at..start + at + bytes.len()].copy_from_slice(bytes);
                        true
                    })
                } else {
                    let (region, _) = channel.own_region(0).expect("region created above");
                    let mapping = region.mapping_mut();
                    copy_input(input, batch, &mut |at, bytes| mapping.copy_in(offset + at as u64, bytes))
                };
                if let Err(error) = result {
                    copy_error = Some(error);
                }
            }
        }
        for (index, failure) in failed {
            batch.fail(index, &failure);
        }
        if let Some(error) = copy_error {
            return Err(SendError::Requests(Failure::new(ERROR_INTERNAL, format!("tritonrt: {error}"))));
        }
        if live.is_empty() {
            return Ok(());
        }
        channel.send(message, announce).map_err(SendError::Broken)
    }

    /// Read the worker's answer to the batch just sent, answering requests as responses arrive, and tell the
    /// worker about clients that cancel (checked every CANCEL_CHECK_MS, whether or not replies keep coming).
    fn await_answer<B: Batch>(&mut self, batch: &mut B, live: &mut [Live]) -> Result<(), Broken> {
        let seq = self.seq;
        let decoupled = self.target.decoupled;
        let channel = self.channel.as_mut().expect("connected");
        let mut replies: u32 = 0;
        let mut last_check = Instant::now();
        loop {
            let waited = last_check.elapsed().as_millis().min(CANCEL_CHECK_MS as u128) as i32;
            if let Some(incoming) = channel.poll_message(CANCEL_CHECK_MS - waited)? {
                let header = incoming.header;
                if header.seq != seq || (header.kind != KIND_REPLY && header.kind != KIND_BATCH_ERROR) {
                    return Err(Broken(format!(
                        "the worker answered batch {seq} with a message of kind {} for batch {}",
                        header.kind, header.seq
                    )));
                }
                let last = header.kind == KIND_BATCH_ERROR || header.has(FLAG_FINAL);
                if header.kind == KIND_REPLY && !decoupled && !last {
                    return Err(Broken("the worker streamed a partial reply to a model that is not decoupled".into()));
                }
                replies += 1;
                answer(&incoming, batch, live, decoupled);
                drop(incoming);
                if last {
                    if header.has(FLAG_RETAINED) {
                        channel.retire_own_region();
                    }
                    return Ok(());
                }
                if header.region_id != 0 {
                    channel.send_control(seq, &Body::Ack(replies))?;
                }
            }
            if last_check.elapsed().as_millis() >= CANCEL_CHECK_MS as u128 {
                last_check = Instant::now();
                let cancelled: Vec<u32> = live
                    .iter_mut()
                    .enumerate()
                    .filter(|(_, request)| !request.done && !request.cancel_sent && batch.is_cancelled(request.index))
                    .map(|(position, request)| {
                        request.cancel_sent = true;
                        position as u32
                    })
                    .collect();
                if !cancelled.is_empty() {
                    channel.send_control(seq, &Body::Cancel(cancelled))?;
                }
            }
        }
    }
}

enum SendError {
    /// Every live request fails with this (the connection goes on).
    Requests(Failure),
    Broken(Broken),
}

/// Check each input's byte size against its shape and type (overflow-checked, before anything is copied)
/// and each BYTES input's serialization. The error names the input.
fn check_inputs<B: Batch>(inputs: &[Input<'_>], batch: &B) -> Result<(), Failure> {
    for input in inputs {
        let invalid =
            |detail: String| Failure::new(ERROR_INVALID_ARG, format!("tritonrt: input {:?}: {detail}", input.name));
        check_byte_length(input.dtype, input.shape, input.byte_size()).map_err(invalid)?;
        if input.dtype == DataType::Bytes {
            let elements = element_count(input.shape).map_err(invalid)?;
            let whole;
            let bytes = match input.buffers.as_slice() {
                [Buffer::Host(bytes)] => *bytes,
                [] => &[][..],
                _ => {
                    let mut gathered = vec![0u8; input.byte_size() as usize];
                    copy_input(input, batch, &mut |at, part| {
                        gathered[at..at + part.len()].copy_from_slice(part);
                        true
                    })
                    .map_err(|e| Failure::new(ERROR_INTERNAL, e))?;
                    whole = gathered;
                    &whole
                }
            };
            check_bytes_serialization(bytes, elements).map_err(invalid)?;
        }
    }
    Ok(())
}

/// Copy an input's buffers, in order, through `put(offset within the tensor, bytes)`.
fn copy_input<B: Batch>(input: &Input<'_>, batch: &B, put: &mut dyn FnMut(usize, &[u8]) -> bool) -> Result<(), String> {
    let mut at = 0usize;
    for buffer in &input.buffers {
        let ok = match *buffer {
            Buffer::Host(bytes) => put(at, bytes),
            Buffer::Device { address, len, device } => {
                let mut staging = vec![0u8; len];
                batch.copy_from_device(address, device, &mut staging)?;
                put(at, &staging)
            }
        };
        if !ok {
            return Err(format!("input {:?} does not fit where it was placed", input.name));
        }
        at += buffer.len();
    }
    Ok(())
}

/// The batch size a request contributes: its first input's first dimension for batching models, else 1.
fn request_batch_size(inputs: &[Input<'_>], max_batch_size: u32) -> u64 {
    if max_batch_size == 0 {
        return 1;
    }
    inputs.first().and_then(|input| input.shape.first()).map_or(1, |&rows| rows.max(0) as u64)
}

/// Answer the live requests from one REPLY or BATCH_ERROR.
fn answer<B: Batch>(incoming: &Incoming<'_>, batch: &mut B, live: &mut [Live], decoupled: bool) {
    let header = &incoming.header;
    let last = header.kind == KIND_BATCH_ERROR || header.has(FLAG_FINAL);
    let fail_open = |batch: &mut B, live: &mut [Live], failure: &Failure| {
        for request in live.iter_mut().filter(|request| !request.done) {
            batch.fail(request.index, failure);
            request.done = true;
        }
    };
    let body = match decode_body(header, incoming.meta) {
        Ok(body) => body,
        Err(error) => {
            let failure = Failure::new(ERROR_INTERNAL, format!("tritonrt: the worker's reply cannot be read: {error}"));
            return fail_open(batch, live, &failure);
        }
    };
    let responses = match body {
        Body::BatchError { code, message } => return fail_open(batch, live, &Failure::new(code, message)),
        Body::Reply(responses) => responses,
        _ => unreachable!("kind checked by the caller"),
    };
    if responses.len() != live.len() && !(last && responses.is_empty()) {
        let message = format!(
            "tritonrt: the worker's reply has {} responses for the {} requests of the batch",
            responses.len(),
            live.len()
        );
        return fail_open(batch, live, &Failure::new(ERROR_INTERNAL, message));
    }
    for (request, response) in live.iter_mut().zip(responses) {
        if request.done {
            continue; // a finished request (error, or its client cancelled) gets nothing more
        }
        match response {
            Response::Outputs(outputs) => {
                let result = add_outputs(incoming, batch, request, &outputs);
                match result {
                    Ok(()) => {
                        let final_ = !decoupled || last;
                        batch.send(request.index, final_);
                        request.done = final_;
                    }
                    Err(failure) => {
                        batch.fail(request.index, &failure);
                        request.done = true;
                    }
                }
            }
            Response::Error { code, message } => {
                batch.fail(request.index, &Failure::new(code, message));
                request.done = true;
            }
            Response::Nothing if last && decoupled => {
                batch.finish(request.index);
                request.done = true;
            }
            Response::Nothing => {}
        }
    }
}

/// Add a response's requested outputs, each copied once from where the worker put it.
fn add_outputs<B: Batch>(
    incoming: &Incoming<'_>,
    batch: &mut B,
    request: &Live,
    outputs: &[Tensor<'_>],
) -> Result<(), Failure> {
    for output in outputs {
        if !request.requested.is_empty() && !request.requested.iter().any(|name| name == output.name) {
            continue;
        }
        let bad =
            |detail: String| Failure::new(ERROR_INTERNAL, format!("tritonrt: output {:?}: {detail}", output.name));
        let source: Source<'_> = match output.location {
            LOCATION_INLINE => Source::Bytes(&incoming.data[output.offset as usize..][..output.byte_length as usize]),
            LOCATION_SENDER_REGION | LOCATION_RECEIVER_REGION => {
                if let Some(error) = &incoming.region_error {
                    return Err(bad(error.clone()));
                }
                let mapping = if output.location == LOCATION_SENDER_REGION {
                    incoming.peer.map(|peer| peer.mapping())
                } else {
                    incoming.own.map(|own| own.mapping())
                };
                Source::Region(mapping.ok_or_else(|| bad("its region is not mapped".into()))?)
            }
            other => return Err(bad(format!("unknown location {other}"))),
        };
        let elements = if output.dtype == DataType::Bytes { element_count(&output.shape).map_err(bad)? } else { 0 };
        let mut fill = |dst: &mut [u8]| -> Result<(), String> {
            match source {
                Source::Bytes(bytes) => dst.copy_from_slice(bytes),
                Source::Region(mapping) => {
                    if !mapping.copy_out(output.offset, dst) {
                        return Err(format!("bytes {}+{} lie outside the region", output.offset, output.byte_length));
                    }
                }
            }
            if output.dtype == DataType::Bytes {
                // checked on the copy: the worker cannot change it any more
                check_bytes_serialization(dst, elements)?;
            }
            Ok(())
        };
        batch.add_output(request.index, output.name, output.dtype, &output.shape, output.byte_length, &mut fill)?;
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Source<'a> {
    Bytes(&'a [u8]),
    Region(&'a Mapping),
}
