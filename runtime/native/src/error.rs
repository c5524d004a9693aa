//! The backend's error: a Triton error code and a message for the client, as git2-rs's `Error` is a code
//! and a message. Everything that fails a request or an entry point carries one; the FFI layer turns it
//! into a `TRITONSERVER_Error` in one place (`triton::new_error`).

use std::fmt;

use crate::wire::{ERROR_INTERNAL, ERROR_INVALID_ARG, ERROR_UNAVAILABLE, ERROR_UNSUPPORTED};

/// Why a request or a call failed: a Triton error code (`TRITONSERVER_Error_Code`, the wire's `ERROR_*`)
/// and a message that says what went wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: u8,
    pub message: String,
}

impl Error {
    pub fn new(code: u8, message: impl Into<String>) -> Error {
        Error { code, message: message.into() }
    }

    /// A bug or an inconsistency of the backend or the worker (`TRITONSERVER_ERROR_INTERNAL`).
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(ERROR_INTERNAL, message)
    }

    /// The worker cannot be reached now (`TRITONSERVER_ERROR_UNAVAILABLE`).
    pub fn unavailable(message: impl Into<String>) -> Error {
        Error::new(ERROR_UNAVAILABLE, message)
    }

    /// The request is wrong (`TRITONSERVER_ERROR_INVALID_ARG`).
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(ERROR_INVALID_ARG, message)
    }

    /// The server or the model asks for what the backend does not do (`TRITONSERVER_ERROR_UNSUPPORTED`).
    pub fn unsupported(message: impl Into<String>) -> Error {
        Error::new(ERROR_UNSUPPORTED, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
