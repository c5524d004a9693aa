//! The benchmarks' floor (`bench/run.py`, `bench/pipeline.py`): a Triton backend that answers each request in
//! Triton's own instance thread, with no worker, no Python and no socket. What a request costs here is what Triton
//! itself costs (HTTP or gRPC frontend, dynamic batcher, instance thread, response): the least that any backend,
//! tritonrt's or Triton's Python backend, can cost on the same server.
//!
//! - A model of any other name answers with a copy of its first input as `OUTPUT`: the floor of an identity model.
//! - A model named `pipeline` calls the model `identity` of the same server for each request (BLS: Triton's
//!   in-process API, `TRITONSERVER_ServerInferAsync`, the input passed by reference, the output into a host buffer
//!   of this library's allocator), waits for its answer and answers with its `OUTPUT`, one request after another as
//!   the benchmark's Python pipelines do: the floor of a pipeline of two models.
//!
//! Only `TRITONBACKEND_ModelInstanceExecute` is defined: Triton's other entry points are optional. `triton` declares
//! the functions it calls itself: linking tritonrt's crate for its declarations would export its entry points beside
//! this one.

#![deny(unsafe_op_in_unsafe_fn)]

use std::alloc::{alloc, dealloc, Layout};
use std::ffi::{c_char, c_void, CStr};
use std::ptr;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

mod triton;
use triton::*;

/// A Triton error from a call: `Err` holds it (owned: sent with the response, or deleted).
fn check(error: *mut TritonError) -> Result<(), *mut TritonError> {
    if error.is_null() {
        Ok(())
    } else {
        Err(error)
    }
}

/// A new Triton error (INTERNAL) with `message`.
fn internal(message: &CStr) -> *mut TritonError {
    // SAFETY: the message is a NUL-terminated string Triton copies.
    unsafe { TRITONSERVER_ErrorNew(ERROR_INTERNAL, message.as_ptr()) }
}

/// Delete an error that is ours (one nobody else takes).
///
/// # Safety
/// `error` was returned to us by Triton and is deleted once.
unsafe fn drop_error(error: *mut TritonError) {
    // SAFETY: as the caller promises.
    unsafe { TRITONSERVER_ErrorDelete(error) };
}

/// A tensor as Triton holds it: its type, shape and bytes (one or more host buffers, in order).
struct Tensor {
    datatype: u32,
    shape: *const i64,
    dims: u32,
    size: usize,
    chunks: Vec<(*const u8, usize)>,
}

/// The first input of `request`, where Triton holds it.
///
/// # Safety
/// `request` is live; the tensor's pointers are valid until it is released.
unsafe fn first_input(request: *mut Request) -> Result<Tensor, *mut TritonError> {
    let mut input = ptr::null_mut();
    // SAFETY: the request is live; the out-pointer is a local.
    check(unsafe { TRITONBACKEND_RequestInputByIndex(request, 0, &mut input) })?;
    let (mut name, mut datatype, mut shape, mut dims, mut size, mut buffers) =
        (ptr::null(), 0u32, ptr::null(), 0u32, 0u64, 0u32);
    // SAFETY: the input belongs to the live request; every out-pointer is a local.
    check(unsafe {
        TRITONBACKEND_InputProperties(input, &mut name, &mut datatype, &mut shape, &mut dims, &mut size, &mut buffers)
    })?;
    let mut chunks = Vec::with_capacity(buffers as usize);
    for index in 0..buffers {
        let (mut data, mut length, mut kind, mut id) = (ptr::null(), 0u64, MEMORY_CPU, 0i64);
        // SAFETY: index < buffer_count; out-pointers are locals (kind asks for CPU memory, Triton may answer other).
        check(unsafe { TRITONBACKEND_InputBuffer(input, index, &mut data, &mut length, &mut kind, &mut id) })?;
        if kind != MEMORY_CPU {
            return Err(internal(c"floor: an input buffer is not in CPU memory"));
        }
        chunks.push((data.cast::<u8>(), length as usize));
    }
    Ok(Tensor { datatype, shape, dims, size: size as usize, chunks })
}

/// Give `response` the output `OUTPUT`: `tensor`'s type, shape and bytes, copied into Triton's buffer.
///
/// # Safety
/// `response` is live and `tensor`'s pointers are valid.
unsafe fn answer(response: *mut Response, tensor: &Tensor) -> Result<(), *mut TritonError> {
    let mut output = ptr::null_mut();
    let name = c"OUTPUT".as_ptr();
    // SAFETY: the shape holds `dims` entries; the name is a C literal.
    check(unsafe {
        TRITONBACKEND_ResponseOutput(response, &mut output, name, tensor.datatype, tensor.shape, tensor.dims)
    })?;
    let (mut out, mut kind, mut id) = (ptr::null_mut(), MEMORY_CPU, 0i64);
    // SAFETY: the output belongs to the live response; out-pointers are locals.
    check(unsafe { TRITONBACKEND_OutputBuffer(output, &mut out, tensor.size as u64, &mut kind, &mut id) })?;
    if kind != MEMORY_CPU {
        return Err(internal(c"floor: the output is not in CPU memory"));
    }
    let mut offset = 0usize;
    for &(data, length) in &tensor.chunks {
        if offset + length > tensor.size {
            return Err(internal(c"floor: the tensor's buffers are larger than its size"));
        }
        // SAFETY: `data` holds `length` bytes; `out` holds `size` bytes and offset + length fits.
        unsafe { ptr::copy_nonoverlapping(data, out.cast::<u8>().add(offset), length) };
        offset += length;
    }
    Ok(())
}

/// Delete a call's request that is ours: never sent, or released by Triton.
///
/// # Safety
/// The caller owns `request`; it is deleted once.
unsafe fn delete_request(request: *mut InferenceRequest) {
    // SAFETY: as the caller promises; an error returned is ours.
    if let Err(error) = check(unsafe { TRITONSERVER_InferenceRequestDelete(request) }) {
        unsafe { drop_error(error) };
    }
}

/// What a call waits for: the callee's final response (its address) and the release of the request.
#[derive(Default)]
struct CallState {
    response: Option<usize>,
    released: bool,
}
type Call = (Mutex<CallState>, Condvar);

unsafe extern "C" fn call_released(request: *mut InferenceRequest, flags: u32, userp: *mut c_void) {
    if flags & REQUEST_RELEASE_ALL == 0 {
        return;
    }
    // SAFETY: Triton released the request (all of it): it is ours to delete, once.
    unsafe { delete_request(request) };
    // SAFETY: `userp` is the Arc<Call> that call_identity() gave away for this callback: taken back once.
    let call = unsafe { Arc::from_raw(userp.cast::<Call>()) };
    call.0.lock().expect("call state").released = true;
    call.1.notify_all();
}

unsafe extern "C" fn call_answered(response: *mut InferenceResponse, flags: u32, userp: *mut c_void) {
    // SAFETY: `userp` is the call's Arc, alive until call_identity() returns, which waits for this final callback.
    let call = unsafe { &*userp.cast::<Call>() };
    if flags & RESPONSE_COMPLETE_FINAL != 0 {
        call.0.lock().expect("call state").response = Some(response as usize);
        call.1.notify_all();
    } else if !response.is_null() {
        // SAFETY: a response before the final one (none for identity) is ours to delete, and an error returned.
        if let Err(error) = check(unsafe { TRITONSERVER_InferenceResponseDelete(response) }) {
            unsafe { drop_error(error) };
        }
    }
}

/// The layout of a call's output buffer of `byte_size` bytes; None for none.
fn buffer_layout(byte_size: usize) -> Option<Layout> {
    (byte_size > 0).then(|| Layout::from_size_align(byte_size, 64).expect("a buffer's layout"))
}

unsafe extern "C" fn allocate(
    _allocator: *mut ResponseAllocator,
    _name: *const c_char,
    byte_size: usize,
    _memory_type: u32,
    _memory_type_id: i64,
    _userp: *mut c_void,
    buffer: *mut *mut c_void,
    buffer_userp: *mut *mut c_void,
    actual_memory_type: *mut u32,
    actual_memory_type_id: *mut i64,
) -> *mut TritonError {
    let memory = match buffer_layout(byte_size) {
        // SAFETY: the layout's size is not zero (uninitialised: the callee writes every byte).
        Some(layout) => unsafe { alloc(layout) },
        None => ptr::null_mut(),
    };
    if byte_size > 0 && memory.is_null() {
        return internal(c"floor: no memory for a call's output");
    }
    // SAFETY: Triton passes valid out-pointers.
    unsafe {
        *buffer = memory.cast::<c_void>();
        *buffer_userp = ptr::null_mut();
        *actual_memory_type = MEMORY_CPU;
        *actual_memory_type_id = 0;
    }
    ptr::null_mut()
}

unsafe extern "C" fn release(
    _allocator: *mut ResponseAllocator,
    buffer: *mut c_void,
    _buffer_userp: *mut c_void,
    byte_size: usize,
    _memory_type: u32,
    _memory_type_id: i64,
) -> *mut TritonError {
    if let (false, Some(layout)) = (buffer.is_null(), buffer_layout(byte_size)) {
        // SAFETY: `buffer` is what allocate() allocated with this layout, released once.
        unsafe { dealloc(buffer.cast::<u8>(), layout) };
    }
    ptr::null_mut()
}

/// The allocator of the calls' outputs (host memory), made once (two first calls at once may each make one: one is
/// kept, the other leaks, which a benchmark can afford).
fn allocator() -> Result<*mut ResponseAllocator, *mut TritonError> {
    static ALLOCATOR: OnceLock<usize> = OnceLock::new();
    if let Some(&address) = ALLOCATOR.get() {
        return Ok(address as *mut ResponseAllocator);
    }
    let mut made = ptr::null_mut();
    // SAFETY: the out-pointer is a local; the callbacks live as long as the library.
    check(unsafe { TRITONSERVER_ResponseAllocatorNew(&mut made, allocate, release, None) })?;
    Ok(*ALLOCATOR.get_or_init(|| made as usize) as *mut ResponseAllocator)
}

/// Call `identity` with `input` (by reference) and wait for its final response (the caller deletes it).
///
/// # Safety
/// `server` is the model's server and `input`'s pointers stay valid until this returns.
unsafe fn call_identity(server: *mut Server, input: &Tensor) -> Result<*mut InferenceResponse, *mut TritonError> {
    let allocator = allocator()?;
    let mut request = ptr::null_mut();
    // SAFETY: the server is live; the model name is a C literal.
    check(unsafe { TRITONSERVER_InferenceRequestNew(&mut request, server, c"identity".as_ptr(), -1) })?;
    let call: Arc<Call> = Arc::default();
    let name = c"INPUT".as_ptr();
    // SAFETY: the request is new and ours; the shape holds `dims` entries; each chunk outlives the call (the
    // caller's request is released after this returns, and this waits for the release of this one).
    let prepared = (|| unsafe {
        check(TRITONSERVER_InferenceRequestAddInput(request, name, input.datatype, input.shape, input.dims.into()))?;
        for &(data, length) in &input.chunks {
            check(TRITONSERVER_InferenceRequestAppendInputData(request, name, data.cast(), length, MEMORY_CPU, 0))?;
        }
        check(TRITONSERVER_InferenceRequestAddRequestedOutput(request, c"OUTPUT".as_ptr()))?;
        let userp = Arc::as_ptr(&call).cast_mut().cast::<c_void>();
        check(TRITONSERVER_InferenceRequestSetResponseCallback(
            request,
            allocator,
            ptr::null_mut(),
            call_answered,
            userp,
        ))
    })();
    if let Err(error) = prepared {
        // SAFETY: the request never reached the server: ours to delete.
        unsafe { delete_request(request) };
        return Err(error);
    }
    let released = Arc::into_raw(call.clone()).cast_mut().cast::<c_void>();
    // SAFETY: as above; `released` is taken back by call_released, or below when the server refuses the request.
    let started = unsafe {
        check(TRITONSERVER_InferenceRequestSetReleaseCallback(request, call_released, released))
            .and_then(|()| check(TRITONSERVER_ServerInferAsync(server, request, ptr::null_mut())))
    };
    if let Err(error) = started {
        // SAFETY: the server did not take the request: no callback comes; the Arc and the request are ours.
        drop(unsafe { Arc::from_raw(released.cast_const().cast::<Call>()) });
        unsafe { delete_request(request) }; // (SAFETY: as above)
        return Err(error);
    }
    let mut state = call.0.lock().expect("call state");
    while state.response.is_none() || !state.released {
        state = call.1.wait(state).expect("call state");
    }
    Ok(state.response.unwrap_or_default() as *mut InferenceResponse)
}

/// The floor's pipeline: answer `response` with the output of `identity` called with the request's first input.
///
/// # Safety
/// `request` and `response` are live; `server` is the model's server.
unsafe fn forward(server: *mut Server, request: *mut Request, response: *mut Response) -> Result<(), *mut TritonError> {
    // SAFETY: the request is live until released, after this returns.
    let input = unsafe { first_input(request) }?;
    // SAFETY: the input's buffers stay valid until the request is released.
    let answered = unsafe { call_identity(server, &input) }?;
    if answered.is_null() {
        return Err(internal(c"floor: identity sent no response"));
    }
    // SAFETY: the response is ours until deleted below.
    let result = check(unsafe { TRITONSERVER_InferenceResponseError(answered) }).and_then(|()| {
        let (mut name, mut datatype, mut shape, mut dims, mut base, mut size, mut kind, mut id, mut userp) =
            (ptr::null(), 0u32, ptr::null(), 0u64, ptr::null(), 0usize, MEMORY_CPU, 0i64, ptr::null_mut());
        // SAFETY: output 0 of the live response; out-pointers are locals.
        check(unsafe {
            TRITONSERVER_InferenceResponseOutput(
                answered,
                0,
                &mut name,
                &mut datatype,
                &mut shape,
                &mut dims,
                &mut base,
                &mut size,
                &mut kind,
                &mut id,
                &mut userp,
            )
        })?;
        let output = Tensor { datatype, shape, dims: dims as u32, size, chunks: vec![(base.cast::<u8>(), size)] };
        // SAFETY: the output's pointers live until the callee's response is deleted, below.
        unsafe { answer(response, &output) }
    });
    // SAFETY: the callee's response is deleted once (its output buffer goes back through release()).
    if let Err(error) = check(unsafe { TRITONSERVER_InferenceResponseDelete(answered) }) {
        // SAFETY: an error returned to us is ours.
        unsafe { drop_error(error) };
    }
    result
}

/// This instance's model's server when the model is the pipeline (named `pipeline`), else None.
///
/// # Safety
/// `instance` is live.
unsafe fn pipeline_server(instance: *mut ModelInstance) -> Result<Option<*mut Server>, *mut TritonError> {
    let (mut model, mut name, mut server) = (ptr::null_mut(), ptr::null(), ptr::null_mut());
    // SAFETY: out-pointers are locals; the name lives as long as the model.
    unsafe {
        check(TRITONBACKEND_ModelInstanceModel(instance, &mut model))?;
        check(TRITONBACKEND_ModelName(model, &mut name))?;
        if CStr::from_ptr(name) != c"pipeline" {
            return Ok(None);
        }
        check(TRITONBACKEND_ModelServer(model, &mut server))?;
    }
    Ok(Some(server))
}

/// Triton's execute: each request answered (its input, or the pipeline's call of identity) and released, whatever
/// happened to the others.
///
/// # Safety
/// Called by tritonserver with `count` live requests at `requests`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceExecute(
    instance: *mut ModelInstance,
    requests: *mut *mut Request,
    count: u32,
) -> *mut TritonError {
    // SAFETY: the instance is live during execute.
    let role = unsafe { pipeline_server(instance) };
    for index in 0..count as usize {
        // SAFETY: Triton passes `count` request pointers.
        let request = unsafe { *requests.add(index) };
        let mut response = ptr::null_mut();
        // SAFETY: the request is live; the out-pointer is a local.
        match check(unsafe { TRITONBACKEND_ResponseNew(&mut response, request) }) {
            Ok(()) => {
                // SAFETY: request and its new response are live.
                let done = match role {
                    Ok(Some(server)) => unsafe { forward(server, request, response) },
                    Ok(None) => unsafe { first_input(request) }.and_then(|input| unsafe { answer(response, &input) }),
                    Err(_) => Err(internal(c"floor: the model's name or server cannot be read")),
                };
                let error = done.err().unwrap_or(ptr::null_mut());
                // SAFETY: the response is live; Triton takes the error (or null) with it and frees the response.
                let sent = check(unsafe { TRITONBACKEND_ResponseSend(response, RESPONSE_COMPLETE_FINAL, error) });
                if let Err(error) = sent {
                    // SAFETY: an error returned to us is ours.
                    unsafe { drop_error(error) };
                }
            }
            // A request released without a response fails in Triton.
            // SAFETY: as above.
            Err(error) => unsafe { drop_error(error) },
        }
        // SAFETY: each request is released exactly once, after its response was sent.
        if let Err(error) = check(unsafe { TRITONBACKEND_RequestRelease(request, REQUEST_RELEASE_ALL) }) {
            // SAFETY: as above.
            unsafe { drop_error(error) };
        }
    }
    if let Err(error) = role {
        // SAFETY: as above.
        unsafe { drop_error(error) };
    }
    ptr::null_mut()
}
