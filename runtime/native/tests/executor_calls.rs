//! The executor serving a scripted worker's calls of other models (INFER, INFER_CANCEL, CONTROL) while a batch
//! runs, against a fake server (`Calls`) whose responses come from other threads, as Triton's do.

mod support;

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::*;
use triton_tritonrt::dtype::DataType;
use triton_tritonrt::error::Error;
use triton_tritonrt::execute::{CallEvent, CallHandle, CallOutput, CallResponse, Calls, Events};
use triton_tritonrt::wire::{
    Body, Call, Control, ControlResult, Correlation, Header, Request, Response, Tensor, CONTROL_IS_READY,
    ERROR_NOT_FOUND, FLAG_FINAL, FLAG_NEW_REGION, KIND_BATCH, KIND_CONTROL_RESULT, KIND_INFER_RESPONSE,
    LOCATION_INLINE, LOCATION_SENDER_REGION,
};

/// A response of the fake server: its outputs, owned.
struct FakeResponse(Vec<(String, DataType, Vec<i64>, Vec<u8>)>);

impl CallResponse for FakeResponse {
    fn error(&self) -> Option<Error> {
        None
    }
    fn outputs(&self) -> Result<Vec<CallOutput<'_>>, Error> {
        Ok(self.0.iter().map(|(name, dtype, shape, bytes)| CallOutput { name, dtype: *dtype, shape, bytes }).collect())
    }
}

struct FakeHandle(Arc<AtomicUsize>);

impl CallHandle for FakeHandle {
    fn cancel(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// "double": one response, each input byte doubled (as u8), from another thread; "stream": three responses
/// 20 ms apart, then the end; any other model cannot be found. Counts cancellations.
#[derive(Default)]
struct FakeCalls {
    cancels: Arc<AtomicUsize>,
    models: Arc<Mutex<Vec<String>>>,
}

impl Calls for FakeCalls {
    fn start(
        &self,
        seq: u64,
        call: &Call<'_>,
        inputs: Vec<Vec<u8>>,
        events: &Arc<Events>,
        _parent_trace: usize,
    ) -> Result<Box<dyn CallHandle>, Error> {
        self.models.lock().unwrap().push(call.model_name.to_string());
        let call_id = call.call_id;
        let events = events.clone();
        let shape = call.request.inputs[0].shape.to_vec();
        match call.model_name {
            "double" => {
                let doubled: Vec<u8> = inputs[0].iter().map(|byte| byte.wrapping_mul(2)).collect();
                std::thread::spawn(move || {
                    let response = FakeResponse(vec![("y".into(), DataType::Uint8, shape, doubled)]);
                    events.send(CallEvent { seq, call_id, response: Some(Box::new(response)), last: true });
                });
            }
            "stream" => {
                std::thread::spawn(move || {
                    for step in 0..3u8 {
                        std::thread::sleep(Duration::from_millis(20));
                        let response = FakeResponse(vec![("y".into(), DataType::Uint8, vec![1], vec![step])]);
                        events.send(CallEvent { seq, call_id, response: Some(Box::new(response)), last: false });
                    }
                    events.send(CallEvent { seq, call_id, response: None, last: true });
                });
            }
            other => return Err(Error::new(ERROR_NOT_FOUND, format!("no model {other:?}"))),
        }
        Ok(Box::new(FakeHandle(self.cancels.clone())))
    }

    fn control(&self, control: &Control<'_>, _data: &[u8]) -> Result<bool, Error> {
        assert_eq!(control.op, CONTROL_IS_READY);
        Ok(control.model_name == "double")
    }
}

fn infer(model_name: &'static str, call_id: u64, input: Tensor<'static>) -> Body<'static> {
    Body::Infer(Call {
        call_id,
        call_flags: 0,
        model_version: -1,
        timeout_us: 0,
        model_name,
        request: Request {
            id: "",
            flags: 0,
            correlation: Correlation::None,
            parameters: vec![],
            requested_outputs: vec![],
            inputs: vec![input],
            trace_context: "",
        },
    })
}

fn u8_tensor(location: u8, length: usize) -> Tensor<'static> {
    Tensor {
        name: "x",
        dtype: DataType::Uint8,
        location,
        offset: 0,
        byte_length: length as u64,
        shape: Cow::Owned(vec![1, length as i64]),
    }
}

#[test]
fn calls_are_served_while_the_batch_waits_and_answered_in_its_messages() {
    let dir = temp_dir("calls");
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 1, |mut end| {
        let batch = end.read().unwrap();
        assert_eq!(batch.header.kind, KIND_BATCH);
        let seq = batch.header.seq;
        // A small input inline: the answer comes inline.
        end.send(Header { seq, ..Header::default() }, &infer("double", 1, u8_tensor(LOCATION_INLINE, 3)), &[1, 2, 3]);
        let answer = end.read().unwrap();
        assert_eq!(
            (answer.header.kind, answer.header.seq, answer.header.flags & FLAG_FINAL),
            (KIND_INFER_RESPONSE, seq, FLAG_FINAL)
        );
        let Body::InferResponse { call_id: 1, responses } = answer.body() else { panic!("{:?}", answer.body()) };
        let [Response::Outputs(outputs)] = &responses[..] else { panic!("{responses:?}") };
        assert_eq!(end.tensor_bytes(&answer, &outputs[0]), vec![2, 4, 6]);
        // A large input in the worker's region: the answer lies in the backend's region.
        let large: Vec<u8> = (0..5000).map(|i| (i % 100) as u8).collect();
        let (region_id, region_size) = end.region_with(&large);
        let header = Header { seq, flags: FLAG_NEW_REGION, region_id, region_size, ..Header::default() };
        end.send(header, &infer("double", 2, u8_tensor(LOCATION_SENDER_REGION, large.len())), &[]);
        let answer = end.read().unwrap();
        let Body::InferResponse { call_id: 2, responses } = answer.body() else { panic!() };
        let [Response::Outputs(outputs)] = &responses[..] else { panic!() };
        assert_eq!(outputs[0].location, LOCATION_SENDER_REGION);
        let doubled: Vec<u8> = large.iter().map(|byte| byte * 2).collect();
        assert_eq!(end.tensor_bytes(&answer, &outputs[0]), doubled);
        // A model that cannot be found: one final error response that names it.
        end.send(Header { seq, ..Header::default() }, &infer("missing", 3, u8_tensor(LOCATION_INLINE, 1)), &[0]);
        let answer = end.read().unwrap();
        let Body::InferResponse { call_id: 3, responses } = answer.body() else { panic!() };
        let [Response::Error { code, message }] = &responses[..] else { panic!() };
        assert!(*code == ERROR_NOT_FOUND && message.contains("\"missing\""), "{message}");
        // The model loading API.
        let control = Control {
            call_id: 4,
            op: CONTROL_IS_READY,
            model_version: -1,
            model_name: "double",
            config: "",
            files: vec![],
        };
        end.send(Header { seq, ..Header::default() }, &Body::Control(control), &[]);
        let answer = end.read().unwrap();
        assert_eq!(answer.header.kind, KIND_CONTROL_RESULT);
        assert_eq!(answer.body(), Body::ControlResult(ControlResult { call_id: 4, error: None, ready: true }));
        end.echo(&batch);
    });
    let calls = FakeCalls::default();
    let models = calls.models.clone();
    let mut executor = executor(socket, false).with_calls(Box::new(calls)).unwrap();
    let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &[1.0])])]);
    executor.execute(&mut batch);
    batch.assert_all_answered();
    assert_eq!(batch.outputs(0)[0].data, 1.0f32.to_le_bytes());
    assert_eq!(*models.lock().unwrap(), ["double", "double", "missing"]);
    worker.join().unwrap();
}

#[test]
fn a_stream_is_forwarded_until_cancelled_and_calls_left_in_flight_are_cancelled() {
    let dir = temp_dir("call-stream");
    let (socket, worker) = spawn_worker(&dir, welcome(1024, 1 << 30), 1, |mut end| {
        let batch = end.read().unwrap();
        let seq = batch.header.seq;
        end.send(Header { seq, ..Header::default() }, &infer("stream", 7, u8_tensor(LOCATION_INLINE, 1)), &[0]);
        let mut steps = Vec::new();
        loop {
            let answer = end.read().unwrap();
            let Body::InferResponse { call_id: 7, responses } = answer.body() else { panic!() };
            if let [Response::Outputs(outputs)] = &responses[..] {
                steps.push(end.tensor_bytes(&answer, &outputs[0])[0]);
                if steps.len() == 1 {
                    end.send(Header { seq, ..Header::default() }, &Body::InferCancel(7), &[]);
                }
            }
            if answer.header.flags & FLAG_FINAL != 0 {
                assert!(responses.is_empty(), "the end of a stream carries nothing");
                break;
            }
        }
        assert_eq!(steps, [0, 1, 2], "the fake server ignores cancellation: every response still comes");
        // A call the worker does not wait for: cancelled when the batch is answered.
        end.send(Header { seq, ..Header::default() }, &infer("stream", 8, u8_tensor(LOCATION_INLINE, 1)), &[0]);
        end.echo(&batch);
    });
    let calls = FakeCalls::default();
    let cancels = calls.cancels.clone();
    let mut executor = executor(socket, false).with_calls(Box::new(calls)).unwrap();
    let mut batch = FakeBatch::new(vec![FakeRequest::with(vec![FakeInput::fp32("X", &[1.0])])]);
    executor.execute(&mut batch);
    batch.assert_all_answered();
    assert_eq!(cancels.load(Ordering::SeqCst), 2, "INFER_CANCEL, then the call left in flight");
    worker.join().unwrap();
}
