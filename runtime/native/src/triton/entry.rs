//! The functions tritonserver calls: TRITONBACKEND_Initialize ... ModelInstanceExecute. Each catches
//! panics (a bug fails the call, never tritonserver) and turns errors into Triton error objects.

use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::ptr;
use std::sync::{Mutex, TryLockError};

use super::api::{
    self, api, Backend, Model, ModelInstance, Request, TritonError, API_MAJOR, API_MINOR, ARTIFACT_FILESYSTEM,
    LOG_ERROR, LOG_INFO,
};
use super::calls::TritonCalls;
use super::metrics::{self, InstanceMetrics};
use super::requests::TritonBatch;
use super::{check, log, new_error, text};
use crate::config::{instance_index, Connection, ModelConfig};
use crate::error::Error;
use crate::execute::{Executor, Target, BACKEND_VERSION};
use crate::json;
use crate::served::{Fit, Served};
use crate::sys;
use crate::wire::VERSION;

struct ModelState {
    config: ModelConfig,
    connection: Connection,
    api_version: (u32, u32),
}

struct InstanceState {
    decoupled: bool,
    executor: Mutex<Executor>,
}

/// Run an entry point's body; a panic or an error becomes a Triton error (code, "tritonrt backend: ...").
fn guarded(what: &str, body: impl FnOnce() -> Result<(), Error>) -> *mut TritonError {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ptr::null_mut(),
        Ok(Err(error)) => new_error(&error),
        Err(panic) => {
            let detail = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            new_error(&Error::internal(format!("tritonrt backend: internal error in {what}: {detail}")))
        }
    }
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_Initialize(_backend: *mut Backend) -> *mut TritonError {
    let api = match api::load() {
        Ok(api) => api,
        Err(error) => {
            // Without ErrorNew no error can be returned: say it on stderr, which tritonserver's log shows.
            eprintln!("{error}");
            return match catch_unwind(|| new_error(&error)) {
                Ok(error) => error,
                Err(_) => ptr::null_mut(),
            };
        }
    };
    guarded("TRITONBACKEND_Initialize", || {
        let (mut major, mut minor) = (0u32, 0u32);
        // SAFETY: out-pointers are locals.
        check(unsafe { (api.api_version)(&mut major, &mut minor) }).map_err(Error::internal)?;
        if major != API_MAJOR || minor < API_MINOR {
            return Err(Error::unsupported(format!(
                "tritonrt backend: this tritonserver has backend API {major}.{minor}; the backend needs \
                 {API_MAJOR}.{API_MINOR} or a later {API_MAJOR}.x (Triton 23.10 or newer)"
            )));
        }
        log(LOG_INFO, &format!("{BACKEND_VERSION} (wire protocol {VERSION}) on backend API {major}.{minor}"));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_Finalize(_backend: *mut Backend) -> *mut TritonError {
    guarded("TRITONBACKEND_Finalize", || {
        metrics::finalize(); // every instance is finalized: no executor reports any more
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInitialize(model: *mut Model) -> *mut TritonError {
    guarded("TRITONBACKEND_ModelInitialize", || {
        let api = api();
        let mut message = ptr::null_mut();
        // SAFETY: a live model; config version 1 is the JSON model configuration.
        check(unsafe { (api.model_config)(model, 1, &mut message) }).map_err(Error::internal)?;
        let (mut base, mut size) = (ptr::null::<c_char>(), 0usize);
        // SAFETY: a live message; base/size describe its JSON text until the message is deleted.
        let json = check(unsafe { (api.message_to_json)(message, &mut base, &mut size) }).map(|()| {
            // SAFETY: `base` holds `size` bytes (valid until message_delete below; copied first).
            String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(base.cast::<u8>(), size) }).into_owned()
        });
        // SAFETY: our message, deleted once.
        let _ = check(unsafe { (api.message_delete)(message) });
        let json = json.map_err(Error::internal)?;
        let config = ModelConfig::from_json(&json).map_err(Error::internal)?;
        let (mut kind, mut location) = (0u32, ptr::null::<c_char>());
        // SAFETY: a live model; the location string lives as long as the model (copied at once).
        check(unsafe { (api.model_repository)(model, &mut kind, &mut location) }).map_err(Error::internal)?;
        let location = unsafe { text(location) }.ok_or_else(|| Error::internal("the model has no repository path"))?;
        if kind != ARTIFACT_FILESYSTEM {
            return Err(Error::internal(format!("model {:?}: its repository is not a file system path", config.name)));
        }
        let connection = Connection::read(Path::new(location))
            .map_err(|e| Error::unavailable(format!("tritonrt backend: model {:?}: {e}", config.name)))?;
        check_served(model, Path::new(location), &config.name, &json)?;
        let (mut major, mut minor) = (0u32, 0u32);
        // SAFETY: out-pointers are locals.
        check(unsafe { (api.api_version)(&mut major, &mut minor) }).map_err(Error::internal)?;
        let state = Box::new(ModelState { config, connection, api_version: (major, minor) });
        // SAFETY: Triton keeps the pointer until ModelFinalize, which takes the box back.
        check(unsafe { (api.model_set_state)(model, Box::into_raw(state).cast()) }).map_err(Error::internal)
    })
}

/// Check the model's configuration against what its workers serve (a load with a config override may have
/// changed it; see `served.rs`), and complete one that has no inputs and outputs.
fn check_served(model: *mut Model, model_dir: &Path, name: &str, json: &str) -> Result<(), Error> {
    let refused = |e: String| Error::invalid(format!("tritonrt backend: model {name:?}: {e}"));
    let Some(served) = Served::read(model_dir).map_err(refused)? else {
        return Ok(());
    };
    let api = api();
    let mut complete = false;
    // SAFETY: a live model; the out-pointer is a local.
    check(unsafe { (api.model_auto_complete_config)(model, &mut complete) }).map_err(Error::internal)?;
    let config = json::parse(json).map_err(Error::internal)?;
    let Fit::Completed(text) = served.check(&config, complete).map_err(refused)? else {
        return Ok(());
    };
    let mut message = ptr::null_mut();
    // SAFETY: `text` outlives the call, which copies it into a new message (ours, deleted below).
    check(unsafe { (api.message_from_json)(&mut message, text.as_ptr().cast(), text.len()) })
        .map_err(Error::internal)?;
    // SAFETY: a live model and our message (Triton does not take it); config version 1 is the JSON config.
    let set = check(unsafe { (api.model_set_config)(model, 1, message) });
    // SAFETY: our message, deleted once.
    let _ = check(unsafe { (api.message_delete)(message) });
    set.map_err(|e| Error::internal(format!("tritonrt backend: model {name:?}: completing its config: {e}")))?;
    log(
        LOG_INFO,
        &format!("tritonrt backend: model {name:?}: its config had no inputs and outputs: completed as bound"),
    );
    Ok(())
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelFinalize(model: *mut Model) -> *mut TritonError {
    guarded("TRITONBACKEND_ModelFinalize", || {
        let mut state = ptr::null_mut();
        // SAFETY: a live model.
        check(unsafe { (api().model_state)(model, &mut state) }).map_err(Error::internal)?;
        if !state.is_null() {
            // SAFETY: the pointer came from Box::into_raw in ModelInitialize; its instances are finalized.
            drop(unsafe { Box::from_raw(state.cast::<ModelState>()) });
        }
        Ok(())
    })
}

/// The model state of a live model (set in ModelInitialize, alive until ModelFinalize, which Triton
/// calls after every instance is finalized).
fn model_state<'a>(model: *mut Model) -> Result<&'a ModelState, Error> {
    let mut state = ptr::null_mut();
    // SAFETY: a live model.
    check(unsafe { (api().model_state)(model, &mut state) }).map_err(Error::internal)?;
    // SAFETY: set from a Box<ModelState> in ModelInitialize and only read until ModelFinalize.
    unsafe { state.cast::<ModelState>().as_ref() }.ok_or_else(|| Error::internal("the model has no tritonrt state"))
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceInitialize(instance: *mut ModelInstance) -> *mut TritonError {
    guarded("TRITONBACKEND_ModelInstanceInitialize", || {
        let api = api();
        let (mut name, mut model) = (ptr::null(), ptr::null_mut());
        // SAFETY: a live instance; its name lives as long as it.
        check(unsafe { (api.instance_name)(instance, &mut name) }).map_err(Error::internal)?;
        check(unsafe { (api.instance_model)(instance, &mut model) }).map_err(Error::internal)?;
        let name = unsafe { text(name) }.unwrap_or("");
        let state = model_state(model)?;
        let index = instance_index(name, state.connection.sockets.len())
            .map_err(|e| Error::unsupported(format!("tritonrt backend: model {:?}: {e}", state.config.name)))?;
        let mut executor = Executor::new(Target {
            model_name: state.config.name.clone(),
            instance_index: index as u32,
            max_batch_size: state.config.max_batch_size,
            decoupled: state.config.decoupled,
            sequence: state.config.sequence,
            socket: state.connection.sockets[index].clone(),
            token: state.connection.token.clone(),
            owner: state.connection.owner,
            api_version: state.api_version,
        })
        .with_metrics(Box::new(InstanceMetrics::new(&state.config.name, name)));
        if let Some(model_server) = api.model_server {
            let mut server = ptr::null_mut();
            // SAFETY: a live model; out-pointer is a local.
            check(unsafe { model_server(model, &mut server) }).map_err(Error::internal)?;
            executor = executor
                .with_calls(Box::new(TritonCalls::new(server, &state.config.name)))
                .map_err(|e| Error::internal(format!("tritonrt backend: instance {name:?}: eventfd: {e}")))?;
        }
        executor.connect().map_err(|e| Error::unavailable(format!("tritonrt backend: instance {name:?}: {e}")))?;
        let state = Box::new(InstanceState { decoupled: state.config.decoupled, executor: Mutex::new(executor) });
        // SAFETY: Triton keeps the pointer until ModelInstanceFinalize, which takes the box back.
        check(unsafe { (api.instance_set_state)(instance, Box::into_raw(state).cast()) }).map_err(Error::internal)
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceFinalize(instance: *mut ModelInstance) -> *mut TritonError {
    guarded("TRITONBACKEND_ModelInstanceFinalize", || {
        let mut state = ptr::null_mut();
        // SAFETY: a live instance.
        check(unsafe { (api().instance_state)(instance, &mut state) }).map_err(Error::internal)?;
        if !state.is_null() {
            // SAFETY: from Box::into_raw in ModelInstanceInitialize; no Execute runs during finalization.
            drop(unsafe { Box::from_raw(state.cast::<InstanceState>()) });
        }
        Ok(())
    })
}

fn instance_state<'a>(instance: *mut ModelInstance) -> Option<&'a InstanceState> {
    let mut state = ptr::null_mut();
    // SAFETY: a live instance.
    check(unsafe { (api().instance_state)(instance, &mut state) }).ok()?;
    // SAFETY: set from a Box<InstanceState> and alive until ModelInstanceFinalize.
    unsafe { state.cast::<InstanceState>().as_ref() }
}

/// # Safety
/// Called by Triton with a live instance and `count` live requests, whose ownership passes to us (we
/// always return success, so Triton never touches them again).
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceExecute(
    instance: *mut ModelInstance,
    requests: *mut *mut Request,
    count: u32,
) -> *mut TritonError {
    let exec_start = sys::monotonic_ns();
    let requests: Vec<*mut Request> = if requests.is_null() || count == 0 {
        Vec::new()
    } else {
        // SAFETY: Triton passes an array of `count` request pointers, valid for this call; we copy it.
        unsafe { std::slice::from_raw_parts(requests, count as usize) }.to_vec()
    };
    let Some(state) = instance_state(instance) else {
        // Without our state no request can be answered here: return the error, Triton answers them.
        return new_error(&Error::internal("tritonrt backend: the instance has no state"));
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: per this function's contract; each request appears once in Triton's array.
        let mut batch = unsafe { TritonBatch::new(instance, &requests, state.decoupled, exec_start) };
        let mut executor = state.executor.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let timing = executor.execute(&mut batch);
        drop(executor);
        batch.complete(timing); // dropping the batch answers leftovers, reports statistics, releases
    }));
    if outcome.is_err() {
        // A bug unwound out of the executor (the batch's requests were answered and released on the way):
        // the connection may be mid-message, so the next batch starts on a new one.
        state.executor.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).disconnect();
        log(LOG_ERROR, "tritonrt backend: internal error while executing a batch; its requests failed");
    }
    ptr::null_mut()
}

/// Readiness (called by servers from Triton 25.12 on, from other threads, while Execute may run): the
/// instance is ready while its worker is connected or can be connected again.
#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceReady(instance: *mut ModelInstance) -> *mut TritonError {
    guarded("TRITONBACKEND_ModelInstanceReady", || {
        let state = instance_state(instance).ok_or_else(|| Error::internal("the instance has no state"))?;
        match state.executor.try_lock() {
            Ok(mut executor) => executor.ready(),
            Err(TryLockError::WouldBlock) => Ok(()), // executing a batch: connected
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner().ready(),
        }
        .map_err(|e| Error::unavailable(format!("tritonrt: {e}")))
    })
}

/// The wire protocol's constants as this library compiled them (`NAME = value` lines), for the tests that
/// check both implementations against the specification.
#[no_mangle]
pub extern "C" fn tritonrt_wire_constants() -> *const c_char {
    static TEXT: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| std::ffi::CString::new(crate::wire::constants_text()).expect("no NUL")).as_ptr()
}
