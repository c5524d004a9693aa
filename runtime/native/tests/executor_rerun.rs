//! The executor after the worker process died holding a batch (its owner's BATCH_ERROR with FLAG_RERUN): each
//! request still unanswered runs again alone on the next connection, the one that crashes the worker again fails
//! alone, nothing runs a third time, and models that must not run a request twice fail the batch as before.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use support::*;
use triton_tritonrt::execute::MetricSink;
use triton_tritonrt::wire::{Body, Header, Metric, ERROR_INTERNAL, ERROR_UNAVAILABLE, FLAG_RERUN, KIND_BATCH};

const CRASH: &str =
    "tritonrt: model 'm' instance 0: its worker process (pid 7) was killed by SIGSEGV while it ran this request";
const TWICE: &str = "tritonrt: model 'm' instance 0: this request crashed the worker process twice (killed by SIGSEGV)";

/// What the executor counted.
#[derive(Default, Clone)]
struct Counts(Arc<Mutex<(usize, usize)>>);

impl MetricSink for Counts {
    fn apply(&self, _updates: &[Metric<'_>]) {}
    fn rerun_after_crash(&self, count: usize) {
        self.0.lock().unwrap().0 += count;
    }
    fn failed_as_guilty(&self) {
        self.0.lock().unwrap().1 += 1;
    }
}

fn fp32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn batch_of(values: &[f32]) -> FakeBatch {
    FakeBatch::new(values.iter().map(|&value| FakeRequest::with(vec![FakeInput::fp32("X", &[value])])).collect())
}

/// The first input value of each request of `batch`.
fn values(end: &WorkerEnd, batch: &Message) -> Vec<f32> {
    let Body::Batch(requests) = batch.body() else { panic!("not a batch") };
    requests
        .iter()
        .map(|request| f32::from_le_bytes(end.tensor_bytes(batch, &request.inputs[0])[..4].try_into().unwrap()))
        .collect()
}

/// The owner's answer for a worker that died holding `batch`: as the owner does, it first shuts the connection
/// for reading (a batch sent after this fails to go), then answers; then the connection closes.
fn die(end: &mut WorkerEnd, batch: &Message, code: u8, message: &str, flags: u32) {
    end.stream.shutdown(std::net::Shutdown::Read).unwrap();
    end.send(Header { seq: batch.header.seq, flags, ..Header::default() }, &Body::BatchError { code, message }, &[]);
}

/// What the scripted worker ran: each batch's values, and whether it came as a rerun.
type Ran = Arc<Mutex<Vec<(Vec<f32>, bool)>>>;

/// A worker whose callable crashes on a batch holding a negative value; what it ran is logged (value, rerun).
fn crashing_worker(
    dir: &std::path::Path,
    connections: usize,
    owner_flags: u32,
) -> (std::path::PathBuf, std::thread::JoinHandle<()>, Ran) {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let log = ran.clone();
    let (socket, worker) = spawn_worker(dir, welcome(1024, 1 << 30), connections, move |mut end| {
        while let Some(batch) = end.read() {
            assert_eq!(batch.header.kind, KIND_BATCH);
            let seen = values(&end, &batch);
            let rerun = batch.header.has(FLAG_RERUN);
            log.lock().unwrap().push((seen.clone(), rerun));
            if seen.iter().any(|&value| value < 0.0) {
                let (code, message) = if rerun { (ERROR_INTERNAL, TWICE) } else { (ERROR_UNAVAILABLE, CRASH) };
                return die(&mut end, &batch, code, message, owner_flags);
            }
            end.echo(&batch);
        }
    });
    (socket, worker, ran)
}

#[test]
fn a_crashed_batch_runs_again_one_by_one_and_only_the_request_that_crashes_again_fails() {
    let dir = temp_dir("rerun");
    // The batch crashes, the reruns of 1.0 and -1.0 go to the second worker (-1.0 crashes it), 3.0 to the third.
    let (socket, worker, ran) = crashing_worker(&dir, 3, FLAG_RERUN);
    let counts = Counts::default();
    let mut executor = executor(socket, false).with_metrics(Box::new(counts.clone()));
    let mut batch = batch_of(&[1.0, -1.0, 3.0]);
    executor.execute(&mut batch);
    batch.assert_all_answered();
    assert_eq!(batch.outputs(0)[0].data, fp32_bytes(&[1.0]));
    assert_eq!(batch.outputs(2)[0].data, fp32_bytes(&[3.0]));
    let failure = batch.failure(1);
    assert_eq!((failure.code, failure.message.as_str()), (ERROR_INTERNAL, TWICE), "the owner's message, as it is");
    assert_eq!(*counts.0.lock().unwrap(), (3, 1), "3 requests run again, 1 failed as guilty");
    // The next batch is an ordinary one (no FLAG_RERUN), on the third worker.
    let mut batch = batch_of(&[4.0, 5.0]);
    executor.execute(&mut batch);
    assert_eq!(batch.outputs(1)[0].data, fp32_bytes(&[5.0]));
    drop(executor);
    worker.join().unwrap();
    let ran = ran.lock().unwrap().clone();
    let expected = vec![
        (vec![1.0, -1.0, 3.0], false),
        (vec![1.0], true),
        (vec![-1.0], true),
        (vec![3.0], true),
        (vec![4.0, 5.0], false),
    ];
    assert_eq!(ran, expected, "each request of the crashed batch ran once more, alone; the guilty one no third time");
}

#[test]
fn a_crash_without_flag_rerun_fails_the_whole_batch_as_before() {
    // The owner leaves FLAG_RERUN off for a @no_retry model.
    let dir = temp_dir("no-rerun");
    let (socket, worker, ran) = crashing_worker(&dir, 2, 0);
    let counts = Counts::default();
    let mut executor = executor(socket, false).with_metrics(Box::new(counts.clone()));
    let mut batch = batch_of(&[1.0, -1.0]);
    executor.execute(&mut batch);
    for index in 0..2 {
        assert_eq!(batch.failure(index).message, CRASH);
    }
    let mut batch = batch_of(&[2.0]);
    executor.execute(&mut batch);
    assert_eq!(batch.outputs(0)[0].data, fp32_bytes(&[2.0]));
    drop(executor);
    worker.join().unwrap();
    assert_eq!(ran.lock().unwrap().len(), 2, "nothing ran again");
    assert_eq!(*counts.0.lock().unwrap(), (0, 0));
}

#[test]
fn a_sequence_model_is_not_rerun_even_when_the_owner_allows_it() {
    let dir = temp_dir("sequence-rerun");
    let (socket, worker, ran) = crashing_worker(&dir, 1, FLAG_RERUN);
    let mut target = target(socket, false);
    target.sequence = true;
    let mut executor = triton_tritonrt::execute::Executor::new(target);
    let mut batch = batch_of(&[1.0, -1.0]);
    executor.execute(&mut batch);
    for index in 0..2 {
        assert_eq!(batch.failure(index).message, CRASH, "a sequence's state would be replayed");
    }
    drop(executor);
    worker.join().unwrap();
    assert_eq!(ran.lock().unwrap().len(), 1);
}

#[test]
fn a_rerun_with_no_worker_left_fails_naming_the_crash() {
    let dir = temp_dir("rerun-gone");
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 1, move |mut end| {
        let batch = end.read().unwrap();
        count.fetch_add(1, Ordering::SeqCst);
        die(&mut end, &batch, ERROR_UNAVAILABLE, CRASH, FLAG_RERUN);
    });
    let mut executor = executor(socket, false);
    // The worker takes one connection, then its listener is gone (the service stops): the rerun's connection is
    // refused (or, taken by the listener's backlog just before, ends), and the requests fail.
    let mut batch = batch_of(&[1.0, 2.0]);
    executor.execute(&mut batch);
    worker.join().unwrap();
    batch.assert_all_answered();
    for index in 0..2 {
        let failure = batch.failure(index);
        assert_eq!(failure.code, ERROR_UNAVAILABLE);
        assert!(failure.message.starts_with(CRASH) && failure.message.contains("running this request again failed"));
    }
    assert_eq!(served.load(Ordering::SeqCst), 1);
}
