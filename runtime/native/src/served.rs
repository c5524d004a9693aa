//! What a model's workers can serve (`tritonrt-served.json`, written by the tritonrt process beside the
//! connection file), and the check of a model configuration against it.
//!
//! A load through Triton's repository API with a config override replaces the model's whole configuration;
//! the workers still run the callables as bound. The backend checks the new configuration in ModelInitialize:
//! the same inputs and outputs (or none, which it then completes from what was bound), a batch axis, streaming
//! and sequences as bound, one instance group of at most as many instances as there are bound callables. A
//! configuration that does not fit fails the load with a message that says what to change, and Triton keeps
//! serving the model as it was.

use std::fs;
use std::path::Path;

use crate::json::{self, Json};

/// The file's name in the model's directory.
pub const SERVED_FILE: &str = "tritonrt-served.json";
const MAX_FILE_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    pub max_instances: usize,
    pub batching: bool,
    pub decoupled: bool,
    pub sequence: bool,
    pub inputs: Vec<Json>,
    pub outputs: Vec<Json>,
}

/// What the check decided: the configuration fits as it is, or it has no inputs and outputs and gets them
/// (the JSON to hand `TRITONBACKEND_ModelSetConfig`).
#[derive(Debug, Clone, PartialEq)]
pub enum Fit {
    AsIs,
    Completed(String),
}

impl Served {
    /// Read `<model_dir>/tritonrt-served.json`; None when there is none (a repository written by an earlier
    /// tritonrt: no check).
    pub fn read(model_dir: &Path) -> Result<Option<Served>, String> {
        let path = model_dir.join(SERVED_FILE);
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        };
        if !meta.file_type().is_file() || meta.len() > MAX_FILE_BYTES {
            return Err(format!("{} is not a regular file of at most {MAX_FILE_BYTES} bytes", path.display()));
        }
        let text = fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Served::parse(&text).map(Some).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Served, String> {
        let value = json::parse(text)?;
        if value.get("version").and_then(Json::as_i64) != Some(1) {
            return Err("not version 1: install the runtime and its backend from the same release".into());
        }
        let flag = |key: &str| value.get(key).and_then(Json::as_bool).ok_or(format!("no {key:?} flag"));
        let tensors =
            |key: &str| value.get(key).and_then(Json::as_array).map(<[Json]>::to_vec).ok_or(format!("no {key:?} list"));
        let max_instances = value
            .get("max_instances")
            .and_then(Json::as_i64)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| *n > 0)
            .ok_or("no instance count")?;
        Ok(Served {
            max_instances,
            batching: flag("batching")?,
            decoupled: flag("decoupled")?,
            sequence: flag("sequence")?,
            inputs: tensors("input")?,
            outputs: tensors("output")?,
        })
    }

    /// Whether the workers can serve `config` (the model's configuration as Triton's JSON); `complete`:
    /// whether Triton lets the backend complete a configuration (auto-complete is on).
    pub fn check(&self, config: &Json, complete: bool) -> Result<Fit, String> {
        let mut problems = Vec::new();
        let max_batch_size = config.get("max_batch_size").and_then(Json::as_i64).unwrap_or(0);
        if (max_batch_size > 0) != self.batching {
            problems.push(if self.batching {
                "max_batch_size is 0, but the callable was bound with batching: its inputs carry a batch axis; \
                 keep max_batch_size above 0"
                    .to_string()
            } else {
                format!(
                    "max_batch_size is {max_batch_size}, but the callable was bound without batching \
                     (max_batch_size 0): its inputs carry no batch axis; keep max_batch_size 0"
                )
            });
        }
        let decoupled = config
            .get("model_transaction_policy")
            .and_then(|policy| policy.get("decoupled"))
            .and_then(Json::as_bool)
            .unwrap_or(false);
        if decoupled != self.decoupled {
            problems.push(format!(
                "model_transaction_policy.decoupled is {decoupled}, but the callable was bound as {}; keep it {}",
                if self.decoupled { "a streaming (decoupled) one" } else { "one that answers once per request" },
                self.decoupled
            ));
        }
        let sequence = matches!(config.get("sequence_batching"), Some(Json::Object(_)));
        if sequence != self.sequence {
            problems.push(format!(
                "the config {} sequence_batching, but the model was bound {} a sequence batcher; keep it as bound",
                if sequence { "has" } else { "has no" },
                if self.sequence { "with" } else { "without" }
            ));
        }
        let groups = config.get("instance_group").and_then(Json::as_array).unwrap_or(&[]);
        if groups.len() > 1 {
            problems.push(format!(
                "the config has {} instance groups; tritonrt serves one group of instances (one worker per bound \
                 callable): give one instance_group",
                groups.len()
            ));
        }
        let instances: i64 = groups.iter().map(group_instances).sum();
        if instances > self.max_instances as i64 {
            problems.push(format!(
                "the config asks for {instances} instances, but the model was bound with {max} callable(s), one \
                 per instance, so its workers serve at most {max} instance(s): ask for at most {max}, or bind it with {instances} \
                 callables (Triton.bind(name, [infer] * {instances}, ...)) and restart",
                max = self.max_instances
            ));
        }
        let inputs = config.get("input").and_then(Json::as_array).unwrap_or(&[]);
        let outputs = config.get("output").and_then(Json::as_array).unwrap_or(&[]);
        let completed = inputs.is_empty() && outputs.is_empty() && !(self.inputs.is_empty() && self.outputs.is_empty());
        if completed {
            if !complete {
                problems.push(
                    "the config has no inputs and outputs, and tritonserver runs with auto-complete off \
                     (--disable-auto-complete-config): give the model's inputs and outputs as bound"
                        .into(),
                );
            }
        } else {
            compare("input", &self.inputs, inputs, &mut problems);
            compare("output", &self.outputs, outputs, &mut problems);
        }
        if !problems.is_empty() {
            return Err(format!(
                "the new configuration does not fit the callable as bound, so the model keeps serving as it was: {}",
                problems.join("; ")
            ));
        }
        if !completed {
            return Ok(Fit::AsIs);
        }
        let mut text = format!("{{\"max_batch_size\":{max_batch_size},\"input\":");
        write_json(&Json::Array(self.inputs.clone()), &mut text);
        text.push_str(",\"output\":");
        write_json(&Json::Array(self.outputs.clone()), &mut text);
        text.push('}');
        Ok(Fit::Completed(text))
    }
}

/// The instances of one instance group: `count`, once per GPU listed for a group of kind KIND_GPU.
fn group_instances(group: &Json) -> i64 {
    let count = group.get("count").and_then(Json::as_i64).unwrap_or(1).max(0);
    let gpus = group.get("gpus").and_then(Json::as_array).map_or(0, <[Json]>::len) as i64;
    if group.get("kind").and_then(Json::as_str) == Some("KIND_GPU") && gpus > 0 {
        count * gpus
    } else {
        count
    }
}

/// What the worker sees of a tensor: its name, data type, shape, and whether it may be left out.
fn tensor_key(tensor: &Json) -> (String, String, Vec<i64>, bool) {
    let name = tensor.get("name").and_then(Json::as_str).unwrap_or("").to_string();
    let data_type = tensor.get("data_type").and_then(Json::as_str).unwrap_or("TYPE_INVALID").to_string();
    let dims = tensor.get("dims").and_then(Json::as_array).unwrap_or(&[]).iter().map(|d| d.as_i64().unwrap_or(0));
    let optional = tensor.get("optional").and_then(Json::as_bool).unwrap_or(false);
    (name, data_type, dims.collect(), optional)
}

fn compare(kind: &str, bound: &[Json], given: &[Json], problems: &mut Vec<String>) {
    let bound: Vec<_> = bound.iter().map(tensor_key).collect();
    let given: Vec<_> = given.iter().map(tensor_key).collect();
    let show = |(name, data_type, dims, optional): &(String, String, Vec<i64>, bool)| {
        format!("{name:?} {data_type} {dims:?}{}", if *optional { " optional" } else { "" })
    };
    for tensor in &given {
        match bound.iter().find(|b| b.0 == tensor.0) {
            None => problems.push(format!("{kind} {:?} is not one of the callable's {kind}s", tensor.0)),
            Some(b) if b != tensor => {
                problems.push(format!("{kind} {} was bound as {}", show(tensor), show(b)));
            }
            Some(_) => {}
        }
    }
    for tensor in &bound {
        if !given.iter().any(|g| g.0 == tensor.0) {
            problems.push(format!("{kind} {} is missing", show(tensor)));
        }
    }
}

/// `value` as JSON text.
pub fn write_json(value: &Json, out: &mut String) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(flag) => out.push_str(if *flag { "true" } else { "false" }),
        Json::Number(text) => out.push_str(text),
        Json::String(text) => write_string(text, out),
        Json::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_json(item, out);
            }
            out.push(']');
        }
        Json::Object(map) => {
            out.push('{');
            for (index, (key, item)) in map.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_json(item, out);
            }
            out.push('}');
        }
    }
}

fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVED: &str = r#"{"version": 1, "max_instances": 2, "batching": true, "decoupled": false, "sequence": false,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [-1]}]}"#;

    fn config(text: &str) -> Json {
        json::parse(text).unwrap()
    }

    const FITS: &str = r#"{"name":"m","max_batch_size":16,"instance_group":[{"name":"m_0","kind":"KIND_CPU","count":"2","gpus":[]}],
        "input":[{"name":"x","data_type":"TYPE_FP32","dims":["-1"],"optional":false,"format":"FORMAT_NONE"}],
        "output":[{"name":"y","data_type":"TYPE_FP32","dims":["-1"]}],"dynamic_batching":{}}"#;

    #[test]
    fn a_config_like_the_bound_one_fits_with_another_batch_size_and_fewer_instances() {
        let served = Served::parse(SERVED).unwrap();
        assert_eq!(served.check(&config(FITS), true), Ok(Fit::AsIs));
        assert_eq!(served.check(&config(&FITS.replace("\"2\"", "1")), false), Ok(Fit::AsIs));
    }

    #[test]
    fn a_config_without_tensors_is_completed_from_the_bound_ones() {
        let served = Served::parse(SERVED).unwrap();
        let Ok(Fit::Completed(text)) = served.check(&config(r#"{"name":"m","max_batch_size":"16"}"#), true) else {
            panic!("not completed")
        };
        let completed = json::parse(&text).unwrap();
        assert_eq!(completed.get("max_batch_size").and_then(Json::as_i64), Some(16));
        assert_eq!(completed.get("input").and_then(Json::as_array).unwrap(), &served.inputs[..]);
        assert_eq!(completed.get("output").and_then(Json::as_array).unwrap(), &served.outputs[..]);
        let error = served.check(&config(r#"{"name":"m","max_batch_size":16}"#), false).unwrap_err();
        assert!(error.contains("auto-complete"), "{error}");
    }

    #[test]
    fn what_the_callable_cannot_serve_is_refused_with_what_to_change() {
        let served = Served::parse(SERVED).unwrap();
        for (bad, why) in [
            (FITS.replace("\"count\":\"2\"", "\"count\":\"3\""), "at most 2"),
            (FITS.replace("\"gpus\":[]", "\"gpus\":[0,1]").replace("KIND_CPU", "KIND_GPU"), "asks for 4 instances"),
            (FITS.replace("\"max_batch_size\":16", "\"max_batch_size\":0"), "keep max_batch_size above 0"),
            (FITS.replace("\"name\":\"x\"", "\"name\":\"z\""), "input \"z\" is not one of"),
            (FITS.replace("\"name\":\"x\"", "\"name\":\"z\""), "input \"x\" TYPE_FP32 [-1] is missing"),
            (
                FITS.replace(
                    "\"TYPE_FP32\",\"dims\":[\"-1\"],\"optional\"",
                    "\"TYPE_INT32\",\"dims\":[\"-1\"],\"optional\"",
                ),
                "was bound as",
            ),
            (FITS.replace("\"dims\":[\"-1\"]}]", "\"dims\":[\"3\"]}]"), "output \"y\" TYPE_FP32 [3] was bound as"),
            (
                FITS.replace("\"dynamic_batching\":{}", "\"model_transaction_policy\":{\"decoupled\":true}"),
                "decoupled is true",
            ),
            (FITS.replace("\"dynamic_batching\":{}", "\"sequence_batching\":{}"), "sequence_batching"),
            (FITS.replace("\"instance_group\":[", "\"instance_group\":[{\"count\":1},"), "2 instance groups"),
        ] {
            let error = served.check(&config(&bad), true).unwrap_err();
            assert!(error.contains(why), "{why:?} not in {error}");
            assert!(error.contains("keeps serving as it was"), "{error}");
        }
    }

    #[test]
    fn the_file_is_read_strictly() {
        assert!(Served::parse(&SERVED.replace("\"version\": 1", "\"version\": 2")).unwrap_err().contains("release"));
        assert!(Served::parse(&SERVED.replace("\"max_instances\": 2", "\"max_instances\": 0")).is_err());
        assert!(Served::parse(&SERVED.replace("\"batching\": true,", "")).unwrap_err().contains("batching"));
        let mut text = String::new();
        write_json(&config(r#"{"a":["x\"y\\",1.5,true,null,{}]}"#), &mut text);
        assert_eq!(text, r#"{"a":["x\"y\\",1.5,true,null,{}]}"#);
    }
}
