//! The ABI check of the benchmarks' floor backend (`bench/floor_backend`, in this repository only): it declares the
//! Triton functions it calls itself (linking this crate would export this crate's entry points beside its own), so
//! its declarations are checked against the vendored headers as `tests/abi.rs` checks the crate's.

use std::fmt::Write as _;

use super::{constants, entry_points, rust_functions};
use crate::{assert_signature, compile, have_gcc, prelude, Sources};

/// The floor's Triton functions (the `extern "C"` block of its triton.rs) and its entry point (lib.rs).
const FLOOR_FUNCTIONS: &[&str] = &[
    "TRITONSERVER_ErrorNew",
    "TRITONSERVER_ErrorDelete",
    "TRITONBACKEND_ModelInstanceModel",
    "TRITONBACKEND_ModelName",
    "TRITONBACKEND_ModelServer",
    "TRITONBACKEND_RequestInputByIndex",
    "TRITONBACKEND_InputProperties",
    "TRITONBACKEND_InputBuffer",
    "TRITONBACKEND_ResponseNew",
    "TRITONBACKEND_ResponseOutput",
    "TRITONBACKEND_OutputBuffer",
    "TRITONBACKEND_ResponseSend",
    "TRITONBACKEND_RequestRelease",
    "TRITONSERVER_ResponseAllocatorNew",
    "TRITONSERVER_InferenceRequestNew",
    "TRITONSERVER_InferenceRequestDelete",
    "TRITONSERVER_InferenceRequestAddInput",
    "TRITONSERVER_InferenceRequestAppendInputData",
    "TRITONSERVER_InferenceRequestAddRequestedOutput",
    "TRITONSERVER_InferenceRequestSetReleaseCallback",
    "TRITONSERVER_InferenceRequestSetResponseCallback",
    "TRITONSERVER_ServerInferAsync",
    "TRITONSERVER_InferenceResponseDelete",
    "TRITONSERVER_InferenceResponseError",
    "TRITONSERVER_InferenceResponseOutput",
    "TRITONBACKEND_ModelInstanceExecute",
];
/// The floor's constants and the header's names for them.
const FLOOR_CONSTANTS: &[(&str, &str)] = &[
    ("MEMORY_CPU", "TRITONSERVER_MEMORY_CPU"),
    ("RESPONSE_COMPLETE_FINAL", "TRITONSERVER_RESPONSE_COMPLETE_FINAL"),
    ("REQUEST_RELEASE_ALL", "TRITONSERVER_REQUEST_RELEASE_ALL"),
    ("ERROR_INTERNAL", "TRITONSERVER_ERROR_INTERNAL"),
];

/// The C file that checks the floor backend's declarations (bench/floor_backend declares Triton's functions itself:
/// linking this crate would export its entry points too), and the functions it read.
fn generate_floor(sources: &Sources) -> Result<(String, Vec<String>), String> {
    let origin = "bench/floor_backend/src";
    let mut c = prelude(&sources.headers);
    let mut read = Vec::new();
    for function in rust_functions(&sources.floor, false).into_iter().chain(entry_points(&sources.floor)) {
        assert_signature(&mut c, origin, &function)?;
        read.push(function.symbol);
    }
    let constants = constants(&sources.floor);
    for (rust, name) in FLOOR_CONSTANTS {
        let (_, value) =
            constants.iter().find(|(found, _)| found == rust).ok_or_else(|| format!("{origin}: no {rust}"))?;
        writeln!(c, "_Static_assert({value} == {name}, \"{origin}: {rust} = {value} does not match {name}\");")
            .expect("write to String");
    }
    Ok((c, read))
}

#[test]
fn the_floor_backends_declarations_match_tritons_headers() {
    let sources = Sources::read();
    let (c, read) = generate_floor(&sources).unwrap();
    assert_eq!(read, FLOOR_FUNCTIONS, "the reading of bench/floor_backend/src: update FLOOR_FUNCTIONS");
    if have_gcc() {
        compile(&c, "floor").unwrap_or_else(|errors| panic!("the floor's declarations do not match:\n{errors}"));
        let mut wrong = Sources::read();
        let declared = "fn TRITONSERVER_ErrorNew(code: u32,";
        assert!(wrong.floor.contains(declared), "{declared:?} is not in the floor's source any more");
        wrong.floor = wrong.floor.replacen(declared, "fn TRITONSERVER_ErrorNew(code: u64,", 1);
        let (c, _) = generate_floor(&wrong).unwrap();
        let errors = compile(&c, "floor-wrong").expect_err("a widened parameter of the floor must fail the check");
        assert!(errors.contains("TRITONSERVER_ErrorNew"), "{errors}");
    }
}
