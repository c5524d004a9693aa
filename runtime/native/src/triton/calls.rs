//! Calls of other models (BLS) and the model loading API through Triton's in-process API: each worker call
//! becomes a `TRITONSERVER_InferenceRequest` run with `TRITONSERVER_ServerInferAsync` on the server that loaded
//! this backend; its responses' outputs are written by the server into buffers of our response allocator and
//! queued, on Triton's threads, for the instance's thread (`execute::calls`). Each call is counted on
//! `/metrics` (`tritonrt_bls_*`) as its final response arrives, here rather than in the worker: the worker then
//! sends no METRICS message for its calls.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CString};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::allocator::allocator;
use super::api::{
    api, Api, InferenceRequest, InferenceResponse, InferenceTrace, Parameter, Server, TritonError, MEMORY_CPU,
    PARAMETER_STRING, REQUEST_RELEASE_ALL, RESPONSE_COMPLETE_FINAL,
};
use super::metrics::BlsMetrics;
use super::text;
use crate::dtype::DataType;
use crate::error::Error;
use crate::execute::{CallEvent, CallHandle, CallOutput, CallResponse, Calls, Events};
use crate::wire::{
    self, Call, Control, Correlation, CONTROL_IS_READY, CONTROL_LOAD, CONTROL_UNLOAD, ERROR_INTERNAL, ERROR_UNSUPPORTED,
};

/// Triton's server, as `TRITONBACKEND_ModelServer` gives it, and the calling model's BLS metrics by callee.
pub(super) struct TritonCalls {
    server: *mut Server,
    model: String,
    metrics: RefCell<HashMap<String, BlsMetrics>>,
}

// SAFETY: Triton's server object is used from any thread by Triton itself (its C API is thread-safe) and
// outlives every model instance, and so every executor holding this.
unsafe impl Send for TritonCalls {}

impl TritonCalls {
    pub(super) fn new(server: *mut Server, model: &str) -> TritonCalls {
        TritonCalls { server, model: model.to_string(), metrics: RefCell::new(HashMap::new()) }
    }

    /// The metrics of calls of `callee` (made on first use).
    fn metrics_of(&self, callee: &str) -> BlsMetrics {
        let mut known = self.metrics.borrow_mut();
        if let Some(metrics) = known.get(callee) {
            return *metrics;
        }
        *known.entry(callee.to_string()).or_insert_with(|| BlsMetrics::new(&self.model, callee))
    }
}

/// An optional function of the API, or an error naming it.
pub(super) fn need<T>(function: Option<T>, name: &str) -> Result<T, Error> {
    function.ok_or_else(|| {
        Error::new(
            ERROR_UNSUPPORTED,
            format!("this tritonserver does not export {name}, which calls of other models need"),
        )
    })
}

/// A Triton error returned to us: its code and message (the error deleted).
pub(super) fn taken(error: *mut TritonError) -> Result<(), Error> {
    if error.is_null() {
        return Ok(());
    }
    let result = Err(read_error(error));
    // SAFETY: returned to us, so ours to delete, once.
    unsafe { (api().error_delete)(error) };
    result
}

/// The code and message of a live Triton error (not deleted: it may belong to a response).
fn read_error(error: *mut TritonError) -> Error {
    let api = api();
    // SAFETY: a live error object; its message lives as long as it and is copied here.
    let message = unsafe { text((api.error_message)(error)) }.unwrap_or("(no message)").to_string();
    // SAFETY: as above.
    let code = api.error_code.map_or(ERROR_INTERNAL as u32, |code| unsafe { code(error) });
    Error::new(u8::try_from(code).unwrap_or(ERROR_INTERNAL), message)
}

fn c_string(value: &str, what: &str) -> Result<CString, Error> {
    CString::new(value).map_err(|_| Error::invalid(format!("{what} {value:?} contains a NUL byte")))
}

/// What a call's callbacks share: where its responses go, and its request until Triton releases it.
struct Shared {
    seq: u64,
    call_id: u64,
    events: Arc<Events>,
    /// The request, until its release (null after): cancel() and the release callback both lock it.
    request: Mutex<*mut InferenceRequest>,
    /// The inputs' bytes, which the request refers to until it is released.
    _inputs: Vec<Vec<u8>>,
    /// Counted when the final response arrives: an error if any response was one.
    metrics: BlsMetrics,
    started: Instant,
    failed: AtomicBool,
}

// SAFETY: the raw request pointer is only used under the mutex, and Triton's request functions (cancel, delete)
// may be called from any thread.
unsafe impl Send for Shared {}
// SAFETY: as above: every access to the pointer goes through the mutex.
unsafe impl Sync for Shared {}

struct Handle(Arc<Shared>);

impl CallHandle for Handle {
    fn cancel(&self) {
        let request = self.0.request.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let (false, Some(cancel)) = (request.is_null(), api().infer_request_cancel) {
            // SAFETY: the request is live (not released: released requests are null under this lock).
            let _ = taken(unsafe { cancel(*request) });
        }
    }
}

/// A callee's response, deleted (and its buffers released to our allocator) when dropped.
struct TritonResponse(*mut InferenceResponse);

// SAFETY: a response is owned by whoever holds it; Triton's response functions may be called from any thread.
unsafe impl Send for TritonResponse {}

impl Drop for TritonResponse {
    fn drop(&mut self) {
        if let Some(delete) = api().infer_response_delete {
            // SAFETY: ours (given by the response callback), deleted once.
            let _ = taken(unsafe { delete(self.0) });
        }
    }
}

impl CallResponse for TritonResponse {
    fn error(&self) -> Option<Error> {
        let error_of = api().infer_response_error?;
        // SAFETY: a live response; the error it returns belongs to the response (read, not deleted).
        let error = unsafe { error_of(self.0) };
        (!error.is_null()).then(|| read_error(error))
    }

    fn outputs(&self) -> Result<Vec<CallOutput<'_>>, Error> {
        let api = api();
        let count_of = need(api.infer_response_output_count, "TRITONSERVER_InferenceResponseOutputCount")?;
        let output_of = need(api.infer_response_output, "TRITONSERVER_InferenceResponseOutput")?;
        let mut count = 0u32;
        // SAFETY: a live response; out-pointer is a local.
        taken(unsafe { count_of(self.0, &mut count) })?;
        let mut outputs = Vec::with_capacity(count as usize);
        for index in 0..count {
            let (mut name, mut dtype, mut shape, mut ndim) = (ptr::null::<c_char>(), 0u32, ptr::null::<i64>(), 0u64);
            let (mut base, mut size, mut memory, mut device, mut userp) =
                (ptr::null::<c_void>(), 0usize, 0u32, 0i64, ptr::null_mut::<c_void>());
            // SAFETY: a live response and a valid index; every out-pointer is a local.
            taken(unsafe {
                output_of(
                    self.0,
                    index,
                    &mut name,
                    &mut dtype,
                    &mut shape,
                    &mut ndim,
                    &mut base,
                    &mut size,
                    &mut memory,
                    &mut device,
                    &mut userp,
                )
            })?;
            // SAFETY: the name lives as long as the response (our borrow of self).
            let name = unsafe { text(name) }.ok_or_else(|| Error::internal("a call's output has no name"))?;
            let dtype = DataType::from_code(dtype).ok_or_else(|| {
                Error::unsupported(format!("output {name:?} has a data type ({dtype}) tritonrt cannot pass on"))
            })?;
            if memory != MEMORY_CPU && size > 0 {
                return Err(Error::internal(format!("output {name:?} was not written to host memory")));
            }
            let shape: &[i64] = if ndim == 0 || shape.is_null() {
                &[]
            } else {
                // SAFETY: Triton's shape array of `ndim` dimensions, alive as long as the response.
                unsafe { std::slice::from_raw_parts(shape, ndim as usize) }
            };
            let bytes: &[u8] = if size == 0 || base.is_null() {
                &[]
            } else {
                // SAFETY: `size` bytes of host memory that our allocator gave for this output, alive until the
                // response is deleted (when `self` drops, after this borrow).
                unsafe { std::slice::from_raw_parts(base.cast::<u8>(), size) }
            };
            outputs.push(CallOutput { name, dtype, shape, bytes });
        }
        Ok(outputs)
    }
}

unsafe extern "C" fn request_released(request: *mut InferenceRequest, flags: u32, userp: *mut c_void) {
    if flags & REQUEST_RELEASE_ALL == 0 {
        return;
    }
    // SAFETY: `userp` is the Arc<Shared> given to SetReleaseCallback, taken back once (at the release).
    let shared = unsafe { Arc::from_raw(userp.cast::<Shared>()) };
    let mut held = shared.request.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    *held = ptr::null_mut();
    drop(held);
    if let Some(delete) = api().infer_request_delete {
        // SAFETY: Triton released the request to us; deleted once.
        let _ = taken(unsafe { delete(request) });
    }
}

unsafe extern "C" fn responded(response: *mut InferenceResponse, flags: u32, userp: *mut c_void) {
    let last = flags & RESPONSE_COMPLETE_FINAL != 0;
    // SAFETY: `userp` is the Arc<Shared> given to SetResponseCallback, alive until the final response, when it is
    // taken back.
    let shared = unsafe { &*userp.cast::<Shared>() };
    if !response.is_null() {
        if let Some(error_of) = api().infer_response_error {
            // SAFETY: a live response; its error (if any) belongs to it and is only tested for null here.
            if !unsafe { error_of(response) }.is_null() {
                shared.failed.store(true, Ordering::Relaxed);
            }
        }
    }
    if last {
        shared.metrics.ended(shared.failed.load(Ordering::Relaxed), shared.started.elapsed().as_secs_f64());
    }
    let response = (!response.is_null()).then(|| Box::new(TritonResponse(response)) as Box<dyn CallResponse>);
    shared.events.send(CallEvent { seq: shared.seq, call_id: shared.call_id, response, last });
    if last {
        // SAFETY: the final response: no callback uses this reference any more.
        drop(unsafe { Arc::from_raw(userp.cast::<Shared>()) });
    }
}

impl Calls for TritonCalls {
    fn start(
        &self,
        seq: u64,
        call: &Call<'_>,
        inputs: Vec<Vec<u8>>,
        events: &Arc<Events>,
        parent_trace: usize,
    ) -> Result<Box<dyn CallHandle>, Error> {
        let started = Instant::now();
        let api = api();
        let new = need(api.infer_request_new, "TRITONSERVER_InferenceRequestNew")?;
        let delete = need(api.infer_request_delete, "TRITONSERVER_InferenceRequestDelete")?;
        let infer = need(api.server_infer_async, "TRITONSERVER_ServerInferAsync")?;
        let allocator = allocator(api)?;
        let model = c_string(call.model_name, "the model name")?;
        let mut request = ptr::null_mut();
        // SAFETY: a live server; the name is NUL-terminated; out-pointer is a local.
        taken(unsafe { new(&mut request, self.server, model.as_ptr(), call.model_version) })?;
        let shared = Arc::new(Shared {
            seq,
            call_id: call.call_id,
            events: events.clone(),
            request: Mutex::new(request),
            _inputs: inputs,
            metrics: self.metrics_of(call.model_name),
            started,
            failed: AtomicBool::new(false),
        });
        let built = build(api, request, call, &shared._inputs);
        let result = built.and_then(|()| {
            let set_release =
                need(api.infer_request_set_release_callback, "TRITONSERVER_InferenceRequestSetReleaseCallback")?;
            let set_response =
                need(api.infer_request_set_response_callback, "TRITONSERVER_InferenceRequestSetResponseCallback")?;
            let trace = child_trace(api, parent_trace as *mut InferenceTrace);
            let release_userp = Arc::into_raw(shared.clone()) as *mut c_void;
            let response_userp = Arc::into_raw(shared.clone()) as *mut c_void;
            // SAFETY: a live request; the callbacks have Triton's signatures; each userp is an Arc taken back by
            // its callback (or below, when the request never starts).
            let result = taken(unsafe { set_release(request, request_released, release_userp) })
                .and_then(|()| {
                    taken(unsafe { set_response(request, allocator, ptr::null_mut(), responded, response_userp) })
                })
                .and_then(|()| taken(unsafe { infer(self.server, request, trace) }));
            if result.is_err() {
                if let (false, Some(delete)) = (trace.is_null(), api.trace_delete) {
                    // SAFETY: our child trace, not taken by the server (the request did not start).
                    let _ = taken(unsafe { delete(trace) });
                }
                // Not started: no callback will run; take both references back.
                // SAFETY: the two Arcs made above, each taken back once.
                unsafe {
                    drop(Arc::from_raw(release_userp.cast::<Shared>()));
                    drop(Arc::from_raw(response_userp.cast::<Shared>()));
                }
            }
            result
        });
        if let Err(error) = result {
            *shared.request.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = ptr::null_mut();
            // SAFETY: ours (never given to the server), deleted once.
            let _ = taken(unsafe { delete(request) });
            return Err(error);
        }
        Ok(Box::new(Handle(shared)))
    }

    fn not_started(&self, callee: &str, seconds: f64) {
        self.metrics_of(callee).ended(true, seconds);
    }

    fn control(&self, control: &Control<'_>, data: &[u8]) -> Result<bool, Error> {
        let api = api();
        let model = c_string(control.model_name, "the model name")?;
        match control.op {
            CONTROL_IS_READY => {
                let is_ready = need(api.server_model_is_ready, "TRITONSERVER_ServerModelIsReady")?;
                let mut ready = false;
                // SAFETY: a live server; NUL-terminated name; out-pointer is a local.
                taken(unsafe { is_ready(self.server, model.as_ptr(), control.model_version, &mut ready) })?;
                Ok(ready)
            }
            CONTROL_LOAD => {
                let load = need(api.server_load_model_with_parameters, "TRITONSERVER_ServerLoadModelWithParameters")?;
                let parameter_new = need(api.parameter_new, "TRITONSERVER_ParameterNew")?;
                let bytes_new = need(api.parameter_bytes_new, "TRITONSERVER_ParameterBytesNew")?;
                let delete = need(api.parameter_delete, "TRITONSERVER_ParameterDelete")?;
                let mut parameters: Vec<*mut Parameter> = Vec::new();
                let mut built = Ok(());
                if !control.config.is_empty() {
                    let config = c_string(control.config, "the configuration")?;
                    // SAFETY: NUL-terminated key and value; ParameterNew copies the string.
                    parameters
                        .push(unsafe { parameter_new(c"config".as_ptr(), PARAMETER_STRING, config.as_ptr().cast()) });
                }
                for file in &control.files {
                    match c_string(&format!("file:{}", file.path), "the file path") {
                        Ok(key) => {
                            let bytes = &data[file.offset as usize..][..file.length as usize];
                            // SAFETY: NUL-terminated key; ParameterBytesNew refers to the bytes, which outlive the
                            // load below (the parameters are deleted after it).
                            parameters.push(unsafe { bytes_new(key.as_ptr(), bytes.as_ptr().cast(), file.length) });
                        }
                        Err(error) => built = Err(error),
                    }
                }
                if parameters.iter().any(|parameter| parameter.is_null()) {
                    built = Err(Error::internal("Triton could not make a load parameter"));
                }
                let result = built.and_then(|()| {
                    let list = parameters.as_mut_ptr().cast::<*const Parameter>();
                    // SAFETY: a live server; `list` holds `len` live parameters.
                    taken(unsafe { load(self.server, model.as_ptr(), list, parameters.len() as u64) })
                });
                for parameter in parameters.into_iter().filter(|parameter| !parameter.is_null()) {
                    // SAFETY: ours, from ParameterNew / ParameterBytesNew, deleted once.
                    unsafe { delete(parameter) };
                }
                result.map(|()| false)
            }
            op => {
                let unload = if op == CONTROL_UNLOAD {
                    need(api.server_unload_model, "TRITONSERVER_ServerUnloadModel")?
                } else {
                    need(api.server_unload_model_and_dependents, "TRITONSERVER_ServerUnloadModelAndDependents")?
                };
                // SAFETY: a live server; NUL-terminated name.
                taken(unsafe { unload(self.server, model.as_ptr()) })?;
                Ok(false)
            }
        }
    }
}

/// A child of `parent` (the caller's request's trace: Triton puts the callee's spans under the caller's model span,
/// as for the Python backend's calls), or null (not traced, or the server lacks the function: the call then runs
/// untraced).
fn child_trace(api: &Api, parent: *mut InferenceTrace) -> *mut InferenceTrace {
    let Some(spawn) = api.trace_spawn_child else { return ptr::null_mut() };
    if parent.is_null() {
        return ptr::null_mut();
    }
    let mut child = ptr::null_mut();
    // SAFETY: `parent` is a live request's trace (the request outlives the call's start); out-pointer is a local.
    if taken(unsafe { spawn(parent, &mut child) }).is_err() {
        return ptr::null_mut();
    }
    child
}

/// Set the request's id, flags, correlation, timeout, parameters, inputs and requested outputs.
fn build(api: &Api, request: *mut InferenceRequest, call: &Call<'_>, inputs: &[Vec<u8>]) -> Result<(), Error> {
    let r = &call.request;
    if !r.id.is_empty() {
        let set = need(api.infer_request_set_id, "TRITONSERVER_InferenceRequestSetId")?;
        let id = c_string(r.id, "the request id")?;
        // SAFETY: a live request; Triton copies the id.
        taken(unsafe { set(request, id.as_ptr()) })?;
    }
    if r.flags != 0 {
        let set = need(api.infer_request_set_flags, "TRITONSERVER_InferenceRequestSetFlags")?;
        // SAFETY: a live request.
        taken(unsafe { set(request, r.flags) })?;
    }
    match r.correlation {
        Correlation::None => {}
        Correlation::Uint(id) => {
            let set = need(api.infer_request_set_correlation_id, "TRITONSERVER_InferenceRequestSetCorrelationId")?;
            // SAFETY: a live request.
            taken(unsafe { set(request, id) })?;
        }
        Correlation::String(id) => {
            let set = need(
                api.infer_request_set_correlation_id_string,
                "TRITONSERVER_InferenceRequestSetCorrelationIdString",
            )?;
            let id = c_string(id, "the correlation id")?;
            // SAFETY: a live request; Triton copies the string.
            taken(unsafe { set(request, id.as_ptr()) })?;
        }
    }
    if call.timeout_us != 0 {
        let set = need(api.infer_request_set_timeout, "TRITONSERVER_InferenceRequestSetTimeoutMicroseconds")?;
        // SAFETY: a live request.
        taken(unsafe { set(request, call.timeout_us) })?;
    }
    for (key, value) in &r.parameters {
        let key = c_string(key, "the parameter")?;
        // SAFETY (each arm): a live request; NUL-terminated key (and value), copied by Triton.
        match *value {
            wire::Parameter::String(text) => {
                let set =
                    need(api.infer_request_set_string_parameter, "TRITONSERVER_InferenceRequestSetStringParameter")?;
                let text = c_string(text, "the parameter value")?;
                taken(unsafe { set(request, key.as_ptr(), text.as_ptr()) })?;
            }
            wire::Parameter::Int(number) => {
                let set = need(api.infer_request_set_int_parameter, "TRITONSERVER_InferenceRequestSetIntParameter")?;
                taken(unsafe { set(request, key.as_ptr(), number) })?;
            }
            wire::Parameter::Bool(flag) => {
                let set = need(api.infer_request_set_bool_parameter, "TRITONSERVER_InferenceRequestSetBoolParameter")?;
                taken(unsafe { set(request, key.as_ptr(), flag) })?;
            }
            wire::Parameter::Double(number) => {
                let set =
                    need(api.infer_request_set_double_parameter, "TRITONSERVER_InferenceRequestSetDoubleParameter")?;
                taken(unsafe { set(request, key.as_ptr(), number) })?;
            }
        }
    }
    let add_input = need(api.infer_request_add_input, "TRITONSERVER_InferenceRequestAddInput")?;
    let append = need(api.infer_request_append_input_data, "TRITONSERVER_InferenceRequestAppendInputData")?;
    for (input, bytes) in r.inputs.iter().zip(inputs) {
        let name = c_string(input.name, "the input name")?;
        // SAFETY: a live request; the shape has `len` dimensions; Triton copies name and shape.
        taken(unsafe {
            add_input(request, name.as_ptr(), input.dtype as u32, input.shape.as_ptr(), input.shape.len() as u64)
        })?;
        if !bytes.is_empty() {
            // SAFETY: the bytes live in the call's shared state until the request is released.
            taken(unsafe { append(request, name.as_ptr(), bytes.as_ptr().cast(), bytes.len(), MEMORY_CPU, 0) })?;
        }
    }
    let add_output = need(api.infer_request_add_requested_output, "TRITONSERVER_InferenceRequestAddRequestedOutput")?;
    for output in &r.requested_outputs {
        let name = c_string(output, "the output name")?;
        // SAFETY: a live request; Triton copies the name.
        taken(unsafe { add_output(request, name.as_ptr()) })?;
    }
    Ok(())
}
