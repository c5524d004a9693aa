//! What a model tells the backend: its configuration (from Triton) and its connection file (from the
//! tritonrt process, in the model's directory of the repository; never in the configuration, which any
//! client can read through /v2/models/<name>/config).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::json::{self, Json};
use crate::sys;

/// The connection file's name in the model's directory.
pub const CONNECTION_FILE: &str = "tritonrt-connection";
const FIRST_LINE: &str = "tritonrt-connection 1";
const MAX_FILE_BYTES: u64 = 64 << 10;
/// sun_path holds 108 bytes with the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelConfig {
    pub name: String,
    pub max_batch_size: u32,
    pub decoupled: bool,
    /// A sequence model: requests carry correlation ids and sequence flags.
    pub sequence: bool,
}

impl ModelConfig {
    pub fn from_json(text: &str) -> Result<ModelConfig, String> {
        let config = json::parse(text).map_err(|e| format!("the model configuration is not JSON: {e}"))?;
        let name = config.get("name").and_then(Json::as_str).ok_or("the model configuration has no name")?.to_string();
        let max_batch_size = match config.get("max_batch_size") {
            None => 0,
            Some(value) => value
                .as_i64()
                .and_then(|size| u32::try_from(size).ok())
                .ok_or_else(|| format!("model {name:?}: max_batch_size {value:?} is not a count"))?,
        };
        let decoupled = config
            .get("model_transaction_policy")
            .and_then(|policy| policy.get("decoupled"))
            .and_then(Json::as_bool)
            .unwrap_or(false);
        let sequence = matches!(config.get("sequence_batching"), Some(Json::Object(_)));
        Ok(ModelConfig { name, max_batch_size, decoupled, sequence })
    }
}

/// Where the worker of each instance listens, and the token that proves we read the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub token: String,
    pub sockets: Vec<PathBuf>,
    /// The file's owner: the worker must run as this user.
    pub owner: u32,
}

impl Connection {
    /// Read `<model_dir>/tritonrt-connection`, refusing a file that others could have written or read.
    pub fn read(model_dir: &Path) -> Result<Connection, String> {
        let path = model_dir.join(CONNECTION_FILE);
        let shown = path.display();
        let meta = fs::symlink_metadata(&path).map_err(|e| {
            format!(
                "cannot read {shown}: {e}. The tritonrt process that serves this model writes it into the model \
                 repository; load models of backend \"tritonrt\" only from a repository that tritonrt wrote"
            )
        })?;
        if !meta.file_type().is_file() {
            return Err(format!("{shown} is not a regular file (a link or something else): refusing it"));
        }
        let me = sys::effective_uid();
        if meta.uid() != me && me != 0 {
            return Err(format!(
                "{shown} belongs to user {}, but tritonserver runs as user {me}: run tritonserver as the user of the \
                 tritonrt process",
                meta.uid()
            ));
        }
        if meta.mode() & 0o077 != 0 && !in_private_folder(model_dir, meta.uid()) {
            return Err(format!(
                "{shown} has mode {:o}: it must be readable and writable by its owner only (0600), or lie in a \
                 folder that only its owner can enter (0700, as Triton makes for a model uploaded through its \
                 repository API)",
                meta.mode() & 0o777
            ));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(format!("{shown} has {} bytes (limit {MAX_FILE_BYTES})", meta.len()));
        }
        let text = fs::read_to_string(&path).map_err(|e| format!("cannot read {shown}: {e}"))?;
        Connection::parse(&text, meta.uid()).map_err(|e| format!("{shown}: {e}"))
    }

    pub fn parse(text: &str, owner: u32) -> Result<Connection, String> {
        let mut lines = text.lines();
        if lines.next() != Some(FIRST_LINE) {
            return Err(format!(
                "the first line is not {FIRST_LINE:?}: the file was written by another tritonrt release; install the \
                 runtime and its backend from the same release"
            ));
        }
        let mut token = None;
        let mut count = None;
        let mut sockets: Vec<Option<PathBuf>> = Vec::new();
        for line in lines.filter(|line| !line.trim().is_empty()) {
            let mut fields = line.splitn(3, ' ');
            match (fields.next(), fields.next(), fields.next()) {
                (Some("token"), Some(value), None) => {
                    if value.len() < 32 || value.len() > 128 || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err("the token must be 32 to 128 hexadecimal digits".into());
                    }
                    token = Some(value.to_string());
                }
                (Some("instances"), Some(value), None) => {
                    let n: usize = value.parse().map_err(|_| format!("bad instance count {value:?}"))?;
                    if n == 0 || n > 4096 {
                        return Err(format!("instance count {n} is not between 1 and 4096"));
                    }
                    count = Some(n);
                    sockets = vec![None; n];
                }
                (Some("socket"), Some(index), Some(path)) => {
                    let index: usize = index.parse().map_err(|_| format!("bad socket index {index:?}"))?;
                    let slot =
                        sockets.get_mut(index).ok_or_else(|| format!("socket {index} is past the instance count"))?;
                    if !path.starts_with('/') || path.len() > MAX_SOCKET_PATH || path.contains('\0') {
                        return Err(format!(
                            "socket {index}: {path:?} is not an absolute path of at most {MAX_SOCKET_PATH} bytes"
                        ));
                    }
                    if slot.replace(PathBuf::from(path)).is_some() {
                        return Err(format!("socket {index} is listed twice"));
                    }
                }
                _ => return Err(format!("cannot read the line {line:?}")),
            }
        }
        let token = token.ok_or("no token line")?;
        count.ok_or("no instances line")?;
        let sockets = sockets
            .into_iter()
            .enumerate()
            .map(|(index, path)| path.ok_or_else(|| format!("no socket line for instance {index}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Connection { token, sockets, owner })
    }
}

/// The instance index of a Triton instance name: `<group>_<index>` (tritonrt writes one instance group).
/// True when `dir` or a folder above it belongs to `owner` and no one else may enter it (mode 0700 or
/// stricter): then no other user can reach a file inside, whatever the file's own mode. Triton writes the files
/// of a model uploaded with the repository API's load into such a folder (`mkdtemp`), with the mode its umask
/// gives (usually 0644).
fn in_private_folder(dir: &Path, owner: u32) -> bool {
    dir.ancestors().any(|folder| match fs::symlink_metadata(folder) {
        Ok(meta) => meta.file_type().is_dir() && meta.uid() == owner && meta.mode() & 0o077 == 0,
        Err(_) => false,
    })
}

pub fn instance_index(instance_name: &str, count: usize) -> Result<usize, String> {
    let suffix = instance_name.rsplit('_').next().unwrap_or("");
    match suffix.parse::<usize>() {
        Ok(index) if index < count => Ok(index),
        _ => Err(format!(
            "instance {instance_name:?} has no index below {count}: the model was bound with {count} inference \
             callable(s), one per instance, so its workers serve at most {count} instance(s) of one instance group; \
             ask for at most {count} (in a load with a config override too), or bind it with more callables \
             (Triton.bind(name, [infer] * n, ...)) and restart"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn model_config_fields() {
        let config = ModelConfig::from_json(
            r#"{"name":"m","max_batch_size":8,"model_transaction_policy":{"decoupled":true},"sequence_batching":{}}"#,
        )
        .unwrap();
        assert_eq!(config, ModelConfig { name: "m".into(), max_batch_size: 8, decoupled: true, sequence: true });
        let config = ModelConfig::from_json(r#"{"name":"m"}"#).unwrap();
        assert!(!config.decoupled && !config.sequence && config.max_batch_size == 0);
        assert!(ModelConfig::from_json(r#"{"name":"m","max_batch_size":-1}"#).is_err());
    }

    #[test]
    fn connection_file_is_parsed_strictly() {
        let text =
            format!("tritonrt-connection 1\ntoken {TOKEN}\ninstances 2\nsocket 1 /tmp/b.sock\nsocket 0 /tmp/a.sock\n");
        let connection = Connection::parse(&text, 5).unwrap();
        assert_eq!(connection.sockets, vec![PathBuf::from("/tmp/a.sock"), PathBuf::from("/tmp/b.sock")]);
        assert_eq!(connection.owner, 5);
        for (bad, why) in [
            (text.replace("connection 1", "connection 2"), "release"),
            (text.replace("socket 0 /tmp/a.sock\n", ""), "no socket line for instance 0"),
            (text.replace("socket 1", "socket 0"), "twice"),
            (text.replace("/tmp/a.sock", "relative.sock"), "absolute"),
            (text.replace(TOKEN, "xyz"), "hexadecimal"),
            (text.replace("instances 2", "instances 0"), "between"),
            (format!("{text}extra line\n"), "cannot read"),
        ] {
            let error = Connection::parse(&bad, 0).unwrap_err();
            assert!(error.contains(why), "{error}");
        }
    }

    #[test]
    fn connection_file_permissions_are_checked() {
        let dir = std::env::temp_dir().join(format!("tritonrt-config-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(CONNECTION_FILE);
        fs::write(&path, format!("tritonrt-connection 1\ntoken {TOKEN}\ninstances 1\nsocket 0 /tmp/a.sock\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Connection::read(&dir).unwrap_err().contains("0600"));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(Connection::read(&dir).unwrap().sockets.len(), 1);
        fs::remove_dir_all(&dir).unwrap();
        assert!(Connection::read(&dir).unwrap_err().contains("cannot read"));
    }

    #[test]
    fn a_connection_file_in_a_private_folder_may_have_any_mode() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("tritonrt-config-upload-{}", std::process::id()));
        let dir = root.join("model");
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.join(CONNECTION_FILE);
        fs::write(&path, format!("tritonrt-connection 1\ntoken {TOKEN}\ninstances 1\nsocket 0 /tmp/a.sock\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Connection::read(&dir).unwrap_err().contains("0700"));
        // Triton's upload: the model's files in a folder of mode 0700 (mkdtemp), or below one.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(Connection::read(&dir).unwrap().sockets.len(), 1);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(Connection::read(&dir).unwrap().sockets.len(), 1);
        fs::set_permissions(&root, fs::Permissions::from_mode(0o750)).unwrap();
        assert!(Connection::read(&dir).is_err());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn instance_indices() {
        assert_eq!(instance_index("model_a_1", 2), Ok(1));
        assert!(instance_index("model_2", 2).is_err());
        assert!(instance_index("model", 2).is_err());
    }
}
