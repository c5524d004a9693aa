//! Reading the crate's own Rust sources for the ABI check (`tests/abi.rs`): functions of the API table and of
//! `extern "C"` blocks and definitions, constants, `#[repr(C)]` structs and the data type codes, as text.
//! `expected` lists the functions each source declares, which the reading must find, no more, no fewer.
//! `floor` checks the benchmarks' floor backend (bench/floor_backend) the same way.

pub mod expected;
mod floor;

use std::collections::BTreeSet;

/// A function declared in Rust: its C name and its Rust parameter and return types.
pub struct Function {
    pub symbol: String,
    pub params: Vec<String>,
    pub ret: Option<String>,
}

/// Split `text` at commas outside brackets.
pub fn split_top(text: &str) -> Vec<String> {
    let (mut parts, mut depth, mut current) = (Vec::new(), 0i32, String::new());
    for c in text.chars() {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' | '>' | ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(current.trim().to_string());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.trim().is_empty() {
        parts.push(current.trim().to_string());
    }
    parts
}

/// `name: type` -> `type` (a bare type or `...` stays).
pub fn param_type(param: &str) -> String {
    match param.split_once(':') {
        Some((_, ty)) => ty.trim().to_string(),
        None => param.trim().to_string(),
    }
}

/// The text between the parenthesis at `open` and its match, and the index after the match.
pub fn parenthesized(text: &str, open: usize) -> (&str, usize) {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return (&text[open + 1..open + i], open + i + 1);
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced parentheses after {}", &text[open..]);
}

/// The return type in `-> TYPE` at the start of `rest`, ending at `{` or `;`.
pub fn return_type(rest: &str) -> Option<String> {
    let rest = rest.trim_start();
    let rest = rest.strip_prefix("->")?;
    let end = rest.find(['{', ';']).unwrap_or(rest.len());
    Some(rest[..end].trim().to_string())
}

/// api.rs's table: `field: "SYMBOL" => fn(TYPES) -> RET;`.
pub fn table_functions(api: &str) -> Vec<Function> {
    let table = &api[api.find("api_table! {").expect("api.rs has the api_table! invocation")..];
    table
        .lines()
        .filter(|line| line.contains("=> fn("))
        .map(|line| {
            let symbol = line.split('"').nth(1).expect("a quoted symbol").to_string();
            let open = line.find("fn(").expect("fn(") + 2;
            let (params, after) = parenthesized(line, open);
            Function { symbol, params: split_top(params), ret: return_type(&line[after..]) }
        })
        .collect()
}

/// Functions `prefix`ed in `text` written as `extern "C" fn NAME(PARAMS) -> RET` (definitions) or, inside
/// an `extern "C" {}` block, `fn NAME(PARAMS) -> RET;` or `pub fn NAME(PARAMS) -> RET;` (declarations).
pub fn rust_functions(text: &str, definitions: bool) -> Vec<Function> {
    let markers: &[&str] = if definitions { &["extern \"C\" fn "] } else { &["    fn ", "    pub fn "] };
    let body = if definitions {
        text
    } else {
        let start = text.find("extern \"C\" {").expect("an extern \"C\" block");
        &text[start..start + text[start..].find("\n}").expect("its end")]
    };
    let mut functions = Vec::new();
    let mut at = 0;
    let next = |at: usize| {
        markers.iter().filter_map(|marker| body[at..].find(marker).map(|found| at + found + marker.len())).min()
    };
    while let Some(name_start) = next(at) {
        let open = name_start + body[name_start..].find('(').expect("(");
        let (params, after) = parenthesized(body, open);
        functions.push(Function {
            symbol: body[name_start..open].trim().to_string(),
            params: split_top(params).iter().map(|param| param_type(param)).collect(),
            ret: return_type(&body[after..]),
        });
        at = after;
    }
    functions
}

/// `NAME: TYPE = VALUE;` constants of `text` (top level, `pub` or not), with C values.
pub fn constants(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("pub const ").or_else(|| line.strip_prefix("const "))?;
            let (name, rest) = rest.split_once(':')?;
            let value = rest.split_once('=')?.1.trim().trim_end_matches(';').replace('_', "");
            let value = match value.strip_prefix("0o") {
                Some(octal) => format!("0{octal}"),
                None => value,
            };
            Some((name.trim().to_string(), value))
        })
        .collect()
}

/// The `#[repr(C)]` structs of `text`: name and fields (name, Rust type).
pub fn repr_c_structs(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    text.split("#[repr(C)]\n")
        .skip(1)
        .map(|chunk| {
            let header = chunk.lines().next().expect("struct line");
            let name = header.trim_start_matches("pub ").trim_start_matches("struct ").trim_end_matches(" {").trim();
            let body = &chunk[chunk.find('{').expect("{") + 1..chunk.find("\n}").expect("}")];
            let fields = body
                .lines()
                .filter_map(|line| line.trim().trim_end_matches(',').split_once(':'))
                .map(|(field, ty)| (field.trim().to_string(), ty.trim().to_string()))
                .collect();
            (name.to_string(), fields)
        })
        .collect()
}

/// The variants of `pub enum DataType` with their codes.
pub fn data_types(dtype: &str) -> Vec<(String, String)> {
    let start = dtype.find("pub enum DataType {").expect("DataType");
    let body = &dtype[start..start + dtype[start..].find('}').expect("}")];
    body.lines()
        .filter_map(|line| line.trim().trim_end_matches(',').split_once(" = "))
        .map(|(name, code)| (name.trim().to_string(), code.trim().to_string()))
        .collect()
}

/// The Triton entry points `entry.rs` exports.
pub fn entry_points(entry: &str) -> Vec<Function> {
    rust_functions(entry, true).into_iter().filter(|function| function.symbol.starts_with("TRITONBACKEND_")).collect()
}

/// The functions read from `api.rs`, `entry.rs` and `sys.rs` against `expected.rs`'s lists: what is wrong, where,
/// and what to do.
pub fn check_exact_sets(api: &str, entry: &str, sys: &str) -> Result<(), String> {
    let read = [
        ("src/triton/api.rs", "TABLE", expected::TABLE, table_functions(api)),
        ("src/triton/entry.rs", "ENTRY_POINTS", expected::ENTRY_POINTS, entry_points(entry)),
        ("src/sys.rs", "LIBC", expected::LIBC, rust_functions(sys, false)),
    ];
    let mut problems = Vec::new();
    for (file, list, expected, functions) in read {
        let found: Vec<&str> = functions.iter().map(|function| function.symbol.as_str()).collect();
        let found_set: BTreeSet<&str> = found.iter().copied().collect();
        let expected_set: BTreeSet<&str> = expected.iter().copied().collect();
        if expected_set.len() != expected.len() {
            problems.push(format!("tests/abi_source/expected.rs's {list} names a function twice"));
        }
        if found_set.len() != found.len() {
            problems.push(format!("{file} declares a function twice: {found:?}"));
        }
        let missed: Vec<&str> = expected_set.difference(&found_set).copied().collect();
        if !missed.is_empty() {
            problems.push(format!(
                "{file}: the check's reading (tests/abi_source/mod.rs) did not find {missed:?}, which \
                 tests/abi_source/expected.rs's {list} names: the reading misses a declaration (fix the reading), \
                 or the functions were removed (remove them from {list})"
            ));
        }
        let unlisted: Vec<&str> = found_set.difference(&expected_set).copied().collect();
        if !unlisted.is_empty() {
            problems.push(format!(
                "{file} declares {unlisted:?}, which tests/abi_source/expected.rs's {list} does not name: add them there"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}
