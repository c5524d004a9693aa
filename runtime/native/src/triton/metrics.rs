//! Metrics on tritonserver's `/metrics`, through Triton's custom metrics API: the worker's METRICS updates
//! (the callable's metrics and tritonrt's own that the worker counts) and the executor's own per-instance
//! counters. One registry for the server process: a family per name, a metric per label set, created on first
//! use and deleted at TRITONBACKEND_Finalize (metrics before their families, as Triton requires).
//!
//! Nothing here fails a request: an update that cannot be applied (a name seen with another kind, description
//! or buckets; a server without the API) is logged once per family and dropped.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::Mutex;

use super::api::{self, api, LOG_WARN, PARAMETER_STRING};
use super::{check, log};
use crate::execute::MetricSink;
use crate::wire::{self, Metric as Update, METRIC_ADD, METRIC_COUNTER, METRIC_HISTOGRAM, METRIC_OBSERVE, METRIC_SET};

/// A Triton metric this registry created: Triton's object, alive until `finalize`.
#[derive(Clone, Copy)]
pub struct MetricHandle(*mut api::Metric);

// SAFETY: Triton's metric objects are thread-safe (prometheus-cpp updates atomically); the pointer stays valid
// until `finalize`, which runs at TRITONBACKEND_Finalize, after every instance (and its executor) is gone.
unsafe impl Send for MetricHandle {}
// SAFETY: as above: updates from several threads are Triton's to synchronize.
unsafe impl Sync for MetricHandle {}

impl MetricHandle {
    fn increment(self, value: f64) -> Result<(), String> {
        let increment = api().metric_increment.ok_or("no TRITONSERVER_MetricIncrement")?;
        // SAFETY: a live metric (see MetricHandle).
        check(unsafe { increment(self.0, value) })
    }
}

struct Family {
    kind: u8,
    description: String,
    buckets: Vec<f64>,
    pointer: *mut api::MetricFamily,
}

impl Family {
    /// Err unless `update` has this family's kind, description and buckets.
    fn check(&self, update: &Update<'_>) -> Result<(), String> {
        if self.kind == update.family_kind && self.description == update.description && self.buckets == update.buckets {
            return Ok(());
        }
        Err(format!(
            "it was registered as a {} with description {:?} and buckets {:?}, and an update now says a {} with \
             description {:?} and buckets {:?}: declare each name once, with one kind, description and buckets",
            kind_name(self.kind),
            self.description,
            self.buckets,
            kind_name(update.family_kind),
            update.description,
            update.buckets
        ))
    }
}

fn kind_name(kind: u8) -> &'static str {
    match kind {
        METRIC_COUNTER => "counter",
        wire::METRIC_GAUGE => "gauge",
        METRIC_HISTOGRAM => "histogram",
        _ => "metric of an unknown kind",
    }
}

#[derive(Default)]
struct Registry {
    families: HashMap<String, Family>,
    metrics: HashMap<(String, Vec<(String, String)>), MetricHandle>,
    /// Families already warned about (one warning each).
    warned: HashSet<String>,
}

// SAFETY: the raw family pointers are only used under the registry's mutex, and Triton's families may be used
// from any thread.
unsafe impl Send for Registry {}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// The metric of `update`'s family and labels, created on first use. Err: why it cannot be.
fn metric(registry: &mut Registry, update: &Update<'_>) -> Result<MetricHandle, String> {
    // Every update is checked against its family (not only the first of each label set): a counter's metric
    // must not take a gauge's update, nor a histogram's another's buckets.
    if let Some(family) = registry.families.get(update.name) {
        family.check(update)?;
    }
    let key = (update.name.to_string(), update.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    if let Some(found) = registry.metrics.get(&key) {
        return Ok(*found);
    }
    let api = api();
    let family = match registry.families.get(update.name) {
        Some(family) => family,
        None => {
            let new = api.metric_family_new.ok_or("this tritonserver has no custom metrics API")?;
            let (name, description) = (c_string(update.name), c_string(update.description));
            let mut pointer = ptr::null_mut();
            // SAFETY: out-pointer and NUL-terminated strings live for the call (Triton copies them); the kinds
            // share Triton's values (api::METRIC_KIND_*).
            check(unsafe { new(&mut pointer, u32::from(update.family_kind), name.as_ptr(), description.as_ptr()) })?;
            let family = Family {
                kind: update.family_kind,
                description: update.description.to_string(),
                buckets: update.buckets.clone(),
                pointer,
            };
            registry.families.entry(update.name.to_string()).or_insert(family)
        }
    };
    let labels: Vec<(CString, CString)> = update.labels.iter().map(|(k, v)| (c_string(k), c_string(v))).collect();
    let parameter_new = api.parameter_new.ok_or("no TRITONSERVER_ParameterNew")?;
    let parameter_delete = api.parameter_delete.ok_or("no TRITONSERVER_ParameterDelete")?;
    let parameters: Vec<*mut api::Parameter> = labels
        .iter()
        // SAFETY: a string parameter copies the NUL-terminated value (Triton's ParameterNew keeps its own copy).
        .map(|(key, value)| unsafe { parameter_new(key.as_ptr(), PARAMETER_STRING, value.as_ptr().cast::<c_void>()) })
        .collect();
    let created = new_metric(family, &parameters);
    for parameter in parameters.into_iter().filter(|parameter| !parameter.is_null()) {
        // SAFETY: ours, from ParameterNew; Triton copied the labels into the metric (or failed) already.
        unsafe { parameter_delete(parameter) };
    }
    let handle = MetricHandle(created?);
    registry.metrics.insert(key, handle);
    Ok(handle)
}

/// TRITONSERVER_MetricNew (or ...WithArgs for a histogram's buckets) with these labels.
fn new_metric(family: &Family, parameters: &[*mut api::Parameter]) -> Result<*mut api::Metric, String> {
    if parameters.iter().any(|parameter| parameter.is_null()) {
        return Err("Triton could not make a label".into());
    }
    let api = api();
    let labels = parameters.as_ptr().cast::<*const api::Parameter>().cast_mut();
    let count = parameters.len() as u64;
    let mut metric = ptr::null_mut();
    if family.kind != METRIC_HISTOGRAM {
        let new = api.metric_new.ok_or("no TRITONSERVER_MetricNew")?;
        // SAFETY: a live family; `labels` points at `count` live parameters, read during the call only.
        check(unsafe { new(&mut metric, family.pointer, labels, count) })?;
        return Ok(metric);
    }
    let missing = "this tritonserver has no histograms (TRITONSERVER_MetricNewWithArgs: Triton 24.05 or newer)";
    let (args_new, set_histogram, args_delete, new) = (
        api.metric_args_new.ok_or(missing)?,
        api.metric_args_set_histogram.ok_or(missing)?,
        api.metric_args_delete.ok_or(missing)?,
        api.metric_new_with_args.ok_or(missing)?,
    );
    let mut args = ptr::null_mut();
    // SAFETY: out-pointer.
    check(unsafe { args_new(&mut args) })?;
    // SAFETY: live args; the buckets are read during the call (Triton copies them).
    let mut result = check(unsafe { set_histogram(args, family.buckets.as_ptr(), family.buckets.len() as u64) });
    if result.is_ok() {
        // SAFETY: a live family, `count` live parameters and live args, all read during the call only.
        result = check(unsafe { new(&mut metric, family.pointer, labels, count, args) });
    }
    // SAFETY: ours, deleted once; the metric keeps what it needs.
    let _ = check(unsafe { args_delete(args) });
    result.map(|()| metric)
}

fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).expect("NULs removed")
}

fn update_one(registry: &mut Registry, update: &Update<'_>) -> Result<(), String> {
    let handle = metric(registry, update)?;
    let api = api();
    let result = match update.op {
        METRIC_ADD => return handle.increment(update.value),
        // SAFETY (both): a live metric of the kind the decoder matched to the operation.
        METRIC_SET => api.metric_set.map(|set| unsafe { set(handle.0, update.value) }),
        METRIC_OBSERVE => api.metric_observe.map(|observe| unsafe { observe(handle.0, update.value) }),
        _ => return Err(format!("unknown operation {}", update.op)),
    };
    check(result.ok_or("this tritonserver cannot set or observe metrics")?)
}

/// Apply the worker's updates, in order.
pub fn apply(updates: &[Update<'_>]) {
    let mut guard = REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let registry = guard.get_or_insert_with(Registry::default);
    for update in updates {
        if let Err(why) = update_one(registry, update) {
            if registry.warned.insert(update.name.to_string()) {
                log(LOG_WARN, &format!("tritonrt: metric {:?} is not published: {why}", update.name));
            }
        }
    }
}

/// A counter of tritonrt's own, created now at 0 (so that its series exists before the first event).
fn own_counter(name: &str, description: &str, labels: &[(&str, &str)]) -> Option<MetricHandle> {
    own_metric(METRIC_COUNTER, name, description, labels, Vec::new())
}

/// A metric of tritonrt's own (a counter at 0, or a histogram with `buckets`); None (warned once) when Triton
/// cannot make it.
fn own_metric(
    kind: u8,
    name: &str,
    description: &str,
    labels: &[(&str, &str)],
    buckets: Vec<f64>,
) -> Option<MetricHandle> {
    let op = if kind == METRIC_HISTOGRAM { METRIC_OBSERVE } else { METRIC_ADD };
    let update = Update { family_kind: kind, op, value: 0.0, name, description, labels: labels.to_vec(), buckets };
    let mut guard = REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let registry = guard.get_or_insert_with(Registry::default);
    match metric(registry, &update) {
        Ok(handle) => Some(handle),
        Err(why) => {
            if registry.warned.insert(name.to_string()) {
                log(LOG_WARN, &format!("tritonrt: metric {name:?} is not published: {why}"));
            }
            None
        }
    }
}

/// The BLS metrics of one caller and callee (`tritonrt_bls_*`, labelled `model` and `callee`), counted here as
/// each call ends: the worker's Python declares the same families (with the same descriptions and buckets) for
/// the calls that fail before they reach the backend.
#[derive(Clone, Copy)]
pub struct BlsMetrics {
    calls: Option<MetricHandle>,
    errors: Option<MetricHandle>,
    seconds: Option<MetricHandle>,
}

/// `tritonrt_bls_seconds`'s buckets: those of `tritonrt.bls.backend_api._SECONDS`.
pub const BLS_BUCKETS: [f64; 13] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

impl BlsMetrics {
    pub fn new(model: &str, callee: &str) -> BlsMetrics {
        let labels = [("model", model), ("callee", callee)];
        BlsMetrics {
            calls: own_counter("tritonrt_bls_calls_total", "Calls of other models (BLS)", &labels),
            errors: own_counter(
                "tritonrt_bls_errors_total",
                "Calls of other models (BLS) that ended in an error",
                &labels,
            ),
            seconds: own_metric(
                METRIC_HISTOGRAM,
                "tritonrt_bls_seconds",
                "Duration of calls of other models (BLS), to their last response",
                &labels,
                BLS_BUCKETS.to_vec(),
            ),
        }
    }

    /// Count one call that ended (from any thread: Triton's response threads). Nothing once `finalize` ran (a
    /// callee answering after the backend finalized): the registry's lock keeps the metrics alive meanwhile.
    pub fn ended(self, error: bool, seconds: f64) {
        let guard = REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if guard.is_none() {
            return;
        }
        if let Some(calls) = self.calls {
            let _ = calls.increment(1.0);
        }
        if let (true, Some(errors)) = (error, self.errors) {
            let _ = errors.increment(1.0);
        }
        if let (Some(seconds_metric), Some(observe)) = (self.seconds, api().metric_observe) {
            // SAFETY: a live histogram (the registry is not finalized: its lock is held).
            let _ = check(unsafe { observe(seconds_metric.0, seconds) });
        }
    }
}

/// The executor's metrics for one model instance: the worker's updates, and tritonrt's own counters.
pub struct InstanceMetrics {
    busy: Option<MetricHandle>,
    reconnects: Option<MetricHandle>,
    cancelled: Option<MetricHandle>,
    crash_reruns: Option<MetricHandle>,
    guilty: Option<MetricHandle>,
}

impl InstanceMetrics {
    pub fn new(model: &str, instance: &str) -> InstanceMetrics {
        let labels = [("model", model)];
        InstanceMetrics {
            busy: own_counter(
                "tritonrt_instance_busy_seconds_total",
                "Seconds each model instance spent on batches, from sending one to its worker to the final answer",
                &[("model", model), ("instance", instance)],
            ),
            reconnects: own_counter(
                "tritonrt_worker_reconnects_total",
                "Connections the backend made to a model instance's worker after its first (the worker restarted or \
                 dropped the connection)",
                &labels,
            ),
            cancelled: own_counter(
                "tritonrt_requests_cancelled_total",
                "Requests whose clients cancelled while their callable ran (the cancellation was passed to it)",
                &labels,
            ),
            crash_reruns: own_counter(
                "tritonrt_crash_reruns_total",
                "Requests run again, each alone, after the worker process died during their batch",
                &labels,
            ),
            guilty: own_counter(
                "tritonrt_crash_guilty_requests_total",
                "Requests that crashed the worker process again when run alone: they failed, and only they",
                &labels,
            ),
        }
    }
}

impl MetricSink for InstanceMetrics {
    fn apply(&self, updates: &[wire::Metric<'_>]) {
        apply(updates);
    }
    fn batch_done(&self, busy_ns: u64) {
        if let Some(busy) = self.busy {
            let _ = busy.increment(busy_ns as f64 / 1e9);
        }
    }
    fn reconnected(&self) {
        if let Some(reconnects) = self.reconnects {
            let _ = reconnects.increment(1.0);
        }
    }
    fn cancelled(&self, count: usize) {
        if let Some(cancelled) = self.cancelled {
            let _ = cancelled.increment(count as f64);
        }
    }
    fn rerun_after_crash(&self, count: usize) {
        if let Some(crash_reruns) = self.crash_reruns {
            let _ = crash_reruns.increment(count as f64);
        }
    }
    fn failed_as_guilty(&self) {
        if let Some(guilty) = self.guilty {
            let _ = guilty.increment(1.0);
        }
    }
}

/// Delete every metric, then every family (TRITONBACKEND_Finalize: no instance is left to use them).
pub fn finalize() {
    let mut guard = REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let Some(registry) = guard.take() else { return };
    let api = api();
    if let Some(delete) = api.metric_delete {
        for handle in registry.metrics.into_values() {
            // SAFETY: ours, from MetricNew; deleted once, before its family.
            let _ = check(unsafe { delete(handle.0) });
        }
    }
    if let Some(delete) = api.metric_family_delete {
        for family in registry.families.into_values() {
            // SAFETY: ours, from MetricFamilyNew; its metrics are deleted.
            let _ = check(unsafe { delete(family.pointer) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_update_must_agree_with_its_family() {
        let family = Family {
            kind: METRIC_HISTOGRAM,
            description: "d".into(),
            buckets: vec![0.5, 1.0],
            pointer: ptr::null_mut(),
        };
        let update = Update {
            family_kind: METRIC_HISTOGRAM,
            op: METRIC_OBSERVE,
            value: 0.7,
            name: "app_seconds",
            description: "d",
            labels: vec![("model", "m")],
            buckets: vec![0.5, 1.0],
        };
        assert_eq!(family.check(&update), Ok(()));
        let other_buckets = Update { buckets: vec![0.5, 2.0], ..update.clone() };
        let error = family.check(&other_buckets).unwrap_err();
        assert!(error.contains("registered as a histogram") && error.contains("[0.5, 2.0]"), "{error}");
        let gauge = Update { family_kind: wire::METRIC_GAUGE, op: METRIC_SET, buckets: vec![], ..update.clone() };
        assert!(family.check(&gauge).unwrap_err().contains("now says a gauge"));
        assert!(family.check(&Update { description: "e", ..update }).is_err());
    }
}
