//! A mutation fuzzer for everything the backend reads from its peer or from files: message headers and
//! bodies (from valid seeds: the golden messages and replies of every shape), the model configuration JSON and
//! the connection file; METRICS messages, whose accepted updates must be checked ones that encode back the same;
//! then whole replies, some after METRICS, through the executor. Nothing may panic or hang, and every request
//! gets exactly one answer. Seeded, so a failure reproduces: TRITONRT_FUZZ_SEED, TRITONRT_FUZZ_ITERATIONS.

mod support;

use std::borrow::Cow;
use std::io::Write;
use std::net::Shutdown;

use support::*;
use triton_tritonrt::config::{Connection, ModelConfig};
use triton_tritonrt::dtype::DataType;
use triton_tritonrt::json;
use triton_tritonrt::wire::{
    decode_body, encode, Body, Header, Metric, Response, Tensor, FLAG_FINAL, HEADER_SIZE, KIND_METRICS,
    LOCATION_INLINE, LOCATION_RECEIVER_REGION, LOCATION_SENDER_REGION, MAX_BUCKETS, MAX_LABELS, METRIC_ADD,
    METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM, METRIC_OBSERVE, METRIC_SET,
};

/// xorshift64*: small, seeded, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn from_env() -> Rng {
        let seed =
            std::env::var("TRITONRT_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_1234_abcd_ef01);
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn iterations(default: usize) -> usize {
    std::env::var("TRITONRT_FUZZ_ITERATIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

const INTERESTING: [u64; 10] = [0, 1, 2, 0x7f, 0xff, 0xffff, 0x7fff_ffff, 0xffff_ffff, 1 << 62, u64::MAX];

/// One random mutation of `bytes`.
fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    match rng.below(8) {
        0 if !bytes.is_empty() => {
            let at = rng.below(bytes.len());
            bytes[at] ^= 1 << rng.below(8);
        }
        1 if !bytes.is_empty() => {
            let at = rng.below(bytes.len());
            bytes[at] = rng.next() as u8;
        }
        2 if bytes.len() >= 8 => {
            // An interesting integer over a 4- or 8-byte field (counts, lengths, offsets, dims).
            let width = if rng.below(2) == 0 { 4 } else { 8 };
            let at = rng.below(bytes.len() - width + 1);
            let value = INTERESTING[rng.below(INTERESTING.len())].wrapping_add(rng.below(3) as u64).wrapping_sub(1);
            bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        }
        3 => bytes.truncate(rng.below(bytes.len() + 1)),
        4 => {
            let extra = rng.below(64);
            bytes.extend((0..extra).map(|_| rng.next() as u8));
        }
        5 if !bytes.is_empty() => {
            let start = rng.below(bytes.len());
            let end = (start + rng.below(32)).min(bytes.len());
            let copy = bytes[start..end].to_vec();
            let at = rng.below(bytes.len());
            bytes.splice(at..at, copy);
        }
        6 if bytes.len() > HEADER_SIZE => {
            // Keep the header's lengths consistent with the mutated body, so the body decoder is reached.
            let meta = (bytes.len() - HEADER_SIZE) as u32;
            bytes[40..44].copy_from_slice(&meta.min(rng.next() as u32 % (meta + 1)).to_le_bytes());
        }
        _ => {
            let at = rng.below(bytes.len() + 1);
            bytes.insert(at, rng.next() as u8);
        }
    }
}

fn golden_seeds() -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "bin"))
        .map(|path| std::fs::read(path).unwrap())
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 9);
    seeds
}

/// The golden METRICS message.
fn golden_metrics() -> Vec<u8> {
    std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/metrics.bin")).unwrap()
}

/// Decode `bytes` as the backend does: header, then the body when its metadata is there. Which stage it
/// reached: 0 refused header, 1 refused body, 2 decoded.
fn decode_like_the_backend(bytes: &[u8]) -> usize {
    let Some(head) = bytes.get(..HEADER_SIZE) else { return 0 };
    let Ok(header) = Header::decode(head.try_into().unwrap()) else { return 0 };
    let meta_end = HEADER_SIZE + header.meta_length as usize;
    match bytes.get(HEADER_SIZE..meta_end).map(|meta| decode_body(&header, meta)) {
        Some(Ok(_)) => 2,
        _ => 1,
    }
}

#[test]
fn hostile_messages_never_panic_the_decoder() {
    let mut rng = Rng::from_env();
    let seeds = golden_seeds();
    let mut reached = [0usize; 3];
    let count = iterations(100_000);
    for _ in 0..count {
        let mut bytes = seeds[rng.below(seeds.len())].clone();
        for _ in 0..=rng.below(4) {
            mutate(&mut rng, &mut bytes);
        }
        reached[decode_like_the_backend(&bytes)] += 1;
    }
    // The mutations must exercise the body decoder, both ways, not just bounce off the header check.
    assert!(reached[1] > count / 20 && reached[2] > count / 20, "stages reached: {reached:?}");
}

/// What the decoder promises of a METRICS record it accepts (the backend hands these to Triton unchecked).
fn assert_checked(metric: &Metric<'_>) {
    let name_ok = |name: &str, colon: bool| {
        let ok = |byte: u8, first: bool| {
            byte.is_ascii_alphabetic() || byte == b'_' || (colon && byte == b':') || (!first && byte.is_ascii_digit())
        };
        name.bytes().enumerate().all(|(at, byte)| ok(byte, at == 0)) && !name.is_empty()
    };
    assert!(name_ok(metric.name, true), "{metric:?}");
    assert!(metric.value.is_finite(), "{metric:?}");
    match (metric.family_kind, metric.op) {
        (METRIC_COUNTER, METRIC_ADD) => assert!(metric.value >= 0.0, "{metric:?}"),
        (METRIC_GAUGE, METRIC_ADD | METRIC_SET) | (METRIC_HISTOGRAM, METRIC_OBSERVE) => {}
        _ => panic!("an operation its kind does not allow: {metric:?}"),
    }
    assert!(metric.labels.len() <= MAX_LABELS as usize, "{metric:?}");
    for (at, (key, _)) in metric.labels.iter().enumerate() {
        assert!(name_ok(key, false) && !key.starts_with("__"), "{metric:?}");
        assert!(metric.labels[..at].iter().all(|(seen, _)| seen != key), "{metric:?}");
    }
    if metric.family_kind == METRIC_HISTOGRAM {
        assert!((1..=MAX_BUCKETS as usize).contains(&metric.buckets.len()), "{metric:?}");
        assert!(metric.buckets.iter().all(|bound| bound.is_finite()), "{metric:?}");
        assert!(metric.buckets.windows(2).all(|pair| pair[0] < pair[1]), "{metric:?}");
    } else {
        assert!(metric.buckets.is_empty(), "{metric:?}");
    }
}

#[test]
fn hostile_metrics_messages_decode_only_to_checked_updates_that_encode_back_the_same() {
    let mut rng = Rng::from_env();
    let seed = golden_metrics();
    let (mut decoded, count) = (0, iterations(100_000) / 2);
    for _ in 0..count {
        let mut bytes = seed.clone();
        for _ in 0..=rng.below(3) {
            mutate(&mut rng, &mut bytes);
        }
        let Some(Ok(header)) = bytes.get(..HEADER_SIZE).map(|head| Header::decode(head.try_into().unwrap())) else {
            continue;
        };
        let Some(meta) = bytes.get(HEADER_SIZE..HEADER_SIZE + header.meta_length as usize) else { continue };
        let Ok(Body::Metrics(metrics)) = decode_body(&header, meta) else { continue };
        assert_eq!(header.kind, KIND_METRICS);
        metrics.iter().for_each(assert_checked);
        // What decodes encodes to a message that decodes to the same updates.
        let body = Body::Metrics(metrics);
        let mut again = Vec::new();
        encode(&Header { seq: header.seq, ..Header::default() }, &body, &[], &mut again);
        let head = Header::decode(again[..HEADER_SIZE].try_into().unwrap()).unwrap();
        let meta = &again[HEADER_SIZE..HEADER_SIZE + head.meta_length as usize];
        assert_eq!(decode_body(&head, meta).unwrap(), body);
        decoded += 1;
    }
    assert!(decoded > count / 50 && decoded < count, "decoded {decoded} of {count}");
}

#[test]
fn hostile_configuration_and_connection_files_never_panic() {
    let mut rng = Rng::from_env();
    let config = br#"{"name":"m","max_batch_size":8,"input":[{"name":"x","dims":["-1"]}],"model_transaction_policy":{"decoupled":true},"sequence_batching":{}}"#;
    let connection = b"tritonrt-connection 1\ntoken 0123456789abcdef0123456789abcdef\ninstances 2\nsocket 0 /tmp/a\nsocket 1 /tmp/b\n";
    for _ in 0..iterations(100_000) / 2 {
        let mut bytes = config.to_vec();
        mutate(&mut rng, &mut bytes);
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let _ = json::parse(text);
            let _ = ModelConfig::from_json(text);
        }
        let mut bytes = connection.to_vec();
        mutate(&mut rng, &mut bytes);
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let _ = Connection::parse(text, 0);
        }
    }
}

/// A valid final reply to a batch of `count` requests: inline, regional (ours and the backend's) and BYTES
/// outputs, an error and an empty response.
fn valid_reply(seq: u64, count: usize, backend_region: u32) -> Vec<u8> {
    let mut data = Vec::new();
    data.extend_from_slice(&1.5f32.to_le_bytes());
    data.extend_from_slice(&[0; 60]);
    data.extend_from_slice(&2u32.to_le_bytes());
    data.extend_from_slice(b"ok");
    let fp32 = |offset, location| Tensor {
        name: "Y",
        dtype: DataType::Fp32,
        location,
        offset,
        byte_length: 4,
        shape: Cow::Owned(vec![1]),
    };
    let responses = (0..count)
        .map(|index| match index % 3 {
            0 => Response::Outputs(vec![
                fp32(0, LOCATION_INLINE),
                fp32(0, LOCATION_RECEIVER_REGION),
                Tensor {
                    name: "S",
                    dtype: DataType::Bytes,
                    location: LOCATION_INLINE,
                    offset: 64,
                    byte_length: 6,
                    shape: Cow::Owned(vec![1]),
                },
            ]),
            1 => Response::Error { code: 3, message: "bad" },
            _ => Response::Outputs(vec![fp32(8, LOCATION_SENDER_REGION)]),
        })
        .collect();
    let header = Header { flags: FLAG_FINAL, seq, region_id: 0, peer_region_id: backend_region, ..Header::default() };
    let mut out = Vec::new();
    encode(&header, &Body::Reply(responses), &data, &mut out);
    out
}

#[test]
fn hostile_replies_never_panic_or_hang_the_executor_and_every_request_is_answered() {
    let dir = temp_dir("fuzz-executor");
    let rounds = (iterations(100_000) / 250).max(20);
    let metrics_seed = golden_metrics();
    let (socket, worker) = spawn_worker(&dir, welcome(256, 1 << 30), rounds, move |mut end| {
        let Some(batch) = end.read() else { return };
        let mut rng = Rng(batch.header.seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let Body::Batch(requests) = batch.body() else { return };
        let mut reply = valid_reply(batch.header.seq, requests.len(), batch.header.region_id);
        if rng.below(2) == 0 {
            // Metric updates first (the worker's METRICS before its answer), mutated with the reply.
            let mut metrics = metrics_seed.clone();
            metrics[16..24].copy_from_slice(&batch.header.seq.to_le_bytes());
            reply.splice(0..0, metrics);
        }
        for _ in 0..=rng.below(3) {
            mutate(&mut rng, &mut reply);
        }
        let _ = end.stream.write_all(&reply);
        // Whatever the backend makes of it, it must not wait for more: end the stream.
        let _ = end.stream.shutdown(Shutdown::Write);
        while end.read().is_some() {}
    });
    let mut executor = executor(socket, false);
    for round in 0..rounds {
        let requests = (0..3)
            .map(|index| FakeRequest::with(vec![FakeInput::fp32("X", &vec![index as f32; 1 + 100 * (index % 2)])]))
            .collect();
        let mut batch = FakeBatch::new(requests);
        executor.execute(&mut batch);
        batch.assert_all_answered();
        assert!(round < rounds);
    }
    drop(executor);
    // Some hostile replies leave the connection usable, so the worker may wait for more: let it finish.
    while !worker.is_finished() {
        let _ = std::os::unix::net::UnixStream::connect(dir.join("worker.sock"));
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    worker.join().unwrap();
}
