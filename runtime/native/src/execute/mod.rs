//! One model instance's executor: sends each batch to the worker as one message, waits for the answer
//! (forwarding cancellations), and answers every request. `send` builds and sends the BATCH, `answer` reads the
//! worker's answer.

mod answer;
mod calls;
mod rerun;
mod send;

pub use calls::{CallEvent, CallHandle, CallOutput, CallResponse, Calls, Events};

use std::path::PathBuf;
use std::time::Duration;

use crate::batch::Batch;
use crate::channel::{Broken, Channel, ConnectError, SendFailed};
use crate::error::Error;
use crate::sys;
use crate::wire::{Hello, Metric};

use send::SendError;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub const BACKEND_VERSION: &str = concat!("tritonrt-backend ", env!("CARGO_PKG_VERSION"));

/// Who this instance talks to, and what it tells the worker in its HELLO.
#[derive(Debug, Clone)]
pub struct Target {
    pub model_name: String,
    pub instance_index: u32,
    pub max_batch_size: u32,
    pub decoupled: bool,
    pub sequence: bool,
    pub socket: PathBuf,
    pub token: String,
    pub owner: u32,
    pub api_version: (u32, u32),
}

/// When the model's computation (the worker's part) started and ended, and the batch's size (for
/// Triton's statistics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    pub compute_start_ns: u64,
    pub compute_end_ns: u64,
    pub batch_size: u64,
}

/// Where an executor reports what is counted: the worker's METRICS updates, and its own events. The backend's
/// sink publishes them on Triton's metrics (triton/metrics.rs); `NoMetrics` drops them.
pub trait MetricSink: Send {
    /// The updates of a METRICS message, in order.
    fn apply(&self, updates: &[Metric<'_>]);
    /// A batch was answered, `busy_ns` after it was sent.
    fn batch_done(&self, _busy_ns: u64) {}
    /// The executor connected to its worker again (not the first connection).
    fn reconnected(&self) {}
    /// `count` requests' cancellations were passed to the worker.
    fn cancelled(&self, _count: usize) {}
    /// `count` requests of a batch whose worker process died are run again, each alone.
    fn rerun_after_crash(&self, _count: usize) {}
    /// A request run again after a crash crashed its worker again: it failed alone.
    fn failed_as_guilty(&self) {}
}

/// A sink that drops everything (the executor's tests, and until the backend sets one).
pub struct NoMetrics;

impl MetricSink for NoMetrics {
    fn apply(&self, _updates: &[Metric<'_>]) {}
}

pub struct Executor {
    pub target: Target,
    channel: Option<Channel>,
    seq: u64,
    message: Vec<u8>,
    metrics: Box<dyn MetricSink>,
    connections: u64,
    /// Calls of other models from the worker (None: the executor serves none, each fails).
    calls: Option<calls::CallState>,
    /// Where the space of our region that the current batch has not used yet starts.
    own_top: u64,
    /// The batch being sent runs one request again after its worker died (`FLAG_RERUN` on its BATCH).
    rerunning: bool,
}

/// A request of the batch that reached the worker: its index in the batch, and whether it has its final
/// answer.
struct Live {
    index: usize,
    done: bool,
    cancel_sent: bool,
    requested: Vec<String>,
}

impl Executor {
    pub fn new(target: Target) -> Executor {
        Executor {
            target,
            channel: None,
            seq: 0,
            message: Vec::new(),
            metrics: Box::new(NoMetrics),
            connections: 0,
            calls: None,
            own_top: 0,
            rerunning: false,
        }
    }

    /// Serve the worker's calls of other models (and the model loading API) with `calls`.
    pub fn with_calls(mut self, calls: Box<dyn Calls>) -> std::io::Result<Executor> {
        self.calls = Some(calls::CallState::new(calls)?);
        Ok(self)
    }

    /// Report to `metrics` from now on.
    pub fn with_metrics(mut self, metrics: Box<dyn MetricSink>) -> Executor {
        self.metrics = metrics;
        self
    }

    /// Connect and shake hands, unless connected.
    pub fn connect(&mut self) -> Result<(), ConnectError> {
        if self.channel.is_some() {
            return Ok(());
        }
        let target = &self.target;
        let hello = Hello {
            instance_index: target.instance_index,
            max_batch_size: target.max_batch_size,
            api_major: target.api_version.0,
            api_minor: target.api_version.1,
            model_name: &target.model_name,
            token: &target.token,
            backend_version: BACKEND_VERSION,
        };
        let mut channel = Channel::connect(&target.socket, &hello, target.decoupled, target.owner, HANDSHAKE_TIMEOUT)?;
        channel.set_wake(self.calls.as_ref().map(|calls| calls.wake.clone()));
        self.channel = Some(channel);
        self.connections += 1;
        if self.connections > 1 {
            self.metrics.reconnected();
        }
        Ok(())
    }

    /// Drop the connection; the next batch connects again.
    pub fn disconnect(&mut self) {
        self.channel = None;
    }

    /// Ok while the worker is connected (reconnecting if it went away and is back).
    pub fn ready(&mut self) -> Result<(), ConnectError> {
        if self.channel.as_ref().is_some_and(Channel::peer_closed) {
            self.channel = None;
        }
        self.connect()
    }

    /// Answer every request of `batch`. Never fails as a whole: each request gets its response or its error.
    ///
    /// When the worker process dies holding the batch and its owner allows a rerun (`FLAG_RERUN` on its
    /// `BATCH_ERROR`), each request still unanswered runs again alone on the next connection (`rerun.rs`).
    pub fn execute<B: Batch>(&mut self, batch: &mut B) -> Timing {
        let mut live = Vec::with_capacity(batch.len());
        let (mut timing, crash) = self.run(batch, None, &mut live);
        if let Some(crash) = crash {
            let end = self.rerun(batch, &mut live, &crash);
            timing.compute_end_ns = timing.compute_end_ns.max(end);
        }
        timing
    }

    /// Send the batch (or only its request `only`) and answer its requests. Returns the timing and, when the
    /// worker died holding it with a rerun allowed, the owner's error: the requests of `live` not `done` are then
    /// left unanswered for the caller.
    fn run<B: Batch>(&mut self, batch: &mut B, only: Option<usize>, live: &mut Vec<Live>) -> (Timing, Option<Error>) {
        let mut timing = Timing { batch_size: 0, ..Timing::default() };
        if let Some(calls) = self.calls.as_mut() {
            calls.drop_stale();
        }
        let mut failed = Vec::new();
        // No check of the connection before sending (a system call per batch): a worker that went away since the
        // last batch refuses the send before any byte goes, and the batch is sent again on a new connection.
        let mut sent = self.connect_and_send(batch, only, live, &mut failed, &mut timing);
        if let Err(SendError::Channel(SendFailed::Unsent(_))) = sent {
            self.channel = None;
            (failed, timing) = (Vec::new(), Timing::default());
            live.clear();
            sent = self.connect_and_send(batch, only, live, &mut failed, &mut timing);
        }
        for (index, failure) in failed {
            batch.fail(index, &failure);
        }
        match sent {
            Ok(()) => {}
            Err(SendError::Unavailable(error)) => {
                // No request was read or failed yet: every one fails.
                let failure = Error::unavailable(format!("tritonrt: {error}"));
                match only {
                    Some(index) => batch.fail(index, &failure),
                    None => (0..batch.len()).for_each(|index| batch.fail(index, &failure)),
                }
                return (timing, None);
            }
            Err(SendError::Requests(failure)) => {
                live.iter().for_each(|request| batch.fail(request.index, &failure));
                return (timing, None);
            }
            Err(SendError::Channel(failed)) => {
                self.channel = None;
                let failure = self.lost(&failed.into_broken());
                live.iter().for_each(|request| batch.fail(request.index, &failure));
                return (timing, None);
            }
        }
        if live.is_empty() {
            return (timing, None);
        }
        timing.compute_start_ns = sys::monotonic_ns();
        let mut crash = None;
        match self.await_answer(batch, live) {
            Ok(None) => {}
            Ok(Some(error)) => {
                self.channel = None; // its owner closes it: the next batch goes to the replacement
                crash = Some(error);
            }
            Err(broken) => {
                self.channel = None;
                let failure = self.lost(&broken);
                for request in live.iter_mut().filter(|request| !request.done) {
                    batch.fail(request.index, &failure);
                    request.done = true;
                }
            }
        }
        if let Some(calls) = self.calls.as_mut() {
            calls.cancel_all(true); // the batch is answered (or its worker died): what its callable waits for is dropped
        }
        timing.compute_end_ns = sys::monotonic_ns();
        self.metrics.batch_done(timing.compute_end_ns.saturating_sub(timing.compute_start_ns));
        if crash.is_some() {
            return (timing, crash);
        }
        for request in live.iter().filter(|request| !request.done) {
            // The answer ended without a final response for this request.
            if self.target.decoupled {
                batch.finish(request.index);
            } else {
                let message = "tritonrt: the worker's reply had no response for this request";
                batch.fail(request.index, &Error::internal(message));
            }
        }
        (timing, None)
    }

    fn connect_and_send<B: Batch>(
        &mut self,
        batch: &mut B,
        only: Option<usize>,
        live: &mut Vec<Live>,
        failed: &mut Vec<(usize, Error)>,
        timing: &mut Timing,
    ) -> Result<(), SendError> {
        self.connect().map_err(SendError::Unavailable)?;
        self.send_batch(batch, only, live, failed, timing)
    }

    fn lost(&self, broken: &Broken) -> Error {
        Error::unavailable(format!("tritonrt: lost the process serving model {:?}: {broken}", self.target.model_name))
    }
}
