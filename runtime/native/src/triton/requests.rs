//! Triton's requests of one ModelInstanceExecute call, as a `Batch`. Dropping it answers any request left
//! unanswered (also while unwinding from a panic), reports statistics and releases every request.

use std::ffi::{c_char, c_void, CString};
use std::ptr;

use super::api::{
    api, ModelInstance, Request, Response, ResponseFactory, MEMORY_CPU, MEMORY_CPU_PINNED, MEMORY_GPU, PARAMETER_BOOL,
    PARAMETER_DOUBLE, PARAMETER_INT, PARAMETER_STRING, REQUEST_RELEASE_ALL, RESPONSE_COMPLETE_FINAL,
};
use super::api::{CUDA_DEVICE_TO_HOST, CUDA_HOST_TO_DEVICE, LOG_ERROR, LOG_VERBOSE};
use super::{check, log, new_error, text};
use crate::batch::{Batch, Buffer, Input, RequestView};
use crate::dtype::DataType;
use crate::error::Error;
use crate::execute::Timing;
use crate::sys;
use crate::wire::{Correlation, Parameter, ERROR_INTERNAL, ERROR_INVALID_ARG, MAX_TEXT_BYTES};

struct Slot {
    request: *mut Request,
    factory: *mut ResponseFactory,
    response: *mut Response,
    answered: bool,
    success: bool,
}

pub struct TritonBatch {
    instance: *mut ModelInstance,
    slots: Vec<Slot>,
    exec_start_ns: u64,
    timing: Timing,
}

fn failure(code: u8) -> impl Fn(String) -> Error {
    move |message| Error::new(code, format!("tritonrt: {message}"))
}

/// Triton's trace context of `request` (OpenTelemetry mode: JSON of the W3C headers of Triton's span); ""
/// when the request is not traced or the server lacks the tracing API.
fn trace_context_of<'r>(request: *mut Request) -> Result<&'r str, Error> {
    let api = api();
    let (Some(request_trace), Some(trace_context)) = (api.request_trace, api.trace_context) else {
        return Ok("");
    };
    let internal = failure(ERROR_INTERNAL);
    let mut trace = ptr::null_mut();
    // SAFETY: a live request; the trace it returns is owned by the request (not ours to free).
    check(unsafe { request_trace(request, &mut trace) }).map_err(&internal)?;
    if trace.is_null() {
        return Ok("");
    }
    let mut context = ptr::null();
    // SAFETY: a live trace; the context string is owned by the trace, which lives as long as the request
    // (released only when the batch is dropped, after the message that carries it was sent).
    check(unsafe { trace_context(trace, &mut context) }).map_err(&internal)?;
    if context.is_null() {
        return Ok("");
    }
    // SAFETY: a NUL-terminated string of the trace (see above for its lifetime).
    let context = unsafe { text(context) }.ok_or_else(|| internal("the trace context is not UTF-8".into()))?;
    if context.len() > MAX_TEXT_BYTES as usize {
        return Err(internal(format!("the trace context has {} bytes (limit {MAX_TEXT_BYTES})", context.len())));
    }
    Ok(context)
}

impl TritonBatch {
    /// Take ownership of `requests` (Triton's, for this call). Decoupled models get a response factory per
    /// request, so that responses can be sent one by one.
    ///
    /// # Safety
    /// `instance` and every request pointer are live Triton objects handed to ModelInstanceExecute, owned
    /// by the backend from now on, each appearing once.
    pub unsafe fn new(
        instance: *mut ModelInstance,
        requests: &[*mut Request],
        decoupled: bool,
        exec_start_ns: u64,
    ) -> TritonBatch {
        let api = api();
        let slots = requests
            .iter()
            .map(|&request| {
                let mut factory = ptr::null_mut();
                if decoupled {
                    // SAFETY: a live request; the factory is ours to delete.
                    if let Err(error) = check(unsafe { (api.factory_new)(&mut factory, request) }) {
                        log(LOG_ERROR, &format!("tritonrt: cannot create a response factory: {error}"));
                        factory = ptr::null_mut();
                    }
                }
                Slot { request, factory, response: ptr::null_mut(), answered: false, success: false }
            })
            .collect();
        TritonBatch { instance, slots, exec_start_ns, timing: Timing::default() }
    }

    /// Record the execution's timing; dropping the batch then reports it.
    pub fn complete(mut self, timing: Timing) {
        self.timing = timing;
    }

    fn response(&mut self, index: usize) -> Result<*mut Response, Error> {
        let slot = &mut self.slots[index];
        if slot.response.is_null() {
            let api = api();
            let mut response = ptr::null_mut();
            // SAFETY: live request / factory; the new response is ours until sent or deleted.
            let error = unsafe {
                if slot.factory.is_null() {
                    (api.response_new)(&mut response, slot.request)
                } else {
                    (api.response_new_from_factory)(&mut response, slot.factory)
                }
            };
            check(error).map_err(failure(ERROR_INTERNAL))?;
            slot.response = response;
        }
        Ok(slot.response)
    }

    fn read_input(&self, request: *mut Request, position: u32) -> Result<Input<'_>, Error> {
        let api = api();
        let invalid = failure(ERROR_INVALID_ARG);
        let mut input = ptr::null_mut();
        // SAFETY: a live request; `position` < its input count.
        check(unsafe { (api.request_input_by_index)(request, position, &mut input) }).map_err(&invalid)?;
        let (mut name, mut dtype, mut shape, mut dims, mut byte_size, mut buffer_count) =
            (ptr::null(), 0u32, ptr::null(), 0u32, 0u64, 0u32);
        // SAFETY: a live input; every out-pointer is a local.
        check(unsafe {
            (api.input_properties)(
                input,
                &mut name,
                &mut dtype,
                &mut shape,
                &mut dims,
                &mut byte_size,
                &mut buffer_count,
            )
        })
        .map_err(&invalid)?;
        // SAFETY: the name and shape belong to the input, which lives as long as the request (and so as long
        // as &self: requests are released only when the batch is dropped).
        let name = unsafe { text(name) }.ok_or_else(|| invalid("an input has no UTF-8 name".into()))?;
        let shape: &[i64] = if dims == 0 || shape.is_null() {
            &[]
        } else {
            // SAFETY: Triton's shape array has `dims` elements (see above for its lifetime).
            unsafe { std::slice::from_raw_parts(shape, dims as usize) }
        };
        let dtype = DataType::from_code(dtype)
            .ok_or_else(|| invalid(format!("input {name:?} has data type {dtype}, which tritonrt does not support")))?;
        let mut buffers = Vec::with_capacity(buffer_count as usize);
        for index in 0..buffer_count {
            let (mut address, mut size, mut memory_type, mut device) = (ptr::null(), 0u64, MEMORY_CPU, 0i64);
            // SAFETY: a live input, index < buffer_count; we ask for CPU memory and get told where it is.
            check(unsafe { (api.input_buffer)(input, index, &mut address, &mut size, &mut memory_type, &mut device) })
                .map_err(&invalid)?;
            let len =
                usize::try_from(size).map_err(|_| invalid(format!("input {name:?}: a buffer of {size} bytes")))?;
            buffers.push(match memory_type {
                _ if len == 0 => Buffer::Host(&[]),
                MEMORY_CPU | MEMORY_CPU_PINNED if !address.is_null() => {
                    // SAFETY: Triton's input buffer holds `size` readable bytes and stays unchanged while the
                    // request lives (the batch's lifetime, see above).
                    Buffer::Host(unsafe { std::slice::from_raw_parts(address.cast::<u8>(), len) })
                }
                MEMORY_GPU if !address.is_null() => Buffer::Device { address: address as usize, len, device },
                other => return Err(invalid(format!("input {name:?}: a buffer in memory of type {other}"))),
            });
        }
        let total: u64 = buffers.iter().map(|buffer| buffer.len() as u64).sum();
        if total != byte_size {
            return Err(invalid(format!("input {name:?}: its buffers hold {total} bytes, its size says {byte_size}")));
        }
        Ok(Input { name, dtype, shape, buffers })
    }
}

impl Batch for TritonBatch {
    fn len(&self) -> usize {
        self.slots.len()
    }

    fn read(&self, index: usize, sequence: bool) -> Result<RequestView<'_>, Error> {
        let api = api();
        let request = self.slots[index].request;
        let invalid = failure(ERROR_INVALID_ARG);
        let mut id = ptr::null();
        // SAFETY: a live request (all Triton strings below live as long as it: see read_input).
        check(unsafe { (api.request_id)(request, &mut id) }).map_err(&invalid)?;
        let id = unsafe { text(id) }.unwrap_or("");
        let (mut flags, mut correlation) = (0u32, Correlation::None);
        if sequence {
            // SAFETY: a live request; out-pointers are locals.
            check(unsafe { (api.request_flags)(request, &mut flags) }).map_err(&invalid)?;
            let mut number = 0u64;
            // SAFETY: as above. A string correlation id makes the numeric query fail: then ask for the string.
            if check(unsafe { (api.request_correlation_id)(request, &mut number) }).is_ok() {
                correlation = if number == 0 { Correlation::None } else { Correlation::Uint(number) };
            } else {
                let mut string = ptr::null();
                check(unsafe { (api.request_correlation_id_string)(request, &mut string) }).map_err(&invalid)?;
                correlation = unsafe { text(string) }.map_or(Correlation::None, Correlation::String);
            }
        }
        let mut count = 0u32;
        // SAFETY: as above.
        check(unsafe { (api.request_parameter_count)(request, &mut count) }).map_err(&invalid)?;
        let mut parameters = Vec::with_capacity(count as usize);
        for position in 0..count {
            let (mut key, mut kind, mut value) = (ptr::null(), 0u32, ptr::null::<c_void>());
            // SAFETY: position < count; the value points to the parameter's storage, typed by `kind`.
            check(unsafe { (api.request_parameter)(request, position, &mut key, &mut kind, &mut value) })
                .map_err(&invalid)?;
            let Some(key) = (unsafe { text(key) }).filter(|key| !key.is_empty()) else { continue };
            if value.is_null() {
                continue;
            }
            // SAFETY: Triton stores a C string, an int64, a bool or a double, per `kind`.
            let parameter = unsafe {
                match kind {
                    PARAMETER_STRING => text(value.cast::<c_char>()).map(Parameter::String),
                    PARAMETER_INT => Some(Parameter::Int(*value.cast::<i64>())),
                    PARAMETER_BOOL => Some(Parameter::Bool(*value.cast::<bool>())),
                    PARAMETER_DOUBLE => Some(Parameter::Double(*value.cast::<f64>())),
                    _ => None, // BYTES parameters carry no size here: not forwarded
                }
            };
            if let Some(parameter) = parameter {
                parameters.push((key, parameter));
            }
        }
        // SAFETY: as above.
        check(unsafe { (api.request_output_count)(request, &mut count) }).map_err(&invalid)?;
        let mut requested_outputs = Vec::with_capacity(count as usize);
        for position in 0..count {
            let mut name = ptr::null();
            // SAFETY: position < count.
            check(unsafe { (api.request_output_name)(request, position, &mut name) }).map_err(&invalid)?;
            requested_outputs
                .push(unsafe { text(name) }.ok_or_else(|| invalid("a requested output name is not UTF-8".into()))?);
        }
        // SAFETY: as above.
        check(unsafe { (api.request_input_count)(request, &mut count) }).map_err(&invalid)?;
        let inputs = (0..count).map(|position| self.read_input(request, position)).collect::<Result<Vec<_>, _>>()?;
        let trace_context = trace_context_of(request).unwrap_or_else(|error| {
            log(LOG_VERBOSE, &format!("tritonrt: the request's trace context is not forwarded: {}", error.message));
            ""
        });
        Ok(RequestView { id, flags, correlation, parameters, requested_outputs, inputs, trace_context })
    }

    fn copy_from_device(&self, address: usize, device: i64, dst: &mut [u8]) -> Result<(), Error> {
        let memcpy = api().cuda_memcpy.ok_or_else(|| {
            Error::internal(format!(
                "tritonrt: an input lies in GPU memory (device {device}), but no CUDA runtime is loaded in tritonserver"
            ))
        })?;
        // SAFETY: `address` is Triton's device buffer of at least dst.len() bytes; dst is host memory.
        let status =
            unsafe { memcpy(dst.as_mut_ptr().cast(), address as *const c_void, dst.len(), CUDA_DEVICE_TO_HOST) };
        if status != 0 {
            return Err(Error::internal(format!(
                "tritonrt: copying an input from GPU {device} failed (CUDA error {status})"
            )));
        }
        Ok(())
    }

    fn trace(&self, index: usize) -> usize {
        let Some(request_trace) = api().request_trace else { return 0 };
        let mut trace = ptr::null_mut();
        // SAFETY: a live request; the trace it returns is owned by the request, which outlives the batch's calls
        // (the executor cancels and forgets them before the batch is released).
        match check(unsafe { request_trace(self.slots[index].request, &mut trace) }) {
            Ok(()) => trace as usize,
            Err(_) => 0,
        }
    }

    fn is_cancelled(&self, index: usize) -> bool {
        let api = api();
        let slot = &self.slots[index];
        let mut cancelled = false;
        // SAFETY: live factory / request; out-pointer is a local.
        let error = unsafe {
            if slot.factory.is_null() {
                (api.request_is_cancelled)(slot.request, &mut cancelled)
            } else {
                (api.factory_is_cancelled)(slot.factory, &mut cancelled)
            }
        };
        check(error).is_ok() && cancelled
    }

    fn add_output(
        &mut self,
        index: usize,
        name: &str,
        dtype: DataType,
        shape: &[i64],
        byte_length: u64,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let internal = failure(ERROR_INTERNAL);
        let response = self.response(index)?;
        let api = api();
        let c_name = CString::new(name).map_err(|_| internal(format!("output {name:?} has a NUL in its name")))?;
        let mut output = ptr::null_mut();
        // SAFETY: a live response; name and shape are valid for the call (Triton copies them).
        check(unsafe {
            (api.response_output)(
                response,
                &mut output,
                c_name.as_ptr(),
                dtype as u32,
                shape.as_ptr(),
                shape.len() as u32,
            )
        })
        .map_err(|e| internal(format!("output {name:?}: {e}")))?;
        let len = usize::try_from(byte_length).map_err(|_| internal(format!("output {name:?} is too large")))?;
        let (mut buffer, mut memory_type, mut device) = (ptr::null_mut::<c_void>(), MEMORY_CPU, 0i64);
        // SAFETY: a live output; we prefer CPU memory and are told which we got.
        check(unsafe { (api.output_buffer)(output, &mut buffer, byte_length, &mut memory_type, &mut device) })
            .map_err(|e| internal(format!("output {name:?}: no buffer of {byte_length} bytes: {e}")))?;
        let wrap = |e: String| internal(format!("output {name:?}: {e}"));
        if len == 0 {
            return fill(&mut []);
        }
        if buffer.is_null() {
            return Err(internal(format!("output {name:?}: Triton gave no buffer")));
        }
        match memory_type {
            MEMORY_CPU | MEMORY_CPU_PINNED => {
                // SAFETY: Triton's output buffer has `len` writable bytes, ours until the response is sent.
                let dst = unsafe { std::slice::from_raw_parts_mut(buffer.cast::<u8>(), len) };
                fill(dst)
            }
            MEMORY_GPU => {
                let memcpy = api
                    .cuda_memcpy
                    .ok_or_else(|| wrap("Triton gave GPU memory, and no CUDA runtime is loaded".into()))?;
                let mut staging = vec![0u8; len];
                fill(&mut staging)?;
                // SAFETY: `buffer` is a device buffer of `len` bytes; staging is host memory of `len` bytes.
                let status = unsafe { memcpy(buffer, staging.as_ptr().cast(), len, CUDA_HOST_TO_DEVICE) };
                if status != 0 {
                    return Err(wrap(format!("copying to GPU {device} failed (CUDA error {status})")));
                }
                Ok(())
            }
            other => Err(wrap(format!("Triton gave memory of unknown type {other}"))),
        }
    }

    fn send(&mut self, index: usize, final_: bool) {
        if self.slots[index].answered {
            return;
        }
        let response = match self.response(index) {
            Ok(response) => response,
            Err(failure) => return self.fail(index, &failure),
        };
        let slot = &mut self.slots[index];
        slot.response = ptr::null_mut();
        let flags = if final_ { RESPONSE_COMPLETE_FINAL } else { 0 };
        // SAFETY: a live response, handed to Triton (it owns it after the call, whatever the result).
        if let Err(error) = check(unsafe { (api().response_send)(response, flags, ptr::null_mut()) }) {
            log(LOG_ERROR, &format!("tritonrt: sending a response failed: {error}"));
        }
        slot.success = true;
        slot.answered = final_;
    }

    fn fail(&mut self, index: usize, failure: &Error) {
        let api = api();
        let slot = &mut self.slots[index];
        if slot.answered {
            return;
        }
        if !slot.response.is_null() {
            // SAFETY: our unsent response; deleted once.
            let _ = check(unsafe { (api.response_delete)(slot.response) });
            slot.response = ptr::null_mut();
        }
        slot.answered = true;
        slot.success = false;
        let response = match self.response(index) {
            Ok(response) => response,
            Err(error) => {
                return log(LOG_ERROR, &format!("{}; the request's error was: {}", error.message, failure.message))
            }
        };
        self.slots[index].response = ptr::null_mut();
        let error = new_error(failure);
        // SAFETY: a live response handed to Triton; ResponseSend does not take the error, we delete it.
        let result = check(unsafe { (api.response_send)(response, RESPONSE_COMPLETE_FINAL, error) });
        unsafe { (api.error_delete)(error) };
        if let Err(send_error) = result {
            log(LOG_ERROR, &format!("tritonrt: sending an error response failed: {send_error}"));
        }
    }

    fn finish(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        if slot.answered {
            return;
        }
        if slot.factory.is_null() {
            return self.send(index, true);
        }
        slot.answered = true;
        slot.success = true;
        // SAFETY: a live factory.
        if let Err(error) = check(unsafe { (api().factory_send_flags)(slot.factory, RESPONSE_COMPLETE_FINAL) }) {
            log(LOG_ERROR, &format!("tritonrt: ending a response stream failed: {error}"));
        }
    }
}

impl Drop for TritonBatch {
    fn drop(&mut self) {
        let unanswered = Error::new(ERROR_INTERNAL, "tritonrt: internal error: the request was not answered");
        for index in 0..self.slots.len() {
            self.fail(index, &unanswered);
        }
        let api = api();
        let exec_end = sys::monotonic_ns();
        let timing = self.timing;
        let (compute_start, compute_end) = if timing.compute_start_ns == 0 {
            (exec_end, exec_end)
        } else {
            (timing.compute_start_ns, timing.compute_end_ns.max(timing.compute_start_ns))
        };
        for slot in &self.slots {
            // SAFETY: live instance and request; statistics go before the release, as Triton requires.
            let reported = unsafe {
                (api.report_statistics)(
                    self.instance,
                    slot.request,
                    slot.success,
                    self.exec_start_ns,
                    compute_start,
                    compute_end,
                    exec_end,
                )
            };
            let _ = check(reported);
            if !slot.factory.is_null() {
                // SAFETY: our factory, deleted once.
                let _ = check(unsafe { (api.factory_delete)(slot.factory) });
            }
            // SAFETY: we own the request; released exactly once, here.
            let _ = check(unsafe { (api.request_release)(slot.request, REQUEST_RELEASE_ALL) });
        }
        if timing.batch_size > 0 {
            // SAFETY: a live instance.
            let reported = unsafe {
                (api.report_batch_statistics)(
                    self.instance,
                    timing.batch_size,
                    self.exec_start_ns,
                    compute_start,
                    compute_end,
                    exec_end,
                )
            };
            let _ = check(reported);
        }
    }
}
