//! tritonrt's Triton backend: `libtriton_tritonrt.so`, loaded by tritonserver for models of backend
//! `"tritonrt"`. It sends each batch of requests to the process that serves the model's inference callables
//! (the worker) over a Unix socket, with large tensors in shared memory, and answers the requests from the
//! worker's replies. See `README.md` for the design and `runtime/docs/wire-protocol.md` for the protocol.
//!
//! Layers, lowest first: `sys` (operating system calls), `wire` and `dtype` (the protocol, pure), `region`
//! and `channel` (one connection), `config` and `json` (what a model tells us), `error` (a code and a message), `batch` and `execute` (one
//! instance's work, generic over its requests), `triton` (the FFI layer: Triton's API and our entry points).
//! `unsafe` code lives only in `sys` and `triton`.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod batch;
pub mod channel;
pub mod config;
pub mod dtype;
pub mod error;
pub mod execute;
pub mod json;
pub mod region;
pub mod served;
pub mod sys;
pub mod triton;
pub mod wire;
