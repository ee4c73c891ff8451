//! Tidy: the mechanical claims of ARCHITECTURE.md, checked on the source tree itself, so they
//! stay true: every Rust file opens with a `//!` line, no `mod.rs`, no `pub mod` at a crate
//! root, time read only through the clock crate, no gateway source file over 700 lines, and
//! every test the docs cite as `path.rs::name` exists.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// The workspace root (this crate lives in `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, skipping build output and fetched packages.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(name.as_str(), "target" | "node_modules" | ".git") {
                    todo.push(path);
                }
            } else if name.ends_with(".rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The crates whose source the rules cover.
const CRATES: [&str; 8] = [
    "bench",
    "clock",
    "gateway",
    "oauth",
    "mcp-service",
    "tests",
    "test-support",
    "fuzz",
];

fn all_files() -> Vec<PathBuf> {
    let root = root();
    CRATES
        .iter()
        .map(|c| root.join(c))
        .filter(|d| d.is_dir())
        .flat_map(|d| rust_files(&d))
        .collect()
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root()).unwrap().display().to_string()
}

#[test]
fn every_rust_file_opens_with_a_doc_line() {
    let bad: Vec<String> = all_files()
        .into_iter()
        .filter(|f| !std::fs::read_to_string(f).unwrap().starts_with("//!"))
        .map(|f| relative(&f))
        .collect();
    assert!(bad.is_empty(), "files without a leading //! line: {bad:?}");
}

#[test]
fn no_mod_rs() {
    let bad: Vec<String> = all_files()
        .into_iter()
        .filter(|f| f.file_name().is_some_and(|n| n == "mod.rs"))
        .map(|f| relative(&f))
        .collect();
    assert!(bad.is_empty(), "use foo.rs + foo/ instead: {bad:?}");
}

#[test]
fn crate_roots_declare_no_pub_mod() {
    let root = root();
    let mut bad = Vec::new();
    for lib in ["clock", "gateway", "oauth", "mcp-service"] {
        let path = root.join(lib).join("src/lib.rs");
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            // A `#[doc(hidden)]` module for tests and fuzz targets is not an API.
            if line.starts_with("pub mod ") && !text.contains(&format!("#[doc(hidden)]\n{line}")) {
                bad.push(format!("{}: {line}", relative(&path)));
            }
        }
    }
    assert!(bad.is_empty(), "public API is what users call: {bad:?}");
}

#[test]
fn time_is_read_only_through_the_clock_crate() {
    let clippy = std::fs::read_to_string(root().join("clippy.toml")).unwrap();
    assert!(
        clippy.contains("\"std::time::SystemTime::now\""),
        "clippy.toml must disallow SystemTime::now"
    );
    let clock = root().join("clock");
    let this = Path::new(file!()).file_name().unwrap();
    let bad: Vec<String> = all_files()
        .into_iter()
        .filter(|f| !f.starts_with(&clock) && f.file_name() != Some(this))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.contains("SystemTime::now") || text.contains("clippy::disallowed_methods")
        })
        .map(|f| relative(&f))
        .collect();
    assert!(bad.is_empty(), "SystemTime::now outside clock/: {bad:?}");
}

#[test]
fn no_gateway_source_file_is_over_700_lines() {
    let bad: Vec<String> = rust_files(&root().join("gateway/src"))
        .into_iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(&f).unwrap().lines().count();
            (lines > 700).then(|| format!("{} ({lines})", relative(&f)))
        })
        .collect();
    assert!(bad.is_empty(), "split these: {bad:?}");
}

/// The `path.rs::name` citations of a document, with `…::name` continuing the last path.
fn citations(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut last: Option<String> = None;
    for quoted in text.split('`').skip(1).step_by(2) {
        let Some((path, name)) = quoted.rsplit_once("::") else {
            continue;
        };
        let path = if path == "…" {
            match &last {
                Some(p) => p.clone(),
                None => continue,
            }
        } else if path.ends_with(".rs") && CRATES.iter().any(|c| path.starts_with(&format!("{c}/")))
        {
            last = Some(path.to_owned());
            path.to_owned()
        } else {
            continue;
        };
        if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            found.push((path, name.to_owned()));
        }
    }
    found
}

#[test]
fn every_test_the_docs_cite_exists() {
    let root = root();
    let mut bad = Vec::new();
    for doc in ["SECURITY.md", "ARCHITECTURE.md", "README.md"] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        for (path, name) in citations(&text) {
            let file = root.join(&path);
            let Ok(mut source) = std::fs::read_to_string(&file) else {
                bad.push(format!("{doc}: {path} does not exist"));
                continue;
            };
            // A file's tests may live beside it, in `file/` (`#[cfg(test)] mod tests;`).
            let dir = file.with_extension("");
            if dir.is_dir() {
                for f in rust_files(&dir) {
                    source.push_str(&std::fs::read_to_string(f).unwrap());
                }
            }
            if !source.contains(&name) {
                bad.push(format!("{doc}: {path}::{name} not found"));
            }
        }
    }
    assert!(bad.is_empty(), "stale citations: {bad:#?}");
}
