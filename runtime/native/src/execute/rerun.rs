//! After the worker process died holding a batch: each request still unanswered runs again, alone, on the
//! connection to the replacement worker (`FLAG_RERUN` on the BATCH), so that only a request that crashes its
//! worker again fails. A rerun is never run again: its second crash fails it with its owner's message.

use std::time::{Duration, Instant};

use super::{Executor, Live};
use crate::batch::Batch;
use crate::channel::ConnectError;
use crate::error::Error;

/// How long a rerun waits for the replacement worker to take the connection (it is started by the owner's
/// supervisor, possibly after a back-off, then runs the model's setup). Past it the request fails as
/// unavailable, as a batch sent while no worker serves does.
const REPLACEMENT_WAIT: Duration = Duration::from_secs(120);
/// The pause between tries to connect (a connection the dying worker still took ends at once).
const RETRY_PAUSE: Duration = Duration::from_millis(20);

impl Executor {
    /// Run each request of `live` that is not done again, alone; the crash that ended the batch was `crash`.
    /// Every such request is answered here. Returns when the last rerun's computation ended (0: none ran).
    pub(super) fn rerun<B: Batch>(&mut self, batch: &mut B, live: &mut [Live], crash: &Error) -> u64 {
        let pending: Vec<usize> = live.iter().filter(|request| !request.done).map(|request| request.index).collect();
        live.iter_mut().for_each(|request| request.done = true);
        self.metrics.rerun_after_crash(pending.len());
        let mut end = 0;
        for index in pending {
            if let Err(error) = self.connect_to_replacement() {
                let message = format!("{}; running this request again failed: tritonrt: {error}", crash.message);
                batch.fail(index, &Error::unavailable(message));
                continue;
            }
            self.rerunning = true;
            let mut one = Vec::with_capacity(1);
            let (timing, again) = self.run(batch, Some(index), &mut one);
            self.rerunning = false;
            end = end.max(timing.compute_end_ns);
            if let Some(failure) = again {
                // Its owner's message says the request crashed the worker twice.
                self.metrics.failed_as_guilty();
                batch.fail(index, &failure);
            }
        }
        end
    }

    /// Connect, waiting for the replacement worker while the socket answers but no worker takes it in time.
    fn connect_to_replacement(&mut self) -> Result<(), ConnectError> {
        let deadline = Instant::now() + REPLACEMENT_WAIT;
        loop {
            match self.connect() {
                Ok(()) => return Ok(()),
                Err(ConnectError::Timeout { .. } | ConnectError::Handshake { .. } | ConnectError::Hello(_))
                    if Instant::now() < deadline =>
                {
                    std::thread::sleep(RETRY_PAUSE);
                }
                Err(error) => return Err(error),
            }
        }
    }
}
