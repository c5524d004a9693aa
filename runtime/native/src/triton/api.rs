//! Triton's C API, as far as this backend uses it: the signatures and constants of tritonserver.h and
//! tritonbackend.h (facts of Triton's ABI, declared here, not copied), resolved at load time with dlsym from
//! the tritonserver process. Resolving at run time rather than linking lets the library load for its own
//! tests (no undefined symbols) and name exactly what an old server lacks.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use crate::error::Error;
use crate::sys;

/// Opaque Triton objects.
#[repr(C)]
pub struct TritonError {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct TritonMessage {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct Backend {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct Model {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct ModelInstance {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct Request {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct Input {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct Response {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct ResponseFactory {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct Output {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct InferenceTrace {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct MetricFamily {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct Metric {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct MetricArgs {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct Parameter {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct Server {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct InferenceRequest {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct InferenceResponse {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct ResponseAllocator {
    _opaque: [u8; 0],
}

/// Triton's callback types (`TRITONSERVER_ResponseAllocatorAllocFn_t` ...; tests/abi.rs maps each to its C name).
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

/// The backend API this library is written against: major must match, minor is the least we need
/// (1.16 added request cancellation, Triton 23.10; tritonrt's servers are 24.x and NGC 25.x, API 1.19).
pub const API_MAJOR: u32 = 1;
pub const API_MINOR: u32 = 16;

pub const MEMORY_CPU: u32 = 0;
pub const MEMORY_CPU_PINNED: u32 = 1;
pub const MEMORY_GPU: u32 = 2;
pub const PARAMETER_STRING: u32 = 0;
pub const PARAMETER_INT: u32 = 1;
pub const PARAMETER_BOOL: u32 = 2;
pub const PARAMETER_DOUBLE: u32 = 3;
pub const RESPONSE_COMPLETE_FINAL: u32 = 1;
pub const REQUEST_RELEASE_ALL: u32 = 1;
pub const ARTIFACT_FILESYSTEM: u32 = 0;
pub const LOG_INFO: u32 = 0;
pub const LOG_WARN: u32 = 1;
pub const LOG_ERROR: u32 = 2;
pub const LOG_VERBOSE: u32 = 3;
/// TRITONSERVER_MetricKind (the wire's METRIC_* kinds take these values).
pub const METRIC_KIND_COUNTER: u32 = 0;
pub const METRIC_KIND_GAUGE: u32 = 1;
pub const METRIC_KIND_HISTOGRAM: u32 = 2;
/// cudaMemcpyKind values.
pub const CUDA_HOST_TO_DEVICE: c_int = 1;
pub const CUDA_DEVICE_TO_HOST: c_int = 2;

macro_rules! api_table {
    (
        $( $field:ident : $symbol:literal => fn($($arg:ty),*) $(-> $ret:ty)? ;)*
        [optional] {
            $( $ofield:ident : $osymbol:literal => fn($($oarg:ty),*) $(-> $oret:ty)? ;)*
        }
    ) => {
        /// Triton's functions, resolved from the server process.
        pub struct Api {
            $( pub $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
            /// Functions the backend works without (an older server lacks them): None when not exported.
            $( pub $ofield: Option<unsafe extern "C" fn($($oarg),*) $(-> $oret)?>, )*
            /// cudaMemcpy, when a CUDA runtime is loaded in the server (only needed for GPU buffers).
            pub cuda_memcpy: Option<unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> c_int>,
        }

        impl Api {
            /// Resolve every function; the error names the first one the server does not export.
            fn resolve() -> Result<Api, &'static str> {
                Ok(Api {
                    $( $field: {
                        let address = sys::global_symbol(
                            CStr::from_bytes_with_nul(concat!($symbol, "\0").as_bytes()).expect("NUL-terminated"),
                        );
                        if address.is_null() {
                            return Err($symbol);
                        }
                        // SAFETY: the symbol is Triton's C function of this name, whose signature (a fact of
                        // Triton's ABI) is the one declared in this table.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(address) }
                    }, )*
                    $( $ofield: {
                        let address = sys::global_symbol(
                            CStr::from_bytes_with_nul(concat!($osymbol, "\0").as_bytes()).expect("NUL-terminated"),
                        );
                        // SAFETY: as above; a null address (the server does not export it) stays None.
                        (!address.is_null()).then(|| unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($oarg),*) $(-> $oret)?>(address)
                        })
                    }, )*
                    cuda_memcpy: {
                        let address = sys::global_symbol(c"cudaMemcpy");
                        // SAFETY: cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind).
                        (!address.is_null()).then(|| unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> c_int>(address)
                        })
                    },
                })
            }
        }
    };
}

api_table! {
    error_new: "TRITONSERVER_ErrorNew" => fn(u32, *const c_char) -> *mut TritonError;
    error_delete: "TRITONSERVER_ErrorDelete" => fn(*mut TritonError);
    error_message: "TRITONSERVER_ErrorMessage" => fn(*mut TritonError) -> *const c_char;
    message_to_json: "TRITONSERVER_MessageSerializeToJson" => fn(*mut TritonMessage, *mut *const c_char, *mut usize) -> *mut TritonError;
    message_delete: "TRITONSERVER_MessageDelete" => fn(*mut TritonMessage) -> *mut TritonError;
    log_is_enabled: "TRITONSERVER_LogIsEnabled" => fn(u32) -> bool;
    log_message: "TRITONSERVER_LogMessage" => fn(u32, *const c_char, c_int, *const c_char) -> *mut TritonError;
    api_version: "TRITONBACKEND_ApiVersion" => fn(*mut u32, *mut u32) -> *mut TritonError;
    model_config: "TRITONBACKEND_ModelConfig" => fn(*mut Model, u32, *mut *mut TritonMessage) -> *mut TritonError;
    model_repository: "TRITONBACKEND_ModelRepository" => fn(*mut Model, *mut u32, *mut *const c_char) -> *mut TritonError;
    model_state: "TRITONBACKEND_ModelState" => fn(*mut Model, *mut *mut c_void) -> *mut TritonError;
    model_set_state: "TRITONBACKEND_ModelSetState" => fn(*mut Model, *mut c_void) -> *mut TritonError;
    model_auto_complete_config: "TRITONBACKEND_ModelAutoCompleteConfig" => fn(*mut Model, *mut bool) -> *mut TritonError;
    model_set_config: "TRITONBACKEND_ModelSetConfig" => fn(*mut Model, u32, *mut TritonMessage) -> *mut TritonError;
    message_from_json: "TRITONSERVER_MessageNewFromSerializedJson" => fn(*mut *mut TritonMessage, *const c_char, usize) -> *mut TritonError;
    instance_name: "TRITONBACKEND_ModelInstanceName" => fn(*mut ModelInstance, *mut *const c_char) -> *mut TritonError;
    instance_model: "TRITONBACKEND_ModelInstanceModel" => fn(*mut ModelInstance, *mut *mut Model) -> *mut TritonError;
    instance_state: "TRITONBACKEND_ModelInstanceState" => fn(*mut ModelInstance, *mut *mut c_void) -> *mut TritonError;
    instance_set_state: "TRITONBACKEND_ModelInstanceSetState" => fn(*mut ModelInstance, *mut c_void) -> *mut TritonError;
    report_statistics: "TRITONBACKEND_ModelInstanceReportStatistics" => fn(*mut ModelInstance, *mut Request, bool, u64, u64, u64, u64) -> *mut TritonError;
    report_batch_statistics: "TRITONBACKEND_ModelInstanceReportBatchStatistics" => fn(*mut ModelInstance, u64, u64, u64, u64, u64) -> *mut TritonError;
    request_id: "TRITONBACKEND_RequestId" => fn(*mut Request, *mut *const c_char) -> *mut TritonError;
    request_correlation_id: "TRITONBACKEND_RequestCorrelationId" => fn(*mut Request, *mut u64) -> *mut TritonError;
    request_correlation_id_string: "TRITONBACKEND_RequestCorrelationIdString" => fn(*mut Request, *mut *const c_char) -> *mut TritonError;
    request_flags: "TRITONBACKEND_RequestFlags" => fn(*mut Request, *mut u32) -> *mut TritonError;
    request_parameter_count: "TRITONBACKEND_RequestParameterCount" => fn(*mut Request, *mut u32) -> *mut TritonError;
    request_parameter: "TRITONBACKEND_RequestParameter" => fn(*mut Request, u32, *mut *const c_char, *mut u32, *mut *const c_void) -> *mut TritonError;
    request_input_count: "TRITONBACKEND_RequestInputCount" => fn(*mut Request, *mut u32) -> *mut TritonError;
    request_input_by_index: "TRITONBACKEND_RequestInputByIndex" => fn(*mut Request, u32, *mut *mut Input) -> *mut TritonError;
    request_output_count: "TRITONBACKEND_RequestOutputCount" => fn(*mut Request, *mut u32) -> *mut TritonError;
    request_output_name: "TRITONBACKEND_RequestOutputName" => fn(*mut Request, u32, *mut *const c_char) -> *mut TritonError;
    request_is_cancelled: "TRITONBACKEND_RequestIsCancelled" => fn(*mut Request, *mut bool) -> *mut TritonError;
    request_release: "TRITONBACKEND_RequestRelease" => fn(*mut Request, u32) -> *mut TritonError;
    input_properties: "TRITONBACKEND_InputProperties" => fn(*mut Input, *mut *const c_char, *mut u32, *mut *const i64, *mut u32, *mut u64, *mut u32) -> *mut TritonError;
    input_buffer: "TRITONBACKEND_InputBuffer" => fn(*mut Input, u32, *mut *const c_void, *mut u64, *mut u32, *mut i64) -> *mut TritonError;
    response_new: "TRITONBACKEND_ResponseNew" => fn(*mut *mut Response, *mut Request) -> *mut TritonError;
    response_new_from_factory: "TRITONBACKEND_ResponseNewFromFactory" => fn(*mut *mut Response, *mut ResponseFactory) -> *mut TritonError;
    response_delete: "TRITONBACKEND_ResponseDelete" => fn(*mut Response) -> *mut TritonError;
    response_output: "TRITONBACKEND_ResponseOutput" => fn(*mut Response, *mut *mut Output, *const c_char, u32, *const i64, u32) -> *mut TritonError;
    response_send: "TRITONBACKEND_ResponseSend" => fn(*mut Response, u32, *mut TritonError) -> *mut TritonError;
    output_buffer: "TRITONBACKEND_OutputBuffer" => fn(*mut Output, *mut *mut c_void, u64, *mut u32, *mut i64) -> *mut TritonError;
    factory_new: "TRITONBACKEND_ResponseFactoryNew" => fn(*mut *mut ResponseFactory, *mut Request) -> *mut TritonError;
    factory_delete: "TRITONBACKEND_ResponseFactoryDelete" => fn(*mut ResponseFactory) -> *mut TritonError;
    factory_send_flags: "TRITONBACKEND_ResponseFactorySendFlags" => fn(*mut ResponseFactory, u32) -> *mut TritonError;
    factory_is_cancelled: "TRITONBACKEND_ResponseFactoryIsCancelled" => fn(*mut ResponseFactory, *mut bool) -> *mut TritonError;
    [optional] {
        // Tracing (backend API 1.13+, Triton 23.04+; the context since Triton 23.11): without them requests
        // reach the worker without a trace context.
        request_trace: "TRITONBACKEND_RequestTrace" => fn(*mut Request, *mut *mut InferenceTrace) -> *mut TritonError;
        trace_context: "TRITONSERVER_InferenceTraceContext" => fn(*mut InferenceTrace, *mut *const c_char) -> *mut TritonError;
        // Custom metrics (Triton 22.07+; histograms, MetricArgs and Observe since Triton 24.05): without them the
        // worker's METRICS updates are dropped, with one warning per family.
        metric_family_new: "TRITONSERVER_MetricFamilyNew" => fn(*mut *mut MetricFamily, u32, *const c_char, *const c_char) -> *mut TritonError;
        metric_family_delete: "TRITONSERVER_MetricFamilyDelete" => fn(*mut MetricFamily) -> *mut TritonError;
        metric_new: "TRITONSERVER_MetricNew" => fn(*mut *mut Metric, *mut MetricFamily, *mut *const Parameter, u64) -> *mut TritonError;
        metric_new_with_args: "TRITONSERVER_MetricNewWithArgs" => fn(*mut *mut Metric, *mut MetricFamily, *mut *const Parameter, u64, *const MetricArgs) -> *mut TritonError;
        metric_delete: "TRITONSERVER_MetricDelete" => fn(*mut Metric) -> *mut TritonError;
        metric_increment: "TRITONSERVER_MetricIncrement" => fn(*mut Metric, f64) -> *mut TritonError;
        metric_set: "TRITONSERVER_MetricSet" => fn(*mut Metric, f64) -> *mut TritonError;
        metric_observe: "TRITONSERVER_MetricObserve" => fn(*mut Metric, f64) -> *mut TritonError;
        metric_args_new: "TRITONSERVER_MetricArgsNew" => fn(*mut *mut MetricArgs) -> *mut TritonError;
        metric_args_set_histogram: "TRITONSERVER_MetricArgsSetHistogram" => fn(*mut MetricArgs, *const f64, u64) -> *mut TritonError;
        metric_args_delete: "TRITONSERVER_MetricArgsDelete" => fn(*mut MetricArgs) -> *mut TritonError;
        parameter_new: "TRITONSERVER_ParameterNew" => fn(*const c_char, u32, *const c_void) -> *mut Parameter;
        parameter_delete: "TRITONSERVER_ParameterDelete" => fn(*mut Parameter);
        // Calls of other models from a callable (BLS) and the model loading API: without them such calls fail
        // with a message naming the missing function.
        error_code: "TRITONSERVER_ErrorCode" => fn(*mut TritonError) -> u32;
        model_server: "TRITONBACKEND_ModelServer" => fn(*mut Model, *mut *mut Server) -> *mut TritonError;
        allocator_new: "TRITONSERVER_ResponseAllocatorNew" => fn(*mut *mut ResponseAllocator, AllocFn, ReleaseFn, StartFn) -> *mut TritonError;
        allocator_delete: "TRITONSERVER_ResponseAllocatorDelete" => fn(*mut ResponseAllocator) -> *mut TritonError;
        infer_request_new: "TRITONSERVER_InferenceRequestNew" => fn(*mut *mut InferenceRequest, *mut Server, *const c_char, i64) -> *mut TritonError;
        infer_request_delete: "TRITONSERVER_InferenceRequestDelete" => fn(*mut InferenceRequest) -> *mut TritonError;
        infer_request_set_id: "TRITONSERVER_InferenceRequestSetId" => fn(*mut InferenceRequest, *const c_char) -> *mut TritonError;
        infer_request_set_flags: "TRITONSERVER_InferenceRequestSetFlags" => fn(*mut InferenceRequest, u32) -> *mut TritonError;
        infer_request_set_correlation_id: "TRITONSERVER_InferenceRequestSetCorrelationId" => fn(*mut InferenceRequest, u64) -> *mut TritonError;
        infer_request_set_correlation_id_string: "TRITONSERVER_InferenceRequestSetCorrelationIdString" => fn(*mut InferenceRequest, *const c_char) -> *mut TritonError;
        infer_request_set_timeout: "TRITONSERVER_InferenceRequestSetTimeoutMicroseconds" => fn(*mut InferenceRequest, u64) -> *mut TritonError;
        infer_request_add_input: "TRITONSERVER_InferenceRequestAddInput" => fn(*mut InferenceRequest, *const c_char, u32, *const i64, u64) -> *mut TritonError;
        infer_request_append_input_data: "TRITONSERVER_InferenceRequestAppendInputData" => fn(*mut InferenceRequest, *const c_char, *const c_void, usize, u32, i64) -> *mut TritonError;
        infer_request_add_requested_output: "TRITONSERVER_InferenceRequestAddRequestedOutput" => fn(*mut InferenceRequest, *const c_char) -> *mut TritonError;
        infer_request_set_release_callback: "TRITONSERVER_InferenceRequestSetReleaseCallback" => fn(*mut InferenceRequest, RequestReleaseFn, *mut c_void) -> *mut TritonError;
        infer_request_set_response_callback: "TRITONSERVER_InferenceRequestSetResponseCallback" => fn(*mut InferenceRequest, *mut ResponseAllocator, *mut c_void, ResponseCompleteFn, *mut c_void) -> *mut TritonError;
        infer_request_cancel: "TRITONSERVER_InferenceRequestCancel" => fn(*mut InferenceRequest) -> *mut TritonError;
        infer_request_set_string_parameter: "TRITONSERVER_InferenceRequestSetStringParameter" => fn(*mut InferenceRequest, *const c_char, *const c_char) -> *mut TritonError;
        infer_request_set_int_parameter: "TRITONSERVER_InferenceRequestSetIntParameter" => fn(*mut InferenceRequest, *const c_char, i64) -> *mut TritonError;
        infer_request_set_bool_parameter: "TRITONSERVER_InferenceRequestSetBoolParameter" => fn(*mut InferenceRequest, *const c_char, bool) -> *mut TritonError;
        infer_request_set_double_parameter: "TRITONSERVER_InferenceRequestSetDoubleParameter" => fn(*mut InferenceRequest, *const c_char, f64) -> *mut TritonError;
        infer_response_delete: "TRITONSERVER_InferenceResponseDelete" => fn(*mut InferenceResponse) -> *mut TritonError;
        infer_response_error: "TRITONSERVER_InferenceResponseError" => fn(*mut InferenceResponse) -> *mut TritonError;
        infer_response_output_count: "TRITONSERVER_InferenceResponseOutputCount" => fn(*mut InferenceResponse, *mut u32) -> *mut TritonError;
        infer_response_output: "TRITONSERVER_InferenceResponseOutput" => fn(*mut InferenceResponse, u32, *mut *const c_char, *mut u32, *mut *const i64, *mut u64, *mut *const c_void, *mut usize, *mut u32, *mut i64, *mut *mut c_void) -> *mut TritonError;
        server_infer_async: "TRITONSERVER_ServerInferAsync" => fn(*mut Server, *mut InferenceRequest, *mut InferenceTrace) -> *mut TritonError;
        server_model_is_ready: "TRITONSERVER_ServerModelIsReady" => fn(*mut Server, *const c_char, i64, *mut bool) -> *mut TritonError;
        server_load_model_with_parameters: "TRITONSERVER_ServerLoadModelWithParameters" => fn(*mut Server, *const c_char, *mut *const Parameter, u64) -> *mut TritonError;
        server_unload_model: "TRITONSERVER_ServerUnloadModel" => fn(*mut Server, *const c_char) -> *mut TritonError;
        server_unload_model_and_dependents: "TRITONSERVER_ServerUnloadModelAndDependents" => fn(*mut Server, *const c_char) -> *mut TritonError;
        parameter_bytes_new: "TRITONSERVER_ParameterBytesNew" => fn(*const c_char, *const c_void, u64) -> *mut Parameter;
        // A call of a traced request is traced as a child of the request's trace (Triton 23.11+).
        trace_spawn_child: "TRITONSERVER_InferenceTraceSpawnChildTrace" => fn(*mut InferenceTrace, *mut *mut InferenceTrace) -> *mut TritonError;
        trace_delete: "TRITONSERVER_InferenceTraceDelete" => fn(*mut InferenceTrace) -> *mut TritonError;
    }
}

static API: OnceLock<Api> = OnceLock::new();

/// Resolve the API once (at TRITONBACKEND_Initialize). The error (UNSUPPORTED) names the missing function.
pub fn load() -> Result<&'static Api, Error> {
    if let Some(api) = API.get() {
        return Ok(api);
    }
    let api = Api::resolve().map_err(|symbol| {
        Error::unsupported(format!(
            "tritonrt backend: this tritonserver does not export {symbol}; the backend needs Triton's backend API \
             {API_MAJOR}.{API_MINOR} or newer (Triton 23.10+)"
        ))
    })?;
    Ok(API.get_or_init(|| api))
}

/// The resolved API. Only called after `load` succeeded: Triton calls no other entry point of a backend
/// whose TRITONBACKEND_Initialize failed.
pub fn api() -> &'static Api {
    API.get().expect("TRITONBACKEND_Initialize resolved the API first")
}
