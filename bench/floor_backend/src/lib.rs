//! The benchmarks' floor (`bench/run.py`, `bench/pipeline.py`): a Triton backend whose models answer each request
//! with a copy of its first input as `OUTPUT`, in Triton's own instance thread. No worker, no Python, no socket: what
//! a request costs here is what Triton itself costs (HTTP or gRPC frontend, dynamic batcher, instance thread,
//! response), the least that any backend, tritonrt's or Triton's Python backend, can cost on the same server.
//!
//! Only `TRITONBACKEND_ModelInstanceExecute` is defined: Triton's other entry points are optional. The functions
//! below are declared from tritonbackend.h and tritonserver.h (facts of Triton's ABI; linking tritonrt's crate for its
//! declarations would export its entry points beside these) and resolved by the dynamic loader from the tritonserver
//! process that loads this library; runtime/native/tests/abi_source/floor.rs checks them against the headers.

#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::{c_char, c_void};
use std::ptr;

/// Triton's opaque handles, one type each.
macro_rules! opaque {
    ($($name:ident),*) => {
        $(
            #[repr(C)]
            pub struct $name {
                _opaque: [u8; 0],
            }
        )*
    };
}
opaque!(TritonError, ModelInstance, Request, Input, Response, Output);

const MEMORY_CPU: u32 = 0;
const RESPONSE_COMPLETE_FINAL: u32 = 1;
const REQUEST_RELEASE_ALL: u32 = 1;
const ERROR_INTERNAL: u32 = 1;

extern "C" {
    fn TRITONSERVER_ErrorNew(code: u32, message: *const c_char) -> *mut TritonError;
    fn TRITONSERVER_ErrorDelete(error: *mut TritonError);
    fn TRITONBACKEND_RequestInputByIndex(request: *mut Request, index: u32, input: *mut *mut Input)
        -> *mut TritonError;
    fn TRITONBACKEND_InputProperties(
        input: *mut Input,
        name: *mut *const c_char,
        datatype: *mut u32,
        shape: *mut *const i64,
        dims_count: *mut u32,
        byte_size: *mut u64,
        buffer_count: *mut u32,
    ) -> *mut TritonError;
    fn TRITONBACKEND_InputBuffer(
        input: *mut Input,
        index: u32,
        buffer: *mut *const c_void,
        byte_size: *mut u64,
        memory_type: *mut u32,
        memory_type_id: *mut i64,
    ) -> *mut TritonError;
    fn TRITONBACKEND_ResponseNew(response: *mut *mut Response, request: *mut Request) -> *mut TritonError;
    fn TRITONBACKEND_ResponseOutput(
        response: *mut Response,
        output: *mut *mut Output,
        name: *const c_char,
        datatype: u32,
        shape: *const i64,
        dims_count: u32,
    ) -> *mut TritonError;
    fn TRITONBACKEND_OutputBuffer(
        output: *mut Output,
        buffer: *mut *mut c_void,
        byte_size: u64,
        memory_type: *mut u32,
        memory_type_id: *mut i64,
    ) -> *mut TritonError;
    fn TRITONBACKEND_ResponseSend(response: *mut Response, flags: u32, error: *mut TritonError) -> *mut TritonError;
    fn TRITONBACKEND_RequestRelease(request: *mut Request, flags: u32) -> *mut TritonError;
}

/// A Triton error from a call: `Err` holds it (owned: sent with the response, or deleted).
fn check(error: *mut TritonError) -> Result<(), *mut TritonError> {
    if error.is_null() {
        Ok(())
    } else {
        Err(error)
    }
}

/// Answer one request: its first input copied into a response output named `OUTPUT` of the same type and shape.
///
/// # Safety
/// `request` is a live request handed to this execute call and `response` its new response.
unsafe fn copy_input(request: *mut Request, response: *mut Response) -> Result<(), *mut TritonError> {
    let mut input = ptr::null_mut();
    // SAFETY: the request is live; the out-pointer is a local.
    check(unsafe { TRITONBACKEND_RequestInputByIndex(request, 0, &mut input) })?;
    let (mut name, mut datatype, mut shape, mut dims, mut size, mut buffers) =
        (ptr::null(), 0u32, ptr::null(), 0u32, 0u64, 0u32);
    // SAFETY: the input belongs to the live request; every out-pointer is a local.
    check(unsafe {
        TRITONBACKEND_InputProperties(input, &mut name, &mut datatype, &mut shape, &mut dims, &mut size, &mut buffers)
    })?;
    let mut output = ptr::null_mut();
    // SAFETY: the shape pointer and its `dims` entries live as long as the request; the name is a C literal.
    check(unsafe { TRITONBACKEND_ResponseOutput(response, &mut output, c"OUTPUT".as_ptr(), datatype, shape, dims) })?;
    let (mut out, mut out_type, mut out_id) = (ptr::null_mut(), MEMORY_CPU, 0i64);
    // SAFETY: the output belongs to the live response; out-pointers are locals.
    check(unsafe { TRITONBACKEND_OutputBuffer(output, &mut out, size, &mut out_type, &mut out_id) })?;
    if out_type != MEMORY_CPU {
        // SAFETY: the message is a C literal.
        return Err(unsafe {
            TRITONSERVER_ErrorNew(ERROR_INTERNAL, c"floor: the output is not in CPU memory".as_ptr())
        });
    }
    let mut offset = 0usize;
    for index in 0..buffers {
        let (mut data, mut length, mut kind, mut id) = (ptr::null(), 0u64, MEMORY_CPU, 0i64);
        // SAFETY: index < buffer_count; out-pointers are locals (kind asks for CPU memory, Triton may answer other).
        check(unsafe { TRITONBACKEND_InputBuffer(input, index, &mut data, &mut length, &mut kind, &mut id) })?;
        let length = length as usize;
        if kind != MEMORY_CPU || offset + length > size as usize {
            // SAFETY: the message is a C literal.
            return Err(unsafe {
                TRITONSERVER_ErrorNew(ERROR_INTERNAL, c"floor: an input buffer is not CPU memory or overflows".as_ptr())
            });
        }
        // SAFETY: `data` holds `length` bytes of the live input; `out` holds `size` bytes and offset + length fits.
        unsafe { ptr::copy_nonoverlapping(data.cast::<u8>(), out.cast::<u8>().add(offset), length) };
        offset += length;
    }
    Ok(())
}

/// Triton's execute: each request answered with its input and released, whatever happened to the others.
///
/// # Safety
/// Called by tritonserver with `count` live requests at `requests`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceExecute(
    _instance: *mut ModelInstance,
    requests: *mut *mut Request,
    count: u32,
) -> *mut TritonError {
    for index in 0..count as usize {
        // SAFETY: Triton passes `count` request pointers.
        let request = unsafe { *requests.add(index) };
        let mut response = ptr::null_mut();
        // SAFETY: the request is live; the out-pointer is a local.
        match check(unsafe { TRITONBACKEND_ResponseNew(&mut response, request) }) {
            Ok(()) => {
                // SAFETY: request and its new response are live.
                let error = unsafe { copy_input(request, response) }.err().unwrap_or(ptr::null_mut());
                // SAFETY: the response is live; Triton takes the error (or null) with it and frees the response.
                let sent = check(unsafe { TRITONBACKEND_ResponseSend(response, RESPONSE_COMPLETE_FINAL, error) });
                if let Err(error) = sent {
                    // SAFETY: an error returned to us is ours to delete.
                    unsafe { TRITONSERVER_ErrorDelete(error) };
                }
            }
            // SAFETY: as above (a request released without a response fails in Triton).
            Err(error) => unsafe { TRITONSERVER_ErrorDelete(error) },
        }
        // SAFETY: each request is released exactly once, after its response was sent.
        if let Err(error) = check(unsafe { TRITONBACKEND_RequestRelease(request, REQUEST_RELEASE_ALL) }) {
            // SAFETY: as above.
            unsafe { TRITONSERVER_ErrorDelete(error) };
        }
    }
    ptr::null_mut()
}
