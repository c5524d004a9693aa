//! The executor's metrics against a scripted worker: the worker's METRICS updates reach the sink before the
//! batch is answered, a malformed or out-of-step METRICS message breaks the connection only, and the executor
//! reports its own events (busy time per batch, reconnections).

mod support;

use std::sync::{Arc, Mutex};

use support::*;
use triton_tritonrt::execute::MetricSink;
use triton_tritonrt::wire::{Body, Header, Metric, METRIC_ADD, METRIC_COUNTER, METRIC_HISTOGRAM, METRIC_OBSERVE};

/// A recorded update: its name, value and labels.
type Recorded = (String, f64, Vec<(String, String)>);

#[derive(Default)]
struct Log {
    updates: Vec<Recorded>,
    busy_ns: Vec<u64>,
    reconnects: u32,
}

/// A sink that records what it gets (shared with the test).
#[derive(Default, Clone)]
struct Recorder(Arc<Mutex<Log>>);

impl MetricSink for Recorder {
    fn apply(&self, updates: &[Metric<'_>]) {
        let mut log = self.0.lock().unwrap();
        for update in updates {
            let labels = update.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            log.updates.push((update.name.to_string(), update.value, labels));
        }
    }
    fn batch_done(&self, busy_ns: u64) {
        self.0.lock().unwrap().busy_ns.push(busy_ns);
    }
    fn reconnected(&self) {
        self.0.lock().unwrap().reconnects += 1;
    }
}

fn counter(value: f64) -> Metric<'static> {
    Metric {
        family_kind: METRIC_COUNTER,
        op: METRIC_ADD,
        value,
        name: "app_rows_total",
        description: "rows",
        labels: vec![("model", "m")],
        buckets: vec![],
    }
}

fn fp32(value: f32) -> FakeBatch {
    FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &[value])])])
}

#[test]
fn metric_updates_before_the_reply_reach_the_sink_and_the_batch_is_answered() {
    let dir = temp_dir("metrics");
    let (closed, is_closed) = std::sync::mpsc::channel();
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 2, move |mut end| {
        let batch = end.read().unwrap();
        let histogram = Metric {
            family_kind: METRIC_HISTOGRAM,
            op: METRIC_OBSERVE,
            value: 0.5,
            name: "app_seconds",
            description: "",
            labels: vec![],
            buckets: vec![0.1, 1.0],
        };
        let header = Header { seq: batch.header.seq, ..Header::default() };
        end.send(header, &Body::Metrics(vec![counter(2.0), histogram]), &[]);
        end.echo(&batch);
        drop(end); // the connection ends: the next batch connects again (a reconnection)
        closed.send(()).unwrap();
    });
    let recorder = Recorder::default();
    let mut executor = executor(socket, false).with_metrics(Box::new(recorder.clone()));
    for value in [1.0, 2.0] {
        let mut batch = fp32(value);
        executor.execute(&mut batch);
        batch.assert_all_answered();
        assert_eq!(batch.outputs(0)[0].data, value.to_le_bytes(), "{:?}", batch.failure(0));
        is_closed.recv().unwrap(); // (a batch sent before the close would fail: not what this test is about)
    }
    worker.join().unwrap();
    let log = recorder.0.lock().unwrap();
    let labels = vec![("model".to_string(), "m".to_string())];
    let expected = ("app_rows_total".to_string(), 2.0, labels);
    assert_eq!(log.updates.iter().filter(|update| **update == expected).count(), 2);
    assert_eq!(log.updates.iter().filter(|(name, value, _)| name == "app_seconds" && *value == 0.5).count(), 2);
    assert_eq!(log.busy_ns.len(), 2);
    assert!(log.busy_ns.iter().all(|ns| *ns > 0));
    assert_eq!(log.reconnects, 1);
}

#[test]
fn a_malformed_or_out_of_step_metrics_message_breaks_the_connection_only() {
    let dir = temp_dir("metrics-bad");
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 3, |mut end| {
        let batch = end.read().unwrap();
        let header = match batch.header.seq {
            1 => Header { seq: 1, ..Header::default() },
            2 => Header { seq: 7, ..Header::default() }, // another batch's
            _ => return end.echo(&batch),
        };
        let bad = if header.seq == 1 { counter(-1.0) } else { counter(1.0) }; // a counter cannot go down
        end.send(header, &Body::Metrics(vec![bad]), &[]);
        let _ = end.read(); // until the backend closes
    });
    let recorder = Recorder::default();
    let mut executor = executor(socket, false).with_metrics(Box::new(recorder.clone()));
    let mut batch = fp32(1.0);
    executor.execute(&mut batch);
    let failure = batch.failure(0);
    assert!(failure.message.contains("cannot be read") && failure.message.contains("metric update 0"), "{failure:?}");
    let mut batch = fp32(2.0);
    executor.execute(&mut batch);
    assert!(batch.failure(0).message.contains("lost the process"), "{:?}", batch.failure(0));
    let mut batch = fp32(3.0);
    executor.execute(&mut batch);
    assert_eq!(batch.outputs(0)[0].data, 3.0f32.to_le_bytes(), "served on a new connection");
    worker.join().unwrap();
    assert!(recorder.0.lock().unwrap().updates.is_empty());
}
