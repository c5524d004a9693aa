//! Why a connection to the worker cannot be made or cannot go on; each says what to fix.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::wire::{WireError, VERSION};

/// The connection cannot go on (the peer closed, the stream is out of step, a socket error). What was in
/// flight fails with this; the next batch connects again.
#[derive(Debug)]
pub enum Broken {
    Send(io::Error),
    Wait(io::Error),
    Read(io::Error),
    /// The worker closed the connection.
    Closed,
    /// More descriptors arrived than messages that announce them.
    ExtraDescriptors,
    /// A message announced a new region and no descriptor came with it.
    MissingDescriptor,
    /// The worker speaks another version of the wire protocol.
    Version {
        peer: u16,
    },
    /// A header that cannot be decoded, or a METRICS message (which has no requests to fail instead).
    Unreadable(WireError),
    /// A message that is not an answer to the batch in flight.
    OutOfStep {
        batch: u64,
        kind: u16,
        seq: u64,
    },
    /// A partial (non-final) reply to a model that is not decoupled.
    PartialReply,
}

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Broken::Send(error) => write!(f, "sending to the worker failed: {error}"),
            Broken::Wait(error) => write!(f, "waiting for the worker failed: {error}"),
            Broken::Read(error) => write!(f, "reading from the worker failed: {error}"),
            Broken::Closed => f.write_str("the worker closed the connection (its process stopped or died)"),
            Broken::ExtraDescriptors => {
                f.write_str("the worker sent more region descriptors than messages that announce them")
            }
            Broken::MissingDescriptor => f.write_str("a new region was announced without its descriptor"),
            Broken::Version { peer } => write!(
                f,
                "the worker speaks wire protocol version {peer}, this backend version {VERSION}: install the tritonrt \
                 runtime and its backend from the same release"
            ),
            Broken::Unreadable(error) => write!(f, "the worker sent a message that cannot be read: {error}"),
            Broken::OutOfStep { batch, kind, seq } => {
                write!(f, "the worker answered batch {batch} with a message of kind {kind} for batch {seq}")
            }
            Broken::PartialReply => f.write_str("the worker streamed a partial reply to a model that is not decoupled"),
        }
    }
}

impl std::error::Error for Broken {}

/// Why `Channel::connect` failed; each says what to fix.
#[derive(Debug)]
pub enum ConnectError {
    /// Nothing listens at the socket.
    Unreachable { model: String, path: PathBuf, error: io::Error },
    /// The peer's credentials could not be read.
    Credentials(io::Error),
    /// The listener runs as another user than the owner of the connection file.
    WrongUser { path: PathBuf, uid: u32, owner: u32 },
    /// The HELLO could not be sent.
    Hello(Broken),
    /// The connection broke before the answer to the HELLO.
    Handshake { path: PathBuf, broken: Broken },
    /// No answer to the HELLO in time.
    Timeout { path: PathBuf, timeout: Duration },
    /// An answer to the HELLO that cannot be decoded.
    BadAnswer(WireError),
    /// The worker refused this instance (its message says why).
    Refused { model: String, message: String },
    /// The HELLO was answered with neither WELCOME nor REFUSE.
    UnexpectedKind(u16),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Unreachable { model, path, error } => write!(
                f,
                "cannot connect to the tritonrt process serving model {model:?} at {}: {error}. That process must be \
                 running (it writes the model repository and listens while it serves).",
                path.display()
            ),
            ConnectError::Credentials(error) => write!(f, "cannot read the peer's credentials: {error}"),
            ConnectError::WrongUser { path, uid, owner } => write!(
                f,
                "the process listening at {} runs as user {uid}, but the model's connection file belongs to user \
                 {owner}: refusing to send it requests",
                path.display()
            ),
            ConnectError::Hello(broken) => broken.fmt(f),
            ConnectError::Handshake { path, broken } => {
                write!(f, "the handshake with the tritonrt process at {} failed: {broken}", path.display())
            }
            ConnectError::Timeout { path, timeout } => {
                write!(f, "the tritonrt process at {} did not answer the handshake within {timeout:?}", path.display())
            }
            ConnectError::BadAnswer(error) => write!(f, "bad handshake answer: {error}"),
            ConnectError::Refused { model, message } => {
                write!(f, "the tritonrt process serving model {model:?} refused this instance: {message}")
            }
            ConnectError::UnexpectedKind(kind) => write!(f, "the handshake was answered with a message of kind {kind}"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// Why a message could not be sent.
#[derive(Debug)]
pub enum SendFailed {
    /// The worker had closed the connection before any byte of the message went (it went away between
    /// messages): nothing of it reached anyone, so it can be sent again on a new connection.
    Unsent(Broken),
    /// The connection broke, perhaps part-way through the message.
    Broken(Broken),
}

impl SendFailed {
    pub fn into_broken(self) -> Broken {
        match self {
            SendFailed::Unsent(broken) | SendFailed::Broken(broken) => broken,
        }
    }
}
