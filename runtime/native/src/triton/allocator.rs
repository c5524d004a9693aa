//! The response allocator of calls of other models: the server writes a callee's outputs into 64-byte-aligned host
//! buffers of ours, released when the response is deleted.

use std::alloc::{alloc, dealloc, Layout};
use std::ffi::{c_char, c_void, CString};
use std::ptr;
use std::sync::OnceLock;

use super::api::{api, Api, ResponseAllocator, TritonError, MEMORY_CPU};
use super::calls::{need, taken};
use crate::error::Error;
use crate::wire::ERROR_INTERNAL;

/// Buffers are aligned for any element type (and numpy's preference).
const BUFFER_ALIGN: usize = 64;

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
    let address = match Layout::from_size_align(byte_size, BUFFER_ALIGN) {
        Ok(layout) if byte_size > 0 => {
            // SAFETY: a layout of non-zero size.
            unsafe { alloc(layout) }
        }
        _ => ptr::null_mut(),
    };
    if byte_size > 0 && address.is_null() {
        let message =
            CString::new(format!("tritonrt: cannot allocate {byte_size} bytes for a call's output")).expect("no NUL");
        // SAFETY: ErrorNew copies the message.
        return unsafe { (api().error_new)(ERROR_INTERNAL as u32, message.as_ptr()) };
    }
    // SAFETY: Triton passes valid out-pointers.
    unsafe {
        *buffer = address.cast();
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
    if !buffer.is_null() && byte_size > 0 {
        let layout = Layout::from_size_align(byte_size, BUFFER_ALIGN).expect("allocated with this layout");
        // SAFETY: `buffer` came from `allocate` with this very size and alignment, and is released once.
        unsafe { dealloc(buffer.cast(), layout) };
    }
    ptr::null_mut()
}

/// The one response allocator of the process (created on first use, never deleted: it lives with the server).
pub(super) fn allocator(api: &Api) -> Result<*mut ResponseAllocator, Error> {
    static ALLOCATOR: OnceLock<usize> = OnceLock::new();
    if let Some(&address) = ALLOCATOR.get() {
        return Ok(address as *mut ResponseAllocator);
    }
    let new = need(api.allocator_new, "TRITONSERVER_ResponseAllocatorNew")?;
    let mut created = ptr::null_mut();
    // SAFETY: the callbacks have the allocator's signatures (checked by tests/abi.rs); no start function.
    taken(unsafe { new(&mut created, allocate, release, None) })?;
    let address = *ALLOCATOR.get_or_init(|| created as usize);
    if address != created as usize {
        if let Some(delete) = api.allocator_delete {
            // SAFETY: ours, never used (another thread's allocator won the race).
            let _ = taken(unsafe { delete(created) });
        }
    }
    Ok(address as *mut ResponseAllocator)
}
