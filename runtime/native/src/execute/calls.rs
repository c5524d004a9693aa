//! Calls of other models from the worker's callable (BLS) and the model loading API, while a batch runs: the
//! worker's INFER, INFER_CANCEL and CONTROL messages, served by a `Calls` implementation (Triton's in-process
//! API in `triton::calls`, a test's fake), whose responses come back on other threads as `CallEvent`s and are
//! sent to the worker as INFER_RESPONSE messages by the instance's own thread.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use crate::channel::{Broken, Channel, Incoming};
use crate::dtype::{check_byte_length, DataType};
use crate::error::Error;
use crate::sys;
use crate::wire::{
    align, encode_head, Body, Call, Control, ControlResult, Header, Response, Tensor, ERROR_INTERNAL,
    ERROR_UNAVAILABLE, FLAG_FINAL, FLAG_NEW_REGION, KIND_CONTROL, KIND_INFER, LOCATION_INLINE, LOCATION_SENDER_REGION,
    MAX_CALLS,
};

/// One output of a callee's response, as Triton holds it.
pub struct CallOutput<'r> {
    pub name: &'r str,
    pub dtype: DataType,
    pub shape: &'r [i64],
    pub bytes: &'r [u8],
}

/// A callee's response (deleted when dropped).
pub trait CallResponse: Send {
    /// The response's error, if it is one.
    fn error(&self) -> Option<Error>;
    /// Its outputs; the error names what cannot be read.
    fn outputs(&self) -> Result<Vec<CallOutput<'_>>, Error>;
}

/// A response of a call (or, with `response` None, only the end of its responses), from any thread.
pub struct CallEvent {
    pub seq: u64,
    pub call_id: u64,
    pub response: Option<Box<dyn CallResponse>>,
    pub last: bool,
}

/// Where a call's responses go: a queue the instance's thread reads, and the eventfd that wakes it.
pub struct Events {
    sender: Sender<CallEvent>,
    wake: Arc<OwnedFd>,
}

impl Events {
    /// Queue `event` and wake the instance's thread (an executor that is gone drops it: the response is deleted).
    pub fn send(&self, event: CallEvent) {
        if self.sender.send(event).is_ok() {
            sys::wake(self.wake.as_fd());
        }
    }
}

/// A call in flight.
pub trait CallHandle: Send {
    /// Ask the server to cancel it (its responses still end with a last event).
    fn cancel(&self);
}

/// What serves calls: the server the backend runs in.
pub trait Calls: Send {
    /// Start `call` of batch `seq` with its inputs' bytes (in the order of `call.request.inputs`, kept until the
    /// server releases the request); its responses go to `events`. A traced call is traced as a child of
    /// `parent_trace` (the address of a request's trace; 0: none). The error says why it could not start.
    fn start(
        &self,
        seq: u64,
        call: &Call<'_>,
        inputs: Vec<Vec<u8>>,
        events: &Arc<Events>,
        parent_trace: usize,
    ) -> Result<Box<dyn CallHandle>, Error>;

    /// Count a call of `callee` that failed before it started, `seconds` after the worker's INFER was read (the
    /// started ones the implementation counts as their last response arrives).
    fn not_started(&self, _callee: &str, _seconds: f64) {}

    /// Run a model repository operation (the files' bytes lie in `data`); for CONTROL_IS_READY, the answer.
    fn control(&self, control: &Control<'_>, data: &[u8]) -> Result<bool, Error>;
}

/// What `serve` could not send while the received message was borrowed.
pub(super) enum Answer {
    /// The call could not start: its one, final response is this error.
    Failed { call_id: u64, code: u8, message: String },
    /// A model repository operation's outcome.
    Control { call_id: u64, result: Result<bool, (u8, String)> },
}

struct InFlight {
    handle: Box<dyn CallHandle>,
    model_name: String,
}

/// An executor's calls: what serves them, the calls of the current batch, and the queue of their responses.
pub(super) struct CallState {
    calls: Box<dyn Calls>,
    events: Arc<Events>,
    receiver: Receiver<CallEvent>,
    pub(super) wake: Arc<OwnedFd>,
    in_flight: HashMap<u64, InFlight>,
    message: Vec<u8>,
}

impl CallState {
    pub(super) fn new(calls: Box<dyn Calls>) -> std::io::Result<CallState> {
        let wake = Arc::new(sys::new_eventfd()?);
        let (sender, receiver) = channel();
        let events = Arc::new(Events { sender, wake: wake.clone() });
        Ok(CallState { calls, events, receiver, wake, in_flight: HashMap::new(), message: Vec::new() })
    }

    /// Drop the responses of earlier batches' calls (before a batch: all queued events are stale).
    pub(super) fn drop_stale(&mut self) {
        while self.receiver.try_recv().is_ok() {}
    }

    /// True while calls are in flight.
    pub(super) fn busy(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// True for the kinds this serves.
    pub(super) fn serves(kind: u16) -> bool {
        kind == KIND_INFER || kind == KIND_CONTROL || kind == crate::wire::KIND_INFER_CANCEL
    }

    /// Serve one INFER, INFER_CANCEL or CONTROL (decoded by the caller, still borrowing the received message):
    /// start or cancel the call, run the operation. What must be answered at once is returned, for `answer`
    /// once the message is released.
    pub(super) fn serve(
        &mut self,
        seq: u64,
        body: Body<'_>,
        incoming: &IncomingParts<'_>,
        parent_trace: impl FnOnce() -> usize,
    ) -> Option<Answer> {
        match body {
            Body::Infer(call) => {
                let read = std::time::Instant::now();
                let call_id = call.call_id;
                let started = if self.in_flight.contains_key(&call_id) {
                    Err(Error::internal(format!("tritonrt: call id {call_id} is already in flight")))
                } else if self.in_flight.len() >= MAX_CALLS as usize {
                    Err(Error::unavailable(format!(
                        "tritonrt: more than {MAX_CALLS} calls of other models in flight from one batch: wait for some"
                    )))
                } else {
                    let parent = if call.request.trace_context.is_empty() { 0 } else { parent_trace() };
                    copy_inputs(&call, incoming)
                        .and_then(|inputs| self.calls.start(seq, &call, inputs, &self.events, parent))
                };
                match started {
                    Ok(handle) => {
                        self.in_flight.insert(call_id, InFlight { handle, model_name: call.model_name.to_string() });
                        None
                    }
                    Err(error) => {
                        self.calls.not_started(call.model_name, read.elapsed().as_secs_f64());
                        Some(Answer::Failed {
                            call_id,
                            code: error.code,
                            message: format!("tritonrt: the call of model {:?} failed: {}", call.model_name, error),
                        })
                    }
                }
            }
            Body::InferCancel(call_id) => {
                if let Some(call) = self.in_flight.get(&call_id) {
                    call.handle.cancel();
                }
                None
            }
            Body::Control(control) => {
                let result = self.calls.control(&control, incoming.data).map_err(|failure| {
                    let message = format!("tritonrt: model {:?}: {}", control.model_name, failure.message);
                    (failure.code, message)
                });
                Some(Answer::Control { call_id: control.call_id, result })
            }
            _ => unreachable!("serves() checked the kind"),
        }
    }

    /// Send what `serve` returned.
    pub(super) fn answer(
        &mut self,
        channel: &mut Channel,
        own_top: &mut u64,
        seq: u64,
        answer: Answer,
    ) -> Result<(), Broken> {
        match answer {
            Answer::Failed { call_id, code, message } => {
                let response = Response::Error { code, message: &message };
                self.send_response(channel, own_top, seq, call_id, vec![response], &[], true)
            }
            Answer::Control { call_id, result } => {
                let (error, ready) = match &result {
                    Ok(ready) => (None, *ready),
                    Err((code, message)) => (Some((*code, message.as_str())), false),
                };
                let body = Body::ControlResult(ControlResult { call_id, error, ready });
                encode_head(&Header { seq, ..Header::default() }, &body, 0, &mut self.message);
                channel.send(&self.message, false).map_err(|failed| failed.into_broken())
            }
        }
    }

    /// Send the responses that arrived to the worker.
    pub(super) fn forward(&mut self, channel: &mut Channel, own_top: &mut u64, seq: u64) -> Result<(), Broken> {
        sys::unwake(self.wake.as_fd());
        while let Ok(event) = self.receiver.try_recv() {
            if event.seq != seq || !self.in_flight.contains_key(&event.call_id) {
                continue; // a call of an earlier batch, or cancelled: dropped (its response deleted)
            }
            let model_name = &self.in_flight[&event.call_id].model_name;
            let described;
            let mut outputs = Vec::new();
            let responses = match &event.response {
                None => vec![],
                Some(response) => match response.error().map_or_else(|| response.outputs(), Err) {
                    Ok(list) => {
                        outputs = list;
                        vec![Response::Outputs(Vec::new())] // filled in by send_response
                    }
                    Err(error) => {
                        described = format!("tritonrt: model {model_name:?} answered with an error: {}", error);
                        vec![Response::Error { code: error.code, message: &described }]
                    }
                },
            };
            let last = event.last;
            let result = self.send_response(channel, own_top, seq, event.call_id, responses, &outputs, last);
            drop(outputs);
            if last {
                self.in_flight.remove(&event.call_id);
            }
            result?;
        }
        Ok(())
    }

    /// Cancel every call in flight (the batch ended, or its requests were cancelled); with `forget`, their
    /// further responses are dropped.
    pub(super) fn cancel_all(&mut self, forget: bool) {
        for call in self.in_flight.values() {
            call.handle.cancel();
        }
        if forget {
            self.in_flight.clear();
        }
    }

    /// Encode and send one INFER_RESPONSE: an `Outputs` response gets `outputs`, each inline when small, else
    /// in our region after what the batch placed there (`own_top`).
    #[allow(clippy::too_many_arguments)]
    fn send_response<'r>(
        &mut self,
        channel: &mut Channel,
        own_top: &mut u64,
        seq: u64,
        call_id: u64,
        mut responses: Vec<Response<'r>>,
        outputs: &[CallOutput<'r>],
        last: bool,
    ) -> Result<(), Broken> {
        let threshold = channel.settings.inline_threshold.max(1);
        let (mut inline_end, mut region_need) = (0usize, 0u64);
        let mut places = Vec::with_capacity(outputs.len());
        for output in outputs {
            let size = output.bytes.len() as u64;
            if size < threshold {
                inline_end = align(inline_end);
                places.push((LOCATION_INLINE, inline_end as u64));
                inline_end += size as usize;
            } else {
                region_need = align(region_need as usize) as u64;
                places.push((LOCATION_SENDER_REGION, region_need));
                region_need += size;
            }
        }
        let mut header = Header { seq, flags: if last { FLAG_FINAL } else { 0 }, ..Header::default() };
        if region_need > 0 {
            match channel.own_space(*own_top, region_need) {
                Ok((start, announce)) => {
                    for place in places.iter_mut().filter(|(location, _)| *location == LOCATION_SENDER_REGION) {
                        place.1 += start;
                    }
                    *own_top = start + region_need;
                    header.region_id = channel.own_region_id();
                    if announce {
                        header.flags |= FLAG_NEW_REGION;
                        header.region_size = channel.own_region_size();
                    }
                }
                Err(error) => {
                    let message = format!("tritonrt: the outputs of a call cannot be passed on: {}", error.message);
                    let body = Body::InferResponse {
                        call_id,
                        responses: vec![Response::Error { code: ERROR_UNAVAILABLE, message: &message }],
                    };
                    encode_head(&header, &body, 0, &mut self.message);
                    return channel.send(&self.message, false).map_err(|failed| failed.into_broken());
                }
            }
        }
        if let Some(Response::Outputs(tensors)) = responses.first_mut() {
            *tensors = outputs
                .iter()
                .zip(&places)
                .map(|(output, &(location, offset))| Tensor {
                    name: output.name,
                    dtype: output.dtype,
                    location,
                    offset,
                    byte_length: output.bytes.len() as u64,
                    shape: std::borrow::Cow::Borrowed(output.shape),
                })
                .collect();
        }
        let announce = header.flags & FLAG_NEW_REGION != 0;
        let body = Body::InferResponse { call_id, responses };
        encode_head(&header, &body, inline_end as u64, &mut self.message);
        let data_start = self.message.len();
        self.message.resize(data_start + inline_end, 0);
        for (output, &(location, offset)) in outputs.iter().zip(&places) {
            if location == LOCATION_INLINE {
                let start = data_start + offset as usize;
                self.message[start..start + output.bytes.len()].copy_from_slice(output.bytes);
            } else if !channel.own_mapping_copy_in(offset, output.bytes) {
                let message = format!("tritonrt: output {:?} of a call does not fit its region", output.name);
                return Err(Broken::Unreadable(crate::wire::WireError::Malformed(message)));
            }
        }
        channel.send(&self.message, announce).map_err(|failed| failed.into_broken())
    }
}

/// What of a received message a call reads: its data section and the worker's region.
pub(super) struct IncomingParts<'m> {
    pub data: &'m [u8],
    pub peer: Option<&'m crate::sys::Mapping>,
    pub region_error: Option<String>,
}

impl<'m> IncomingParts<'m> {
    pub(super) fn of(incoming: &Incoming<'m>) -> IncomingParts<'m> {
        IncomingParts {
            data: incoming.data,
            peer: incoming.peer.map(|peer| peer.mapping()),
            region_error: incoming.region_error.clone(),
        }
    }
}

/// Each input's bytes, copied out of the message or the worker's region (checked against their shapes).
fn copy_inputs(call: &Call<'_>, incoming: &IncomingParts<'_>) -> Result<Vec<Vec<u8>>, Error> {
    let mut inputs = Vec::with_capacity(call.request.inputs.len());
    for input in &call.request.inputs {
        let bad = |detail: String| Error::invalid(format!("input {:?}: {detail}", input.name));
        check_byte_length(input.dtype, &input.shape, input.byte_length).map_err(bad)?;
        let length = input.byte_length as usize;
        let bytes = match input.location {
            LOCATION_INLINE => incoming.data[input.offset as usize..][..length].to_vec(),
            LOCATION_SENDER_REGION => {
                if let Some(error) = &incoming.region_error {
                    return Err(bad(error.clone()));
                }
                let mapping = incoming.peer.ok_or_else(|| bad("the worker's region is not mapped".into()))?;
                let mut bytes = vec![0u8; length];
                if !mapping.copy_out(input.offset, &mut bytes) {
                    return Err(bad(format!("bytes {}+{length} lie outside the region", input.offset)));
                }
                bytes
            }
            other => return Err(Error::new(ERROR_INTERNAL, format!("input {:?}: location {other}", input.name))),
        };
        inputs.push(bytes);
    }
    Ok(inputs)
}
