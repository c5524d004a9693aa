//! What the executor needs from a batch of requests: Triton's (`triton::requests`) or a test's.

use crate::dtype::DataType;
use crate::error::Error;
use crate::wire::{Correlation, Parameter};

/// Where an input's bytes are: host memory, or a GPU buffer to copy from.
#[derive(Debug, Clone, Copy)]
pub enum Buffer<'r> {
    Host(&'r [u8]),
    Device { address: usize, len: usize, device: i64 },
}

impl Buffer<'_> {
    pub fn len(&self) -> usize {
        match self {
            Buffer::Host(bytes) => bytes.len(),
            Buffer::Device { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Clone)]
pub struct Input<'r> {
    pub name: &'r str,
    pub dtype: DataType,
    pub shape: &'r [i64],
    pub buffers: Vec<Buffer<'r>>,
}

impl Input<'_> {
    /// The input's byte size: the sum of its buffers (Triton's byte_size).
    pub fn byte_size(&self) -> u64 {
        self.buffers.iter().map(|buffer| buffer.len() as u64).sum()
    }
}

/// One request's metadata and inputs, valid while the request lives.
#[derive(Debug, Clone)]
pub struct RequestView<'r> {
    pub id: &'r str,
    pub flags: u32,
    pub correlation: Correlation<'r>,
    pub parameters: Vec<(&'r str, Parameter<'r>)>,
    /// Empty: every output.
    pub requested_outputs: Vec<&'r str>,
    pub inputs: Vec<Input<'r>>,
    /// Triton's trace context (empty: not traced).
    pub trace_context: &'r str,
}

/// A batch of requests to answer. Every request gets exactly one final answer through `send` or `fail`;
/// the implementation releases them (and reports statistics) afterwards.
pub trait Batch {
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The request's metadata and inputs (correlation id and flags only when `sequence`).
    fn read(&self, index: usize, sequence: bool) -> Result<RequestView<'_>, Error>;

    /// Copy a device buffer into host memory.
    fn copy_from_device(&self, address: usize, device: i64, dst: &mut [u8]) -> Result<(), Error>;

    /// True once the request's client has gone away.
    fn is_cancelled(&self, index: usize) -> bool;

    /// Triton's trace of the request, as an address (0: not traced): the parent of its calls' traces.
    fn trace(&self, _index: usize) -> usize {
        0
    }

    /// Add an output to the request's response under construction (created on first use), with a buffer
    /// of `byte_length` bytes that `fill` writes (its error, which names the output, fails the request).
    fn add_output(
        &mut self,
        index: usize,
        name: &str,
        dtype: DataType,
        shape: &[i64],
        byte_length: u64,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<(), Error>,
    ) -> Result<(), Error>;

    /// Send the response under construction (an empty one if none), final or not.
    fn send(&mut self, index: usize, final_: bool);

    /// Send an error response (final): the request has failed; a response under construction is dropped.
    fn fail(&mut self, index: usize, failure: &Error);

    /// End the request's stream without a response (decoupled models): the final flag alone.
    fn finish(&mut self, index: usize);
}
