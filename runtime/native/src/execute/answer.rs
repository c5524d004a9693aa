//! Reading the worker's answer to a batch: its replies and errors, forwarded cancellations, and the outputs
//! each response adds to its request.

use std::time::Instant;

use super::calls::{CallState, IncomingParts};
use super::{Executor, Live};
use crate::batch::Batch;
use crate::channel::{Broken, Incoming};
use crate::dtype::{check_bytes_serialization, element_count, DataType};
use crate::error::Error;
use crate::sys::Mapping;
use crate::wire::{
    decode_body, Body, Response, Tensor, ERROR_INTERNAL, FLAG_FINAL, FLAG_RERUN, FLAG_RETAINED, KIND_BATCH_ERROR,
    KIND_METRICS, KIND_REPLY, LOCATION_INLINE, LOCATION_RECEIVER_REGION, LOCATION_SENDER_REGION,
};

/// How often a wait for the worker's answer checks whether clients cancelled.
const CANCEL_CHECK_MS: i32 = 50;

impl Executor {
    /// Read the worker's answer to the batch just sent, answering requests as responses arrive, and tell the
    /// worker about clients that cancel (checked every CANCEL_CHECK_MS, whether or not replies keep coming).
    /// `Some(crash)`: the worker process died holding the batch, and its owner allows a rerun (`FLAG_RERUN`): the
    /// requests not done are left unanswered, for the caller.
    pub(super) fn await_answer<B: Batch>(&mut self, batch: &mut B, live: &mut [Live]) -> Result<Option<Error>, Broken> {
        let seq = self.seq;
        let decoupled = self.target.decoupled;
        let rerunnable = !decoupled && !self.target.sequence;
        let channel = self.channel.as_mut().expect("connected");
        let calls = &mut self.calls;
        let own_top = &mut self.own_top;
        let mut replies: u32 = 0;
        let mut last_check = Instant::now();
        loop {
            let waited = last_check.elapsed().as_millis().min(CANCEL_CHECK_MS as u128) as i32;
            if let Some(incoming) = channel.poll_message(CANCEL_CHECK_MS - waited)? {
                let header = incoming.header;
                if header.kind == KIND_METRICS && header.seq == seq {
                    // The worker's metric updates: applied, and the wait goes on (not a reply).
                    match decode_body(&header, incoming.meta) {
                        Ok(Body::Metrics(updates)) => self.metrics.apply(&updates),
                        Ok(_) => unreachable!("a METRICS header decodes to metrics"),
                        Err(error) => return Err(Broken::Unreadable(error)),
                    }
                    continue;
                }
                if header.seq == seq && CallState::serves(header.kind) {
                    // A call of another model, or the model loading API: served, and the wait goes on.
                    let Some(state) = calls.as_mut() else {
                        return Err(Broken::OutOfStep { batch: seq, kind: header.kind, seq: header.seq });
                    };
                    let body = decode_body(&header, incoming.meta).map_err(Broken::Unreadable)?;
                    // The calls' traces are children of the first traced request's.
                    let parent_trace =
                        || live.iter().map(|request| batch.trace(request.index)).find(|&trace| trace != 0).unwrap_or(0);
                    let answer = state.serve(seq, body, &IncomingParts::of(&incoming), parent_trace);
                    drop(incoming);
                    if let Some(answer) = answer {
                        state.answer(channel, own_top, seq, answer)?;
                    }
                    continue;
                }
                if header.seq != seq || (header.kind != KIND_REPLY && header.kind != KIND_BATCH_ERROR) {
                    return Err(Broken::OutOfStep { batch: seq, kind: header.kind, seq: header.seq });
                }
                if header.kind == KIND_BATCH_ERROR && header.has(FLAG_RERUN) && rerunnable {
                    if let Ok(Body::BatchError { code, message }) = decode_body(&header, incoming.meta) {
                        return Ok(Some(Error::new(code, message)));
                    }
                }
                let last = header.kind == KIND_BATCH_ERROR || header.has(FLAG_FINAL);
                if header.kind == KIND_REPLY && !decoupled && !last {
                    return Err(Broken::PartialReply);
                }
                replies += 1;
                answer(&incoming, batch, live, decoupled);
                drop(incoming);
                if last {
                    if header.has(FLAG_RETAINED) {
                        channel.retire_own_region();
                    }
                    return Ok(None);
                }
                if header.region_id != 0 {
                    channel.send_control(seq, &Body::Ack(replies))?;
                }
            }
            if let Some(state) = calls.as_mut().filter(|state| state.busy()) {
                state.forward(channel, own_top, seq)?;
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
                    self.metrics.cancelled(cancelled.len());
                    channel.send_control(seq, &Body::Cancel(cancelled))?;
                    if live.iter().all(|request| request.done || request.cancel_sent) {
                        if let Some(state) = calls.as_mut() {
                            state.cancel_all(false); // nobody waits for what the batch's calls compute
                        }
                    }
                }
            }
        }
    }
}

/// Answer the live requests from one REPLY or BATCH_ERROR.
fn answer<B: Batch>(incoming: &Incoming<'_>, batch: &mut B, live: &mut [Live], decoupled: bool) {
    let header = &incoming.header;
    let last = header.kind == KIND_BATCH_ERROR || header.has(FLAG_FINAL);
    let fail_open = |batch: &mut B, live: &mut [Live], failure: &Error| {
        for request in live.iter_mut().filter(|request| !request.done) {
            batch.fail(request.index, failure);
            request.done = true;
        }
    };
    let body = match decode_body(header, incoming.meta) {
        Ok(body) => body,
        Err(error) => {
            let failure = Error::new(ERROR_INTERNAL, format!("tritonrt: the worker's reply cannot be read: {error}"));
            return fail_open(batch, live, &failure);
        }
    };
    let responses = match body {
        Body::BatchError { code, message } => return fail_open(batch, live, &Error::new(code, message)),
        Body::Reply(responses) => responses,
        _ => unreachable!("kind checked by the caller"),
    };
    if responses.len() != live.len() && !(last && responses.is_empty()) {
        let message = format!(
            "tritonrt: the worker's reply has {} responses for the {} requests of the batch",
            responses.len(),
            live.len()
        );
        return fail_open(batch, live, &Error::new(ERROR_INTERNAL, message));
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
                batch.fail(request.index, &Error::new(code, message));
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
) -> Result<(), Error> {
    for output in outputs {
        if !request.requested.is_empty() && !request.requested.iter().any(|name| name == output.name) {
            continue;
        }
        let bad = |detail: String| Error::new(ERROR_INTERNAL, format!("tritonrt: output {:?}: {detail}", output.name));
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
                let mapping = mapping.ok_or_else(|| bad("its region is not mapped".into()))?;
                // Checked before Triton is asked for a buffer of the worker-declared length.
                if !mapping.holds(output.offset, output.byte_length) {
                    return Err(bad(outside(output)));
                }
                Source::Region(mapping)
            }
            other => return Err(bad(format!("unknown location {other}"))),
        };
        let elements = if output.dtype == DataType::Bytes { element_count(&output.shape).map_err(bad)? } else { 0 };
        let mut fill = |dst: &mut [u8]| -> Result<(), Error> {
            match source {
                Source::Bytes(bytes) => dst.copy_from_slice(bytes),
                Source::Region(mapping) => {
                    if !mapping.copy_out(output.offset, dst) {
                        return Err(bad(outside(output)));
                    }
                }
            }
            if output.dtype == DataType::Bytes {
                // checked on the copy: the worker cannot change it any more
                check_bytes_serialization(dst, elements).map_err(bad)?;
            }
            Ok(())
        };
        batch.add_output(request.index, output.name, output.dtype, &output.shape, output.byte_length, &mut fill)?;
    }
    Ok(())
}

fn outside(output: &Tensor<'_>) -> String {
    format!("bytes {}+{} lie outside the region", output.offset, output.byte_length)
}

#[derive(Clone, Copy)]
enum Source<'a> {
    Bytes(&'a [u8]),
    Region(&'a Mapping),
}
