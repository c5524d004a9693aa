//! The FFI layer: Triton's C API (`api`), the exported backend entry points (`entry`), Triton's requests as
//! a `Batch` (`requests`) and Triton's custom metrics (`metrics`). All `unsafe` code that touches Triton's objects lives here.

mod allocator;
pub mod api;
mod calls;
mod entry;
mod metrics;
mod requests;

use std::ffi::{c_char, CStr, CString};

use crate::error::Error;
use api::{api, TritonError};

/// Turn a Triton error into its message (deleting the error object).
pub(crate) fn check(error: *mut TritonError) -> Result<(), String> {
    if error.is_null() {
        return Ok(());
    }
    let api = api();
    // SAFETY: `error` is a live error object returned by Triton; its message is valid until it is deleted,
    // and we copy it before deleting it.
    let message = unsafe { text((api.error_message)(error)) }.unwrap_or("(no message)").to_string();
    // SAFETY: we own the error object (returned to us) and delete it once.
    unsafe { (api.error_delete)(error) };
    Err(message)
}

/// The one conversion of the backend's `Error` into a Triton error object (ownership passes to the caller,
/// usually Triton).
pub(crate) fn new_error(error: &Error) -> *mut TritonError {
    let message = CString::new(error.message.replace('\0', " ")).expect("NULs removed");
    // SAFETY: ErrorNew copies the message; the code is one of Triton's error codes (wire ERROR_* values).
    unsafe { (api().error_new)(u32::from(error.code), message.as_ptr()) }
}

/// Log through Triton's logger.
pub(crate) fn log(level: u32, message: &str) {
    let api = api();
    // SAFETY: plain query.
    if !unsafe { (api.log_is_enabled)(level) } {
        return;
    }
    let message = CString::new(message.replace('\0', " ")).expect("NULs removed");
    // SAFETY: both strings are NUL-terminated and live for the call; the returned error (if any) is ours.
    let error = unsafe { (api.log_message)(level, c"tritonrt".as_ptr(), 0, message.as_ptr()) };
    let _ = check(error);
}

/// The UTF-8 text of a C string owned by Triton.
///
/// # Safety
/// `pointer` is null or a NUL-terminated string that stays valid and unchanged for the lifetime `'a`
/// chosen by the caller (Triton's strings live as long as the object they belong to).
pub(crate) unsafe fn text<'a>(pointer: *const c_char) -> Option<&'a str> {
    if pointer.is_null() {
        return None;
    }
    // SAFETY: per the function's contract.
    unsafe { CStr::from_ptr(pointer) }.to_str().ok()
}
