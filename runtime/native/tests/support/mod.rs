//! Test doubles for the executor: a batch of requests in memory (`FakeBatch`) and a worker speaking the wire
//! protocol on a Unix socket (`spawn_worker`), both built on the crate's own codec.

#![allow(dead_code)]

use std::borrow::Cow;
use std::cell::Cell;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use triton_tritonrt::batch::{Batch, Buffer, Input, RequestView};
use triton_tritonrt::dtype::DataType;
use triton_tritonrt::error::Error;
use triton_tritonrt::execute::{Executor, Target};
use triton_tritonrt::region::{OwnRegion, PeerRegion};
use triton_tritonrt::sys;
use triton_tritonrt::wire::{
    decode_body, encode, Body, Correlation, Header, Parameter, Tensor, Welcome, FLAG_NEW_REGION, HEADER_SIZE,
    LOCATION_INLINE, LOCATION_RECEIVER_REGION, LOCATION_SENDER_REGION,
};

pub const TOKEN: &str = "0123456789abcdef0123456789abcdef";

pub struct FakeInput {
    pub name: String,
    pub dtype: DataType,
    pub shape: Vec<i64>,
    pub chunks: Vec<Vec<u8>>,
}

impl FakeInput {
    pub fn new(name: &str, dtype: DataType, shape: &[i64], data: Vec<u8>) -> FakeInput {
        FakeInput { name: name.into(), dtype, shape: shape.to_vec(), chunks: vec![data] }
    }

    pub fn fp32(name: &str, values: &[f32]) -> FakeInput {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        FakeInput::new(name, DataType::Fp32, &[1, values.len() as i64], data)
    }
}

#[derive(Default)]
pub struct FakeRequest {
    pub inputs: Vec<FakeInput>,
    pub parameters: Vec<(String, i64)>,
    pub requested: Vec<String>,
    pub cancelled: Cell<bool>,
}

impl FakeRequest {
    pub fn with(inputs: Vec<FakeInput>) -> FakeRequest {
        FakeRequest { inputs, ..FakeRequest::default() }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub name: String,
    pub dtype: DataType,
    pub shape: Vec<i64>,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Sent { final_: bool, outputs: Vec<Output> },
    Failed(Error),
    Finished,
}

pub struct FakeBatch {
    pub requests: Vec<FakeRequest>,
    pub events: Vec<Vec<Event>>,
    /// The byte length of every output buffer the executor asked for, in order.
    pub buffers_asked: Vec<u64>,
    pending: Vec<Vec<Output>>,
}

impl FakeBatch {
    pub fn new(requests: Vec<FakeRequest>) -> FakeBatch {
        let count = requests.len();
        FakeBatch {
            requests,
            events: vec![Vec::new(); count],
            buffers_asked: Vec::new(),
            pending: vec![Vec::new(); count],
        }
    }

    /// The single final event of request `index` (panics otherwise).
    pub fn only(&self, index: usize) -> &Event {
        assert_eq!(self.events[index].len(), 1, "request {index}: {:?}", self.events[index]);
        &self.events[index][0]
    }

    pub fn failure(&self, index: usize) -> &Error {
        match self.only(index) {
            Event::Failed(failure) => failure,
            other => panic!("request {index} did not fail: {other:?}"),
        }
    }

    pub fn outputs(&self, index: usize) -> &[Output] {
        match self.only(index) {
            Event::Sent { final_: true, outputs } => outputs,
            other => panic!("request {index} has no final response: {other:?}"),
        }
    }

    /// Every request has exactly one final answer.
    pub fn assert_all_answered(&self) {
        for (index, events) in self.events.iter().enumerate() {
            let finals = events
                .iter()
                .filter(|event| matches!(event, Event::Sent { final_: true, .. } | Event::Failed(_) | Event::Finished))
                .count();
            assert_eq!(finals, 1, "request {index}: {events:?}");
            assert!(matches!(
                events.last(),
                Some(Event::Sent { final_: true, .. } | Event::Failed(_) | Event::Finished)
            ));
        }
    }
}

impl Batch for FakeBatch {
    fn len(&self) -> usize {
        self.requests.len()
    }

    fn read(&self, index: usize, _sequence: bool) -> Result<RequestView<'_>, Error> {
        let request = &self.requests[index];
        Ok(RequestView {
            trace_context: "",
            id: "",
            flags: 0,
            correlation: Correlation::None,
            parameters: request.parameters.iter().map(|(key, value)| (key.as_str(), Parameter::Int(*value))).collect(),
            requested_outputs: request.requested.iter().map(String::as_str).collect(),
            inputs: request
                .inputs
                .iter()
                .map(|input| Input {
                    name: &input.name,
                    dtype: input.dtype,
                    shape: &input.shape,
                    buffers: input.chunks.iter().map(|chunk| Buffer::Host(chunk)).collect(),
                })
                .collect(),
        })
    }

    fn copy_from_device(&self, _address: usize, _device: i64, _dst: &mut [u8]) -> Result<(), Error> {
        Err(Error::internal("tritonrt: no GPU in tests"))
    }

    fn is_cancelled(&self, index: usize) -> bool {
        self.requests[index].cancelled.get()
    }

    fn add_output(
        &mut self,
        index: usize,
        name: &str,
        dtype: DataType,
        shape: &[i64],
        byte_length: u64,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.buffers_asked.push(byte_length);
        let mut data = vec![0u8; byte_length as usize];
        fill(&mut data)?;
        self.pending[index].push(Output { name: name.into(), dtype, shape: shape.to_vec(), data });
        Ok(())
    }

    fn send(&mut self, index: usize, final_: bool) {
        let outputs = std::mem::take(&mut self.pending[index]);
        self.events[index].push(Event::Sent { final_, outputs });
    }

    fn fail(&mut self, index: usize, failure: &Error) {
        self.pending[index].clear();
        self.events[index].push(Event::Failed(failure.clone()));
    }

    fn finish(&mut self, index: usize) {
        self.events[index].push(Event::Finished);
    }
}

/// The worker's end of a connection, for scripted tests.
pub struct WorkerEnd {
    pub stream: UnixStream,
    buf: Vec<u8>,
    fds: Vec<OwnedFd>,
    pub peer: Option<PeerRegion>,
    pub own: Option<OwnRegion>,
    next_region: u32,
}

/// A received message: its header, whole bytes, and the backend's region descriptor if it announced one.
pub struct Message {
    pub header: Header,
    pub bytes: Vec<u8>,
}

impl Message {
    pub fn body(&self) -> Body<'_> {
        decode_body(&self.header, &self.bytes[HEADER_SIZE..HEADER_SIZE + self.header.meta_length as usize]).unwrap()
    }
}

impl WorkerEnd {
    pub fn new(stream: UnixStream) -> WorkerEnd {
        WorkerEnd { stream, buf: Vec::new(), fds: Vec::new(), peer: None, own: None, next_region: 1 }
    }

    /// The next message (mapping the backend's region when it announces one); None once the backend closed.
    pub fn read(&mut self) -> Option<Message> {
        loop {
            if self.buf.len() >= HEADER_SIZE {
                let header = Header::decode(self.buf[..HEADER_SIZE].try_into().unwrap()).unwrap();
                let total = header.total_length();
                if self.buf.len() >= total {
                    let bytes: Vec<u8> = self.buf.drain(..total).collect();
                    if header.has(FLAG_NEW_REGION) {
                        let fd = self.fds.remove(0);
                        self.peer = Some(PeerRegion::map(header.region_id, fd, header.region_size).unwrap());
                    }
                    return Some(Message { header, bytes });
                }
            }
            let mut chunk = vec![0u8; 1 << 16];
            sys::wait_readable(self.stream.as_fd(), -1).unwrap();
            match sys::recv_nowait(self.stream.as_fd(), &mut chunk, &mut self.fds) {
                Ok(Some(0)) | Err(_) => return None,
                Ok(Some(count)) => self.buf.extend_from_slice(&chunk[..count]),
                Ok(None) => {}
            }
        }
    }

    /// The bytes of an input tensor of `message`.
    pub fn tensor_bytes(&self, message: &Message, tensor: &Tensor<'_>) -> Vec<u8> {
        let mut data = vec![0u8; tensor.byte_length as usize];
        match tensor.location {
            LOCATION_INLINE => {
                let start = message.header.data_start() + tensor.offset as usize;
                let end = start + data.len();
                data.copy_from_slice(&message.bytes[start..end]);
            }
            LOCATION_SENDER_REGION => assert!(self.peer.as_ref().unwrap().mapping().copy_out(tensor.offset, &mut data)),
            _ => panic!("unexpected location"),
        }
        data
    }

    pub fn send(&mut self, header: Header, body: &Body<'_>, data: &[u8]) {
        let mut out = Vec::new();
        let announce = header.has(FLAG_NEW_REGION);
        encode(&header, body, data, &mut out);
        let fd = if announce { self.own.as_ref().map(|own| own.fd()) } else { None };
        sys::send_all(self.stream.as_fd(), &out, fd).unwrap();
    }

    /// A new region of ours holding `data` at offset 0: (its id, its size) for the header.
    pub fn region_with(&mut self, data: &[u8]) -> (u32, u64) {
        let size = (data.len() as u64).max(4096);
        let mut region = OwnRegion::create(self.next_region, size).unwrap();
        self.next_region += 1;
        assert!(region.mapping_mut().copy_in(0, data));
        let id = region.id;
        self.own = Some(region);
        (id, size)
    }

    /// Echo every input of every request of `batch` back as an output (RECEIVER_REGION for regional
    /// inputs: the backend's own region, by reference).
    pub fn echo(&mut self, batch: &Message) {
        let Body::Batch(requests) = batch.body() else { panic!("not a batch") };
        let mut data = Vec::new();
        let responses: Vec<_> = requests
            .iter()
            .map(|request| {
                triton_tritonrt::wire::Response::Outputs(
                    request
                        .inputs
                        .iter()
                        .map(|input| {
                            let mut output = input.clone();
                            if input.location == LOCATION_INLINE {
                                output.offset = data.len() as u64;
                                data.extend(self.tensor_bytes(batch, input));
                            } else {
                                output.location = LOCATION_RECEIVER_REGION;
                            }
                            Tensor { shape: Cow::Owned(output.shape.to_vec()), ..output }
                        })
                        .collect(),
                )
            })
            .collect();
        let header = Header {
            flags: triton_tritonrt::wire::FLAG_FINAL,
            seq: batch.header.seq,
            peer_region_id: if batch.header.region_id != 0 { batch.header.region_id } else { 0 },
            ..Header::default()
        };
        self.send(header, &Body::Reply(responses), &data);
    }
}

/// A worker listening at `dir/worker.sock`: it welcomes each connection and hands it to `serve`, for up to
/// `connections` connections.
pub fn spawn_worker(
    dir: &Path,
    welcome: Welcome<'static>,
    connections: usize,
    serve: impl Fn(WorkerEnd) + Send + 'static,
) -> (PathBuf, JoinHandle<()>) {
    let path = dir.join("worker.sock");
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let handle = std::thread::spawn(move || {
        for _ in 0..connections {
            let Ok((stream, _)) = listener.accept() else { return };
            let mut end = WorkerEnd::new(stream);
            let Some(hello) = end.read() else { continue };
            assert_eq!(hello.header.kind, triton_tritonrt::wire::KIND_HELLO);
            end.send(Header::default(), &Body::Welcome(welcome.clone()), &[]);
            serve(end);
        }
    });
    (path, handle)
}

pub fn welcome(inline_threshold: u32, region_limit: u64) -> Welcome<'static> {
    Welcome { worker_pid: 1, inline_threshold, spin_us: 0, region_limit, worker_version: "test" }
}

pub fn target(socket: PathBuf, decoupled: bool) -> Target {
    Target {
        model_name: "m".into(),
        instance_index: 0,
        max_batch_size: 8,
        decoupled,
        sequence: false,
        socket,
        token: TOKEN.into(),
        owner: sys::effective_uid(),
        api_version: (1, 19),
    }
}

pub fn executor(socket: PathBuf, decoupled: bool) -> Executor {
    Executor::new(target(socket, decoupled))
}

/// A fresh temporary directory for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tritonrt-native-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
