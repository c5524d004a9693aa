//! Sending a batch: read and check its requests, place each input inline or in our region, and send one BATCH.

use std::borrow::Cow;

use super::{Executor, Live, Timing};
use crate::batch::{Batch, Buffer, Input};
use crate::channel::{ConnectError, SendFailed};
use crate::dtype::{check_byte_length, check_bytes_serialization, element_count, DataType};
use crate::error::Error;
use crate::wire::{
    self, align, encode_head, Body, Header, Tensor, ERROR_CANCELLED, ERROR_INVALID_ARG, FLAG_NEW_REGION, FLAG_RERUN,
    LOCATION_INLINE, LOCATION_SENDER_REGION, MAX_DATA_BYTES,
};

impl Executor {
    /// Read and check the requests (only request `only`, when given), fail those that cannot be sent, and send
    /// the others as one BATCH. Requests that cannot be sent go to `failed` (the caller fails them), the others
    /// to `live`.
    pub(super) fn send_batch<B: Batch>(
        &mut self,
        batch: &mut B,
        only: Option<usize>,
        live: &mut Vec<Live>,
        failed: &mut Vec<(usize, Error)>,
        timing: &mut Timing,
    ) -> Result<(), SendError> {
        let channel = self.channel.as_mut().expect("connected");
        let threshold = channel.settings.inline_threshold.max(1);
        let mut views = Vec::with_capacity(batch.len());
        for index in (0..batch.len()).filter(|&index| only.is_none_or(|only| only == index)) {
            if batch.is_cancelled(index) {
                failed.push((index, Error::new(ERROR_CANCELLED, "tritonrt: the request was cancelled")));
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
        self.own_top = region_end;
        let (region_id, announce) = if region_end > 0 {
            let (region, announce) = channel.own_region(region_end).map_err(SendError::Requests)?;
            (region.id, announce)
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
                trace_context: view.trace_context,
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
            flags: if announce { FLAG_NEW_REGION } else { 0 } | if self.rerunning { FLAG_RERUN } else { 0 },
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
        if let Some(error) = copy_error {
            return Err(SendError::Requests(error));
        }
        if live.is_empty() {
            return Ok(());
        }
        channel.send(message, announce).map_err(SendError::Channel)
    }
}

pub(super) enum SendError {
    /// Every live request fails with this (the connection goes on).
    Requests(Error),
    /// No connection to the worker could be made: every request fails with this.
    Unavailable(ConnectError),
    /// The connection failed (`SendFailed::Unsent`: before any byte of the batch went).
    Channel(SendFailed),
}

/// Check each input's byte size against its shape and type (overflow-checked, before anything is copied)
/// and each BYTES input's serialization. The error names the input.
fn check_inputs<B: Batch>(inputs: &[Input<'_>], batch: &B) -> Result<(), Error> {
    for input in inputs {
        let invalid =
            |detail: String| Error::new(ERROR_INVALID_ARG, format!("tritonrt: input {:?}: {detail}", input.name));
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
                    })?;
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
fn copy_input<B: Batch>(input: &Input<'_>, batch: &B, put: &mut dyn FnMut(usize, &[u8]) -> bool) -> Result<(), Error> {
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
            return Err(Error::internal(format!("tritonrt: input {:?} does not fit where it was placed", input.name)));
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
