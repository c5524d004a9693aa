//! The executor against a scripted worker: what each request gets back on every path.

mod support;

use std::borrow::Cow;

use support::*;
use triton_tritonrt::dtype::DataType;
use triton_tritonrt::wire::{
    Body, Header, Response, Tensor, ERROR_CANCELLED, ERROR_INTERNAL, ERROR_INVALID_ARG, ERROR_UNAVAILABLE, FLAG_FINAL,
    FLAG_NEW_REGION, FLAG_RETAINED, KIND_ACK, KIND_BATCH, KIND_CANCEL, LOCATION_SENDER_REGION,
};

fn fp32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn inputs_go_inline_or_through_the_region_and_come_back() {
    let dir = temp_dir("round-trip");
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 1, |mut end| {
        for _ in 0..2 {
            let batch = end.read().unwrap();
            assert_eq!(batch.header.kind, KIND_BATCH);
            end.echo(&batch);
        }
    });
    let mut executor = executor(socket, false);
    for round in 0..2 {
        let large: Vec<f32> = (0..1000).map(|i| i as f32 + round as f32).collect();
        let mut batch = FakeBatch::new(vec![
            FakeRequest::with(vec![FakeInput::fp32("X", &[1.0, 2.0])]),
            FakeRequest::with(vec![FakeInput::fp32("X", &large)]),
            FakeRequest::with(vec![
                FakeInput::fp32("X", &[3.0]),
                FakeInput::new("E", DataType::Int64, &[1, 0], vec![]),
            ]),
        ]);
        let timing = executor.execute(&mut batch);
        batch.assert_all_answered();
        assert_eq!(batch.outputs(0)[0].data, fp32_bytes(&[1.0, 2.0]));
        assert_eq!(batch.outputs(1)[0].data, fp32_bytes(&large), "round {round}: by reference from our region");
        assert_eq!(batch.outputs(2)[1].shape, vec![1, 0]);
        assert_eq!(timing.batch_size, 3);
        assert!(timing.compute_end_ns >= timing.compute_start_ns && timing.compute_start_ns > 0);
    }
    worker.join().unwrap();
}

#[test]
fn a_poison_request_fails_alone_before_anything_is_sent() {
    let dir = temp_dir("poison");
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 1, |mut end| {
        let batch = end.read().unwrap();
        let Body::Batch(requests) = batch.body() else { panic!() };
        assert_eq!(requests.len(), 1, "only the good request reaches the worker");
        end.echo(&batch);
    });
    let mut executor = executor(socket, false);
    let bad_bytes = vec![9, 0, 0, 0, b'x']; // one element claiming 9 bytes
    let mut batch = FakeBatch::new(vec![
        FakeRequest::with(vec![FakeInput::new("X", DataType::Fp32, &[1, 1 << 62], vec![])]),
        FakeRequest::with(vec![FakeInput::new("X", DataType::Fp32, &[1, 4], vec![0; 12])]),
        FakeRequest::with(vec![FakeInput::new("S", DataType::Bytes, &[1], bad_bytes)]),
        FakeRequest::with(vec![FakeInput::fp32("X", &[5.0])]),
    ]);
    executor.execute(&mut batch);
    batch.assert_all_answered();
    for (index, why) in [(0, "more than 2^64 bytes"), (1, "needs 16 bytes, but 12"), (2, "runs past")] {
        let failure = batch.failure(index);
        assert_eq!(failure.code, ERROR_INVALID_ARG);
        assert!(failure.message.contains(why) && failure.message.contains("input"), "{failure:?}");
    }
    assert_eq!(batch.outputs(3)[0].data, fp32_bytes(&[5.0]));
    worker.join().unwrap();
}

#[test]
fn errors_fail_their_request_or_the_whole_batch() {
    let dir = temp_dir("errors");
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 1, |mut end| {
        let batch = end.read().unwrap();
        let reply = Body::Reply(vec![
            Response::Error { code: ERROR_INVALID_ARG, message: "row 0 is bad" },
            Response::Outputs(vec![]),
        ]);
        end.send(Header { flags: FLAG_FINAL, seq: batch.header.seq, ..Header::default() }, &reply, &[]);
        let batch = end.read().unwrap();
        let error = Body::BatchError { code: ERROR_INTERNAL, message: "the callable raised" };
        end.send(Header { seq: batch.header.seq, ..Header::default() }, &error, &[]);
    });
    let mut executor = executor(socket, false);
    let requests = || {
        vec![
            FakeRequest::with(vec![FakeInput::fp32("X", &[1.0])]),
            FakeRequest::with(vec![FakeInput::fp32("X", &[2.0])]),
        ]
    };
    let mut batch = FakeBatch::new(requests());
    executor.execute(&mut batch);
    batch.assert_all_answered();
    assert_eq!(batch.failure(0).message, "row 0 is bad");
    assert!(batch.outputs(1).is_empty());
    let mut batch = FakeBatch::new(requests());
    executor.execute(&mut batch);
    batch.assert_all_answered();
    assert_eq!(batch.failure(0).message, "the callable raised");
    assert_eq!(batch.failure(1).code, ERROR_INTERNAL);
    worker.join().unwrap();
}

#[test]
fn a_dead_worker_fails_the_batch_and_the_next_one_reconnects() {
    let dir = temp_dir("dead");
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 2, |mut end| {
        let batch = end.read().unwrap();
        if batch.header.seq == 1 {
            return; // dies with the batch in flight: the connection closes
        }
        end.echo(&batch);
    });
    let mut executor = executor(socket.clone(), false);
    let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &[1.0])])]);
    executor.execute(&mut batch);
    let failure = batch.failure(0);
    assert_eq!(failure.code, ERROR_UNAVAILABLE);
    assert!(failure.message.contains("lost the process") && failure.message.contains("closed"), "{failure:?}");
    let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &[2.0])])]);
    executor.execute(&mut batch);
    assert_eq!(batch.outputs(0)[0].data, fp32_bytes(&[2.0]), "reconnected to the worker's next connection");
    worker.join().unwrap();
    std::fs::remove_file(&socket).unwrap();
    let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &[3.0])])]);
    executor.execute(&mut batch);
    assert!(batch.failure(0).message.contains("cannot connect"), "{:?}", batch.failure(0));
    assert!(executor.ready().is_err());
}

#[test]
fn a_worker_that_closed_between_batches_gets_the_next_batch_on_a_new_connection_and_nothing_fails() {
    let dir = temp_dir("closed-between");
    let (closed, is_closed) = std::sync::mpsc::channel();
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 2, move |mut end| {
        let batch = end.read().unwrap();
        end.echo(&batch);
        drop(end); // the worker restarted, or moved to a new instance, between batches
        closed.send(()).unwrap();
    });
    let mut executor = executor(socket, false);
    // The second batch has an input for our region: the region is made again on the new connection.
    for values in [vec![1.0f32, 2.0], (0..1000).map(|i| i as f32).collect()] {
        let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &values)])]);
        executor.execute(&mut batch);
        batch.assert_all_answered();
        assert_eq!(batch.outputs(0)[0].data, fp32_bytes(&values), "{:?}", batch.failure(0));
        is_closed.recv().unwrap();
    }
    worker.join().unwrap();
}

#[test]
fn a_malformed_reply_fails_its_requests_and_the_connection_goes_on() {
    let dir = temp_dir("malformed");
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 1, |mut end| {
        let batch = end.read().unwrap();
        // An output claiming bytes past the data section.
        let output = Tensor {
            name: "Y",
            dtype: DataType::Fp32,
            location: 0,
            offset: 0,
            byte_length: 4,
            shape: Cow::Owned(vec![1]),
        };
        end.send(
            Header { flags: FLAG_FINAL, seq: batch.header.seq, ..Header::default() },
            &Body::Reply(vec![Response::Outputs(vec![output])]),
            &[],
        );
        let batch = end.read().unwrap();
        end.echo(&batch);
    });
    let mut executor = executor(socket, false);
    let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &[1.0])])]);
    executor.execute(&mut batch);
    let failure = batch.failure(0);
    assert!(failure.message.contains("cannot be read") && failure.message.contains("outside"), "{failure:?}");
    let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &[7.0])])]);
    executor.execute(&mut batch);
    assert_eq!(batch.outputs(0)[0].data, fp32_bytes(&[7.0]));
    worker.join().unwrap();
}

#[test]
fn an_output_longer_than_its_region_fails_before_any_buffer_is_asked_for() {
    let dir = temp_dir("hostile-length");
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 1, |mut end| {
        let batch = end.read().unwrap();
        let (region_id, region_size) = end.region_with(&[0u8; 16]);
        // A worker-declared length of 1 TiB in a 4 KiB region: Triton must never be asked for that buffer.
        let output = Tensor {
            name: "Y",
            dtype: DataType::Uint8,
            location: LOCATION_SENDER_REGION,
            offset: 0,
            byte_length: 1 << 40,
            shape: Cow::Owned(vec![1 << 40]),
        };
        let header = Header {
            flags: FLAG_FINAL | FLAG_NEW_REGION,
            seq: batch.header.seq,
            region_id,
            region_size,
            ..Header::default()
        };
        end.send(header, &Body::Reply(vec![Response::Outputs(vec![output])]), &[]);
        let batch = end.read().unwrap();
        end.echo(&batch);
    });
    let mut executor = executor(socket, false);
    let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &[1.0])])]);
    executor.execute(&mut batch);
    let failure = batch.failure(0);
    assert_eq!(failure.code, ERROR_INTERNAL);
    assert!(failure.message.contains("\"Y\"") && failure.message.contains("outside the region"), "{failure:?}");
    assert!(batch.buffers_asked.is_empty(), "asked for {:?}", batch.buffers_asked);
    let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &[7.0])])]);
    executor.execute(&mut batch);
    assert_eq!(batch.outputs(0)[0].data, fp32_bytes(&[7.0]), "the connection goes on");
    worker.join().unwrap();
}

#[test]
fn a_stream_out_of_step_breaks_the_connection_only() {
    let dir = temp_dir("garbage");
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 2, |mut end| {
        let batch = end.read().unwrap();
        if batch.header.seq == 1 {
            use std::io::Write;
            end.stream.write_all(&[0xAB; 64]).unwrap();
            let _ = end.read(); // until the backend closes
        } else {
            end.echo(&batch);
        }
    });
    let mut executor = executor(socket, false);
    let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &[1.0])])]);
    executor.execute(&mut batch);
    assert!(batch.failure(0).message.contains("cannot be read"), "{:?}", batch.failure(0));
    let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &[2.0])])]);
    executor.execute(&mut batch);
    assert_eq!(batch.outputs(0)[0].data, fp32_bytes(&[2.0]));
    worker.join().unwrap();
}

#[test]
fn a_decoupled_stream_is_acknowledged_and_cancellations_reach_the_worker() {
    let dir = temp_dir("stream");
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 1, |mut end| {
        let batch = end.read().unwrap();
        let seq = batch.header.seq;
        let big = fp32_bytes(&[4.0; 400]); // 1600 bytes: through the worker's region
        let (region_id, region_size) = end.region_with(&big);
        for step in 0..2u32 {
            let output = Tensor {
                name: "Y",
                dtype: DataType::Fp32,
                location: LOCATION_SENDER_REGION,
                offset: 0,
                byte_length: 1600,
                shape: Cow::Owned(vec![400]),
            };
            let flags = if step == 0 { FLAG_NEW_REGION } else { 0 };
            let header = Header { flags, seq, region_id, region_size, ..Header::default() };
            end.send(header, &Body::Reply(vec![Response::Outputs(vec![output.clone()]), Response::Nothing]), &[]);
            let ack = end.read().unwrap();
            assert_eq!((ack.header.kind, ack.header.count), (KIND_ACK, step + 1));
        }
        // Request 1's client cancels: the backend says so while it waits.
        let cancel = end.read().unwrap();
        assert_eq!(cancel.header.kind, KIND_CANCEL);
        assert_eq!(cancel.body(), Body::Cancel(vec![1]));
        let reply =
            Body::Reply(vec![Response::Nothing, Response::Error { code: ERROR_CANCELLED, message: "cancelled" }]);
        end.send(Header { flags: FLAG_FINAL, seq, ..Header::default() }, &reply, &[]);
    });
    let mut executor = executor(socket, true);
    let requests = vec![
        FakeRequest::with(vec![FakeInput::fp32("X", &[1.0])]),
        FakeRequest::with(vec![FakeInput::fp32("X", &[1.0])]),
    ];
    let mut batch = CancelAfterSend::new(FakeBatch::new(requests));
    executor.execute(&mut batch);
    let batch = batch.inner;
    batch.assert_all_answered();
    let partials: Vec<_> =
        batch.events[0].iter().filter(|event| matches!(event, Event::Sent { final_: false, .. })).collect();
    assert_eq!(partials.len(), 2);
    assert!(matches!(batch.events[0].last(), Some(Event::Finished)));
    assert_eq!(batch.events[1].len(), 1);
    assert_eq!(batch.failure(1).code, ERROR_CANCELLED);
    worker.join().unwrap();
}

/// A batch whose request 1 reports cancelled from the first check after the batch was sent.
struct CancelAfterSend {
    inner: FakeBatch,
    checks: std::cell::Cell<u32>,
}

impl CancelAfterSend {
    fn new(inner: FakeBatch) -> CancelAfterSend {
        CancelAfterSend { inner, checks: std::cell::Cell::new(0) }
    }
}

impl triton_tritonrt::batch::Batch for CancelAfterSend {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn read(
        &self,
        index: usize,
        sequence: bool,
    ) -> Result<triton_tritonrt::batch::RequestView<'_>, triton_tritonrt::error::Error> {
        self.inner.read(index, sequence)
    }
    fn copy_from_device(
        &self,
        address: usize,
        device: i64,
        dst: &mut [u8],
    ) -> Result<(), triton_tritonrt::error::Error> {
        self.inner.copy_from_device(address, device, dst)
    }
    fn is_cancelled(&self, index: usize) -> bool {
        let checks = self.checks.get() + 1;
        self.checks.set(checks);
        index == 1 && checks > 2 // the two checks before sending say no
    }
    fn add_output(
        &mut self,
        index: usize,
        name: &str,
        dtype: DataType,
        shape: &[i64],
        byte_length: u64,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<(), triton_tritonrt::error::Error>,
    ) -> Result<(), triton_tritonrt::error::Error> {
        self.inner.add_output(index, name, dtype, shape, byte_length, fill)
    }
    fn send(&mut self, index: usize, final_: bool) {
        self.inner.send(index, final_)
    }
    fn fail(&mut self, index: usize, failure: &triton_tritonrt::error::Error) {
        self.inner.fail(index, failure)
    }
    fn finish(&mut self, index: usize) {
        self.inner.finish(index)
    }
}

#[test]
fn a_retained_region_is_replaced_for_the_next_batch() {
    let dir = temp_dir("retained");
    let (socket, worker) = spawn_worker(&dir, welcome(64, 1 << 30), 1, |mut end| {
        let mut regions = Vec::new();
        for _ in 0..3 {
            let batch = end.read().unwrap();
            regions.push((batch.header.region_id, batch.header.has(FLAG_NEW_REGION)));
            let Body::Batch(requests) = batch.body() else { panic!() };
            let responses = requests.iter().map(|_| Response::Outputs(vec![])).collect();
            let retained = if batch.header.seq == 1 { FLAG_RETAINED } else { 0 };
            end.send(
                Header { flags: FLAG_FINAL | retained, seq: batch.header.seq, ..Header::default() },
                &Body::Reply(responses),
                &[],
            );
        }
        assert_eq!(regions, vec![(1, true), (2, true), (2, false)], "retained region 1 is never reused");
    });
    let mut executor = executor(socket, false);
    for _ in 0..3 {
        let mut batch = FakeBatch::new(
            vec![FakeInput::fp32("X", &[0.5; 100])].into_iter().map(|input| FakeRequest::with(vec![input])).collect(),
        );
        executor.execute(&mut batch);
        batch.assert_all_answered();
    }
    worker.join().unwrap();
}

#[test]
fn a_batch_over_the_region_limit_fails_with_a_clear_message() {
    let dir = temp_dir("limit");
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 20), 1, |mut end| {
        let batch = end.read().unwrap();
        end.echo(&batch);
    });
    let mut executor = executor(socket, false);
    let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &vec![1.0; 300_000])])]);
    executor.execute(&mut batch);
    let failure = batch.failure(0);
    assert_eq!(failure.code, ERROR_UNAVAILABLE);
    assert!(failure.message.contains("more than the region limit"), "{failure:?}");
    let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &[1.0; 1000])])]);
    executor.execute(&mut batch);
    assert_eq!(batch.outputs(0)[0].data.len(), 4000, "the next batch that fits is served");
    worker.join().unwrap();
}

#[test]
fn requested_outputs_filter_the_response() {
    let dir = temp_dir("requested");
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 1, |mut end| {
        let batch = end.read().unwrap();
        end.echo(&batch);
    });
    let mut executor = executor(socket, false);
    let mut request = FakeRequest::with(vec![FakeInput::fp32("A", &[1.0]), FakeInput::fp32("B", &[2.0])]);
    request.requested = vec!["B".into()];
    let mut batch = FakeBatch::new(vec![request]);
    executor.execute(&mut batch);
    let names: Vec<_> = batch.outputs(0).iter().map(|output| output.name.clone()).collect();
    assert_eq!(names, vec!["B".to_string()]);
    worker.join().unwrap();
}
