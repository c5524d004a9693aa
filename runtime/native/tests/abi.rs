//! The C ABI checked against the C headers, as ctest does for git2-rs, without a dependency: a C file generated
//! from the crate's own declarations, compiled by gcc, where a wrong declaration is a failed `_Static_assert`.
//!
//! Checked: every Triton function of `src/triton/api.rs`'s table and every entry point `src/triton/entry.rs`
//! exports, as function-pointer types, against `abi/triton/core/tritonserver.h` and `tritonbackend.h` (those of
//! the tritonserver we ship, see `abi/README.md`); the Triton constants the crate uses (api.rs, the wire's
//! error codes, the data type codes); and `src/sys.rs`: every libc function it declares, every `#[repr(C)]`
//! struct (size, alignment, each field's offset and type, against glibc's struct) and every constant, against
//! glibc's headers. A C mirror of each Rust struct (the same field types in order: `repr(C)` lays it out as C
//! does) is what is compared. gcc is needed: without it the check is skipped outside CI and fails under `CI`.
//!
//! What the sources' reading finds is checked against `tests/abi_source/expected.rs`, which names every function
//! of each source: a declaration the reading misses fails the check instead of going unchecked. A new declaration
//! adds its name there.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

mod abi_source;
use abi_source::{
    check_exact_sets, constants, data_types, entry_points, expected, repr_c_structs, rust_functions, table_functions,
    Function,
};

/// Exported entry points that the vendored headers (Triton 24.10) do not declare yet, and where they come from.
const NEWER_THAN_HEADERS: &[(&str, &str)] = &[("TRITONBACKEND_ModelInstanceReady", "Triton 25.12")];

/// The Rust names of Triton's opaque types and their C names.
const OPAQUE: &[(&str, &str)] = &[
    ("TritonError", "TRITONSERVER_Error"),
    ("TritonMessage", "TRITONSERVER_Message"),
    ("Backend", "TRITONBACKEND_Backend"),
    ("Model", "TRITONBACKEND_Model"),
    ("ModelInstance", "TRITONBACKEND_ModelInstance"),
    ("Request", "TRITONBACKEND_Request"),
    ("Input", "TRITONBACKEND_Input"),
    ("Response", "TRITONBACKEND_Response"),
    ("ResponseFactory", "TRITONBACKEND_ResponseFactory"),
    ("Output", "TRITONBACKEND_Output"),
    ("InferenceTrace", "TRITONSERVER_InferenceTrace"),
    ("MetricFamily", "TRITONSERVER_MetricFamily"),
    ("Metric", "TRITONSERVER_Metric"),
    ("MetricArgs", "TRITONSERVER_MetricArgs"),
    ("Parameter", "TRITONSERVER_Parameter"),
    ("Server", "TRITONSERVER_Server"),
    ("InferenceRequest", "TRITONSERVER_InferenceRequest"),
    ("InferenceResponse", "TRITONSERVER_InferenceResponse"),
    ("ResponseAllocator", "TRITONSERVER_ResponseAllocator"),
];

/// api.rs's callback types and the header's typedefs for them (checked where a function takes one).
const CALLBACKS: &[(&str, &str)] = &[
    ("AllocFn", "TRITONSERVER_ResponseAllocatorAllocFn_t"),
    ("ReleaseFn", "TRITONSERVER_ResponseAllocatorReleaseFn_t"),
    ("StartFn", "TRITONSERVER_ResponseAllocatorStartFn_t"),
    ("RequestReleaseFn", "TRITONSERVER_InferenceRequestReleaseFn_t"),
    ("ResponseCompleteFn", "TRITONSERVER_InferenceResponseCompleteFn_t"),
];

/// sys.rs's structs: their glibc struct and its fields, in the Rust struct's order.
const STRUCTS: &[(&str, &str, &[&str])] = &[
    ("IoVec", "struct iovec", &["iov_base", "iov_len"]),
    (
        "MsgHdr",
        "struct msghdr",
        &["msg_name", "msg_namelen", "msg_iov", "msg_iovlen", "msg_control", "msg_controllen", "msg_flags"],
    ),
    ("CmsgHdr", "struct cmsghdr", &["cmsg_len", "cmsg_level", "cmsg_type"]),
    ("PollFd", "struct pollfd", &["fd", "events", "revents"]),
    ("TimeSpec", "struct timespec", &["tv_sec", "tv_nsec"]),
    ("UCred", "struct ucred", &["pid", "uid", "gid"]),
];

/// api.rs's constants and the header's names for them (API_MINOR is a minimum: checked with `<=`).
const TRITON_CONSTANTS: &[(&str, &str)] = &[
    ("API_MAJOR", "TRITONBACKEND_API_VERSION_MAJOR"),
    ("MEMORY_CPU", "TRITONSERVER_MEMORY_CPU"),
    ("MEMORY_CPU_PINNED", "TRITONSERVER_MEMORY_CPU_PINNED"),
    ("MEMORY_GPU", "TRITONSERVER_MEMORY_GPU"),
    ("PARAMETER_STRING", "TRITONSERVER_PARAMETER_STRING"),
    ("PARAMETER_INT", "TRITONSERVER_PARAMETER_INT"),
    ("PARAMETER_BOOL", "TRITONSERVER_PARAMETER_BOOL"),
    ("PARAMETER_DOUBLE", "TRITONSERVER_PARAMETER_DOUBLE"),
    ("RESPONSE_COMPLETE_FINAL", "TRITONSERVER_RESPONSE_COMPLETE_FINAL"),
    ("REQUEST_RELEASE_ALL", "TRITONSERVER_REQUEST_RELEASE_ALL"),
    ("ARTIFACT_FILESYSTEM", "TRITONBACKEND_ARTIFACT_FILESYSTEM"),
    ("LOG_INFO", "TRITONSERVER_LOG_INFO"),
    ("LOG_WARN", "TRITONSERVER_LOG_WARN"),
    ("LOG_ERROR", "TRITONSERVER_LOG_ERROR"),
    ("LOG_VERBOSE", "TRITONSERVER_LOG_VERBOSE"),
    ("METRIC_KIND_COUNTER", "TRITONSERVER_METRIC_KIND_COUNTER"),
    ("METRIC_KIND_GAUGE", "TRITONSERVER_METRIC_KIND_GAUGE"),
    ("METRIC_KIND_HISTOGRAM", "TRITONSERVER_METRIC_KIND_HISTOGRAM"),
];

/// sys.rs's constants that are not glibc's.
const OWN_CONSTANTS: &[&str] = &["MAX_FDS"];

/// The crate's sources the check reads.
struct Sources {
    api: String,
    entry: String,
    sys: String,
    wire: String,
    dtype: String,
    /// The benchmarks' floor backend (bench/floor_backend, in this repository only: not vendored with the crate): its
    /// declarations (triton.rs), then its entry point (lib.rs).
    floor: String,
    /// The vendored headers' text.
    headers: Vec<String>,
}

impl Sources {
    fn read() -> Sources {
        let read = |path: &str| std::fs::read_to_string(crate_dir().join(path)).expect(path);
        Sources {
            api: read("src/triton/api.rs"),
            entry: read("src/triton/entry.rs"),
            sys: read("src/sys.rs"),
            wire: read("src/wire/mod.rs"),
            dtype: read("src/dtype.rs"),
            floor: read("../../bench/floor_backend/src/triton.rs") + &read("../../bench/floor_backend/src/lib.rs"),
            headers: vec![read("abi/triton/core/tritonserver.h"), read("abi/triton/core/tritonbackend.h")],
        }
    }
}

/// What the generated file checks.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    signatures: usize,
    layouts: usize,
    fields: usize,
    constants: usize,
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The C type of a Rust FFI type (pointer qualifiers written after the type, so they nest).
fn c_type(rust: &str) -> Result<String, String> {
    let rust = rust.trim();
    if let Some(inner) = rust.strip_prefix("*mut ") {
        return Ok(format!("{}*", c_type(inner)?));
    }
    if let Some(inner) = rust.strip_prefix("*const ") {
        return Ok(format!("{} const*", c_type(inner)?));
    }
    let base = match rust {
        "c_void" => "void",
        "c_char" => "char",
        "c_int" => "int",
        "c_uint" => "unsigned int",
        "c_long" => "long",
        "bool" => "_Bool",
        "u8" => "uint8_t",
        "u16" => "uint16_t",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        "f64" => "double",
        "i16" => "int16_t",
        "i32" => "int32_t",
        "i64" => "int64_t",
        "usize" => "size_t",
        "isize" => "ssize_t",
        "..." => "...",
        other => {
            if let Some((_, c)) = OPAQUE.iter().chain(CALLBACKS).find(|(name, _)| *name == other) {
                c
            } else if let Some((_, c, _)) = STRUCTS.iter().find(|(name, _, _)| *name == other) {
                c
            } else {
                return Err(format!("no C type known for the Rust type {other:?}: add it to abi.rs's tables"));
            }
        }
    };
    Ok(base.to_string())
}

/// `RET (*)(PARAMS)`.
fn pointer_type(function: &Function) -> Result<String, String> {
    let ret = function.ret.as_deref().map_or(Ok("void".to_string()), c_type)?;
    let params = function.params.iter().map(|param| c_type(param)).collect::<Result<Vec<_>, _>>()?;
    let params = if params.is_empty() { "void".to_string() } else { params.join(", ") };
    Ok(format!("{ret} (*)({params})"))
}

/// A static assertion that `symbol` has the function type of `function`, blamed on `origin`.
fn assert_signature(c: &mut String, origin: &str, function: &Function) -> Result<(), String> {
    let expected = pointer_type(function)?;
    let symbol = &function.symbol;
    writeln!(
        c,
        "_Static_assert(__builtin_types_compatible_p(__typeof__(&{symbol}), {expected}), \
         \"{origin}: {symbol} is declared as {expected}, which is not its type in the C header\");"
    )
    .expect("write to String");
    Ok(())
}

/// The C file's start: libc's headers, the typedefs C needs for Triton's opaque structs, Triton's headers.
fn prelude(headers: &[String]) -> String {
    let mut c = String::from(
        "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <fcntl.h>\n#include <poll.h>\n#include <sched.h>\n\
         #include <stddef.h>\n#include <stdint.h>\n#include <sys/eventfd.h>\n#include <sys/mman.h>\n#include <sys/socket.h>\n\
         #include <sys/stat.h>\n#include <sys/types.h>\n#include <sys/uio.h>\n#include <time.h>\n\
         #include <unistd.h>\n",
    );
    // The headers forward-declare their opaque structs (`struct TRITONSERVER_Error;`) and then name them
    // without `struct`, as C++ allows: C needs the typedefs first.
    for header in headers {
        for line in header.lines() {
            if let Some(name) = line.strip_prefix("struct ").and_then(|rest| rest.strip_suffix(';')) {
                writeln!(c, "typedef struct {name} {name};").expect("write to String");
            }
        }
    }
    c.push_str("#include \"triton/core/tritonbackend.h\"\n\n");
    c
}

/// The C file that checks every declaration of `sources`, and what it checks.
fn generate(sources: &Sources) -> Result<(String, Counts), String> {
    let mut counts = Counts::default();
    let mut c = prelude(&sources.headers);
    for function in table_functions(&sources.api) {
        assert_signature(&mut c, "src/triton/api.rs", &function)?;
        counts.signatures += 1;
    }
    for function in entry_points(&sources.entry) {
        if NEWER_THAN_HEADERS.iter().any(|(name, _)| *name == function.symbol) {
            continue;
        }
        assert_signature(&mut c, "src/triton/entry.rs", &function)?;
        counts.signatures += 1;
    }
    for function in rust_functions(&sources.sys, false) {
        assert_signature(&mut c, "src/sys.rs", &function)?;
        counts.signatures += 1;
    }
    for (name, fields) in repr_c_structs(&sources.sys) {
        let (_, c_struct, c_fields) = STRUCTS
            .iter()
            .find(|(rust, _, _)| *rust == name)
            .ok_or_else(|| format!("sys.rs's struct {name} has no glibc struct in abi.rs's STRUCTS"))?;
        if fields.len() != c_fields.len() {
            return Err(format!("sys.rs's struct {name} has {} fields, {c_struct} {}", fields.len(), c_fields.len()));
        }
        let mirror = format!("struct rust_{name}");
        writeln!(c, "{mirror} {{").expect("write to String");
        for (field, ty) in &fields {
            writeln!(c, "    {} {field};", c_type(ty)?).expect("write to String");
        }
        writeln!(c, "}};").expect("write to String");
        for (what, op) in [("size", "sizeof"), ("alignment", "_Alignof")] {
            writeln!(
                c,
                "_Static_assert({op}({mirror}) == {op}({c_struct}), \"src/sys.rs: the {what} of {name} is not {c_struct}'s\");"
            )
            .expect("write to String");
        }
        for ((field, ty), c_field) in fields.iter().zip(c_fields.iter()) {
            let c_ty = c_type(ty)?;
            writeln!(
                c,
                "_Static_assert(offsetof({mirror}, {field}) == offsetof({c_struct}, {c_field}), \
                 \"src/sys.rs: {name}.{field} is not at the offset of {c_struct}.{c_field}\");\n\
                 _Static_assert(__builtin_types_compatible_p(__typeof__((({c_struct}*)0)->{c_field}), {c_ty}), \
                 \"src/sys.rs: {name}.{field} is {c_ty}, which is not the type of {c_struct}.{c_field}\");"
            )
            .expect("write to String");
            counts.fields += 1;
        }
        counts.layouts += 1;
    }
    let mut assert_constant = |c: &mut String, origin: &str, rust: &str, value: &str, op: &str, name: &str| {
        writeln!(c, "_Static_assert({value} {op} {name}, \"{origin}: {rust} = {value} does not match {name}\");")
            .expect("write to String");
        counts.constants += 1;
    };
    let api_constants = constants(&sources.api);
    let value_of = |name: &str| {
        api_constants
            .iter()
            .find(|(rust, _)| rust == name)
            .map(|(_, value)| value.clone())
            .ok_or_else(|| format!("api.rs has no constant {name}"))
    };
    for (rust, name) in TRITON_CONSTANTS {
        assert_constant(&mut c, "src/triton/api.rs", rust, &value_of(rust)?, "==", name);
    }
    assert_constant(
        &mut c,
        "src/triton/api.rs",
        "API_MINOR",
        &value_of("API_MINOR")?,
        "<=",
        "TRITONBACKEND_API_VERSION_MINOR",
    );
    for (rust, value) in constants(&sources.wire).iter().filter(|(name, _)| name.starts_with("ERROR_")) {
        assert_constant(&mut c, "src/wire/mod.rs", rust, value, "==", &format!("TRITONSERVER_{rust}"));
    }
    for (variant, code) in data_types(&sources.dtype) {
        let name = format!("TRITONSERVER_TYPE_{}", variant.to_uppercase());
        assert_constant(&mut c, "src/dtype.rs", &format!("DataType::{variant}"), &code, "==", &name);
    }
    for (rust, value) in constants(&sources.sys).iter().filter(|(name, _)| !OWN_CONSTANTS.contains(&name.as_str())) {
        assert_constant(&mut c, "src/sys.rs", rust, value, "==", rust);
    }
    Ok((c, counts))
}

/// Compile `c` with gcc against the vendored Triton headers; the error is gcc's output.
fn compile(c: &str, name: &str) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("tritonrt-abi-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("abi_check.c");
    std::fs::write(&file, c).expect("write the C file");
    let output = Command::new("gcc")
        .args(["-std=gnu11", "-fsyntax-only", "-Werror", "-I"])
        .arg(crate_dir().join("abi"))
        .arg(&file)
        .output()
        .expect("run gcc");
    std::fs::remove_dir_all(&dir).ok();
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// Whether gcc can run; without it the check skips outside CI and fails under `CI`.
fn have_gcc() -> bool {
    let found = Command::new("gcc").arg("--version").output().is_ok_and(|output| output.status.success());
    if !found {
        assert!(std::env::var_os("CI").is_none(), "gcc is not installed: the ABI check needs it (apt-get install gcc)");
        eprintln!("skipped: gcc is not installed (apt-get install gcc); the ABI check needs it");
    }
    found
}

#[test]
fn every_declaration_matches_tritons_headers_and_glibc() {
    if !have_gcc() {
        return;
    }
    let (c, counts) = generate(&Sources::read()).unwrap();
    compile(&c, "all").unwrap_or_else(|errors| panic!("the declarations do not match the C headers:\n{errors}"));
    println!(
        "ABI check: {} signatures, {} struct layouts ({} fields), {} constants",
        counts.signatures, counts.layouts, counts.fields, counts.constants
    );
    // Every function of the table, every Triton entry point the headers declare and every libc function: each
    // list of expected.rs is what its source declares (every_declared_function_is_read).
    let signatures =
        expected::TABLE.len() + expected::ENTRY_POINTS.len() - NEWER_THAN_HEADERS.len() + expected::LIBC.len();
    assert_eq!(counts.signatures, signatures, "{counts:?}");
    assert_eq!(counts.layouts, STRUCTS.len(), "{counts:?}");
}

/// The reading of the sources finds exactly the functions `expected.rs` lists (gcc is not needed).
#[test]
fn every_declared_function_is_read() {
    let sources = Sources::read();
    check_exact_sets(&sources.api, &sources.entry, &sources.sys).unwrap_or_else(|problems| panic!("{problems}"));
}

/// A declaration the reading misses, or one the lists lack, fails the set check, naming the function.
#[test]
fn a_missed_or_unlisted_function_fails_the_set_check() {
    let cases = [
        Mismatch {
            what: "a table entry split over two lines, which the reading does not match",
            file: |s| &mut s.api,
            from: "error_delete: \"TRITONSERVER_ErrorDelete\" => fn(",
            to: "error_delete: \"TRITONSERVER_ErrorDelete\" =>\n        fn(",
            named: "did not find [\"TRITONSERVER_ErrorDelete\"]",
        },
        Mismatch {
            what: "a libc function no list names",
            file: |s| &mut s.sys,
            from: "    fn geteuid() -> u32;\n",
            to: "    fn geteuid() -> u32;\n    fn getppid() -> c_int;\n",
            named: "\"getppid\"",
        },
    ];
    for case in cases {
        let mut sources = Sources::read();
        let text = (case.file)(&mut sources);
        assert!(text.contains(case.from), "{}: {:?} is not in the source any more", case.what, case.from);
        *text = text.replacen(case.from, case.to, 1);
        let problems = check_exact_sets(&sources.api, &sources.entry, &sources.sys).expect_err(case.what);
        assert!(problems.contains(case.named), "{}: the problems do not say {:?}:\n{problems}", case.what, case.named);
    }
}

/// Each deliberate mismatch fails the check, and gcc names the declaration.
#[test]
fn a_wrong_declaration_fails_the_check() {
    if !have_gcc() {
        return;
    }
    let mismatches = [
        Mismatch {
            what: "a parameter of the table widened",
            file: |s| &mut s.api,
            from: "fn(u32, *const c_char) -> *mut TritonError;",
            to: "fn(u64, *const c_char) -> *mut TritonError;",
            named: "TRITONSERVER_ErrorNew",
        },
        Mismatch {
            what: "a constness lost",
            file: |s| &mut s.api,
            from: "fn(*mut Request, *mut *const c_char) -> *mut TritonError;",
            to: "fn(*mut Request, *mut *mut c_char) -> *mut TritonError;",
            named: "TRITONBACKEND_RequestId",
        },
        Mismatch {
            what: "an entry point's parameter",
            file: |s| &mut s.entry,
            from: "    count: u32,\n",
            to: "    count: u64,\n",
            named: "TRITONBACKEND_ModelInstanceExecute",
        },
        Mismatch { what: "a libc function", file: |s| &mut s.sys, from: "nfds: u64", to: "nfds: u32", named: "poll" },
        Mismatch {
            what: "a struct field",
            file: |s| &mut s.sys,
            from: "    name_len: u32,",
            to: "    name_len: usize,",
            named: "MsgHdr.name_len",
        },
        Mismatch {
            what: "a constant",
            file: |s| &mut s.sys,
            from: "SO_PEERCRED: c_int = 17",
            to: "SO_PEERCRED: c_int = 18",
            named: "SO_PEERCRED",
        },
    ];
    for mismatch in mismatches {
        let mut sources = Sources::read();
        let text = (mismatch.file)(&mut sources);
        assert!(text.contains(mismatch.from), "{}: {:?} is not in the source any more", mismatch.what, mismatch.from);
        *text = text.replacen(mismatch.from, mismatch.to, 1);
        let (c, _) = generate(&sources).unwrap();
        let errors = compile(&c, "mismatch").expect_err(mismatch.what);
        assert!(
            errors.contains(mismatch.named),
            "{}: gcc's errors do not name {}:\n{errors}",
            mismatch.what,
            mismatch.named
        );
    }
}

/// A deliberate mismatch: `from` replaced by `to` in one source file; the error (gcc's, or the set check's) must
/// name `named`.
struct Mismatch {
    what: &'static str,
    file: fn(&mut Sources) -> &mut String,
    from: &'static str,
    to: &'static str,
    named: &'static str,
}

#[test]
fn the_vendored_headers_are_the_shipped_servers() {
    let readme = std::fs::read_to_string(crate_dir().join("abi/README.md")).unwrap();
    let backend = std::fs::read_to_string(crate_dir().join("abi/triton/core/tritonbackend.h")).unwrap();
    assert!(readme.contains("r24.10"), "abi/README.md names the release the headers come from");
    assert!(backend.contains("Redistribution and use in source and binary forms"), "the BSD-3 license header is kept");
    assert!(backend.contains("#define TRITONBACKEND_API_VERSION_MINOR 19"), "Triton 24.10's backend API is 1.19");
    assert!(Path::new(&crate_dir().join("abi/triton/core/tritonserver.h")).is_file());
}
