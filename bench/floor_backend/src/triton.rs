//! Triton's C API as far as the floor uses it: its opaque handles, callback types, constants and functions, declared
//! from tritonbackend.h and tritonserver.h (facts of Triton's ABI) and resolved by the dynamic loader from the
//! tritonserver process that loads the library. runtime/native/tests/abi_source/floor.rs checks them against the
//! headers.

use std::ffi::{c_char, c_void};

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
opaque!(
    TritonError,
    Model,
    ModelInstance,
    Server,
    Request,
    Input,
    Response,
    Output,
    InferenceRequest,
    InferenceResponse,
    InferenceTrace,
    ResponseAllocator
);

/// Triton's callback types (`TRITONSERVER_ResponseAllocatorAllocFn_t` ...).
pub type AllocFn = unsafe extern "C" fn(
    *mut ResponseAllocator,
    *const c_char,
    usize,
    u32,
    i64,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
    *mut u32,
    *mut i64,
) -> *mut TritonError;
pub type ReleaseFn =
    unsafe extern "C" fn(*mut ResponseAllocator, *mut c_void, *mut c_void, usize, u32, i64) -> *mut TritonError;
pub type StartFn = Option<unsafe extern "C" fn(*mut ResponseAllocator, *mut c_void) -> *mut TritonError>;
pub type RequestReleaseFn = unsafe extern "C" fn(*mut InferenceRequest, u32, *mut c_void);
pub type ResponseCompleteFn = unsafe extern "C" fn(*mut InferenceResponse, u32, *mut c_void);

pub const MEMORY_CPU: u32 = 0;
pub const RESPONSE_COMPLETE_FINAL: u32 = 1;
pub const REQUEST_RELEASE_ALL: u32 = 1;
pub const ERROR_INTERNAL: u32 = 1;

extern "C" {
    pub fn TRITONSERVER_ErrorNew(code: u32, message: *const c_char) -> *mut TritonError;
    pub fn TRITONSERVER_ErrorDelete(error: *mut TritonError);
    pub fn TRITONBACKEND_ModelInstanceModel(instance: *mut ModelInstance, model: *mut *mut Model) -> *mut TritonError;
    pub fn TRITONBACKEND_ModelName(model: *mut Model, name: *mut *const c_char) -> *mut TritonError;
    pub fn TRITONBACKEND_ModelServer(model: *mut Model, server: *mut *mut Server) -> *mut TritonError;
    pub fn TRITONBACKEND_RequestInputByIndex(
        request: *mut Request,
        index: u32,
        input: *mut *mut Input,
    ) -> *mut TritonError;
    pub fn TRITONBACKEND_InputProperties(
        input: *mut Input,
        name: *mut *const c_char,
        datatype: *mut u32,
        shape: *mut *const i64,
        dims_count: *mut u32,
        byte_size: *mut u64,
        buffer_count: *mut u32,
    ) -> *mut TritonError;
    pub fn TRITONBACKEND_InputBuffer(
        input: *mut Input,
        index: u32,
        buffer: *mut *const c_void,
        byte_size: *mut u64,
        memory_type: *mut u32,
        memory_type_id: *mut i64,
    ) -> *mut TritonError;
    pub fn TRITONBACKEND_ResponseNew(response: *mut *mut Response, request: *mut Request) -> *mut TritonError;
    pub fn TRITONBACKEND_ResponseOutput(
        response: *mut Response,
        output: *mut *mut Output,
        name: *const c_char,
        datatype: u32,
        shape: *const i64,
        dims_count: u32,
    ) -> *mut TritonError;
    pub fn TRITONBACKEND_OutputBuffer(
        output: *mut Output,
        buffer: *mut *mut c_void,
        byte_size: u64,
        memory_type: *mut u32,
        memory_type_id: *mut i64,
    ) -> *mut TritonError;
    pub fn TRITONBACKEND_ResponseSend(response: *mut Response, flags: u32, error: *mut TritonError)
        -> *mut TritonError;
    pub fn TRITONBACKEND_RequestRelease(request: *mut Request, flags: u32) -> *mut TritonError;
    pub fn TRITONSERVER_ResponseAllocatorNew(
        allocator: *mut *mut ResponseAllocator,
        alloc: AllocFn,
        release: ReleaseFn,
        start: StartFn,
    ) -> *mut TritonError;
    pub fn TRITONSERVER_InferenceRequestNew(
        request: *mut *mut InferenceRequest,
        server: *mut Server,
        model_name: *const c_char,
        model_version: i64,
    ) -> *mut TritonError;
    pub fn TRITONSERVER_InferenceRequestDelete(request: *mut InferenceRequest) -> *mut TritonError;
    pub fn TRITONSERVER_InferenceRequestAddInput(
        request: *mut InferenceRequest,
        name: *const c_char,
        datatype: u32,
        shape: *const i64,
        dims_count: u64,
    ) -> *mut TritonError;
    pub fn TRITONSERVER_InferenceRequestAppendInputData(
        request: *mut InferenceRequest,
        name: *const c_char,
        base: *const c_void,
        byte_size: usize,
        memory_type: u32,
        memory_type_id: i64,
    ) -> *mut TritonError;
    pub fn TRITONSERVER_InferenceRequestAddRequestedOutput(
        request: *mut InferenceRequest,
        name: *const c_char,
    ) -> *mut TritonError;
    pub fn TRITONSERVER_InferenceRequestSetReleaseCallback(
        request: *mut InferenceRequest,
        release: RequestReleaseFn,
        userp: *mut c_void,
    ) -> *mut TritonError;
    pub fn TRITONSERVER_InferenceRequestSetResponseCallback(
        request: *mut InferenceRequest,
        allocator: *mut ResponseAllocator,
        allocator_userp: *mut c_void,
        response: ResponseCompleteFn,
        response_userp: *mut c_void,
    ) -> *mut TritonError;
    pub fn TRITONSERVER_ServerInferAsync(
        server: *mut Server,
        request: *mut InferenceRequest,
        trace: *mut InferenceTrace,
    ) -> *mut TritonError;
    pub fn TRITONSERVER_InferenceResponseDelete(response: *mut InferenceResponse) -> *mut TritonError;
    pub fn TRITONSERVER_InferenceResponseError(response: *mut InferenceResponse) -> *mut TritonError;
    pub fn TRITONSERVER_InferenceResponseOutput(
        response: *mut InferenceResponse,
        index: u32,
        name: *mut *const c_char,
        datatype: *mut u32,
        shape: *mut *const i64,
        dims_count: *mut u64,
        base: *mut *const c_void,
        byte_size: *mut usize,
        memory_type: *mut u32,
        memory_type_id: *mut i64,
        userp: *mut *mut c_void,
    ) -> *mut TritonError;
}
