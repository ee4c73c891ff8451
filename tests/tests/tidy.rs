//! Tidy: the mechanical claims of ARCHITECTURE.md, checked on the source tree itself, so they
//! stay true: every Rust file opens with a `//!` line, no `mod.rs`, no `pub mod` at a crate
//! root, time read only through the clock crate, no gateway source file over 700 lines, every
//! test the docs cite as `path.rs::name` exists, every path and name ARCHITECTURE.md names
//! exists, its count of statics is the code's, its crate list, test binaries and layers are
//! the workspace's, the test directories' and the allow-list's, and the imports between the
//! gateway's and oauth's top-level modules follow the allow-list `tidy/imports.txt`
//! (`tidy/imports.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
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
const CRATES: [&str; 11] = [
    "bench",
    "clock",
    "gateway",
    "oauth",
    "outbound",
    "page",
    "redis-profile",
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
    let mut docs: Vec<String> = ["SECURITY.md", "ARCHITECTURE.md", "README.md"]
        .map(String::from)
        .to_vec();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    for doc in &docs {
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

#[path = "tidy/imports.rs"]
mod imports;

/// The allow-list of arrows between top-level modules, the layering ARCHITECTURE.md states.
const IMPORTS: &str = "tests/tests/tidy/imports.txt";

#[test]
fn imports_follow_the_allow_list() {
    let root = root();
    let text = std::fs::read_to_string(root.join(IMPORTS)).unwrap();
    let mut bad = Vec::new();
    for krate in ["gateway", "oauth"] {
        let src = root.join(krate).join("src");
        let (rules, errors) = imports::rules(&text, krate);
        bad.extend(errors.into_iter().map(|e| format!("{IMPORTS}: {e}")));
        let modules = imports::top_modules(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
        let graph = imports::graph(&imports::arrows(&src, &format!("{krate}/src")));
        bad.extend(imports::check(&graph, &rules, &modules, IMPORTS, krate));
    }
    assert!(
        bad.is_empty(),
        "the imports and {IMPORTS} disagree:\n{}",
        bad.join("\n")
    );
}

/// Every file and directory of the repository (paths from the root), skipping build output,
/// fetched packages and fuzz corpora.
fn repo_paths() -> (BTreeSet<String>, BTreeSet<String>) {
    let root = root();
    let (mut files, mut dirs) = (BTreeSet::new(), BTreeSet::new());
    let mut todo = vec![root.clone()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let rel = relative(&path);
            if path.is_dir() {
                if !matches!(
                    name.as_str(),
                    "target" | "node_modules" | ".git" | "corpus" | "artifacts" | ".pforte"
                ) {
                    dirs.insert(rel);
                    todo.push(path);
                }
            } else {
                files.insert(rel);
            }
        }
    }
    (files, dirs)
}

/// The inline code spans of `text` outside its fenced blocks.
fn code_spans(text: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
        } else if !inside {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.trim().to_owned())
        .collect()
}

fn is_identifier(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// ARCHITECTURE.md's names hold: every file or directory it names (`runtime/conns.rs`,
/// `catalog/`, `mcp-service/core/CONTRACT.md`) exists — as written from the root, or as the end
/// of a path —, every `file.rs::name` is in that file, and every identifier (`RequestCtx`,
/// `head_deadline`, `Sessions::make_room`) is a word of the workspace's source.
#[test]
fn every_path_and_name_architecture_names_exists() {
    let root = root();
    let (files, dirs) = repo_paths();
    let mut words = BTreeSet::new();
    for file in files.iter().filter(|f| {
        [".rs", ".toml", ".js", ".mjs", ".cjs"]
            .iter()
            .any(|e| f.ends_with(e))
    }) {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        words.extend(
            text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .map(str::to_owned),
        );
    }
    let resolve = |path: &str| -> Vec<String> {
        let path = path.trim_end_matches('/');
        let suffix = format!("/{path}");
        files
            .iter()
            .chain(dirs.iter())
            .filter(|p| *p == path || p.ends_with(&suffix))
            .cloned()
            .collect()
    };
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut checked = 0;
    let mut bad = Vec::new();
    for span in code_spans(&text) {
        let (path, name) = match span.split_once("::") {
            Some((p, n)) if p.contains('.') => (p, Some(n)),
            _ => (span.as_str(), None),
        };
        let looks_like_file = [
            ".rs", ".js", ".md", ".toml", ".json", ".cjs", ".mjs", ".yaml",
        ]
        .iter()
        .any(|e| path.ends_with(e));
        let looks_like_dir = path.ends_with('/')
            && path.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && path
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-./".contains(c));
        if (looks_like_file || looks_like_dir)
            && !path.starts_with('/')
            && !path.contains(['*', ' '])
            && !matches!(path, "mod.rs" | "path.rs")
        {
            checked += 1;
            let found = resolve(path);
            if found.is_empty() {
                bad.push(format!("no such file or directory: {span}"));
                continue;
            }
            if let Some(name) = name.filter(|n| is_identifier(n)) {
                let holds = found.iter().any(|f| {
                    let mut source = std::fs::read_to_string(root.join(f)).unwrap_or_default();
                    let dir = root.join(f).with_extension("");
                    if dir.is_dir() {
                        for f in rust_files(&dir) {
                            source.push_str(&std::fs::read_to_string(f).unwrap());
                        }
                    }
                    source.contains(name)
                });
                if !holds {
                    bad.push(format!("{name} is not in {path}"));
                }
            }
            continue;
        }
        let parts: Vec<&str> = span.split("::").collect();
        if parts.len() <= 3 && parts.iter().all(|p| is_identifier(p)) {
            checked += 1;
            let missing: Vec<&&str> = parts.iter().filter(|p| !words.contains(**p)).collect();
            if !missing.is_empty() {
                bad.push(format!("{span}: {missing:?} is no word of the source"));
            }
        }
    }
    eprintln!("ARCHITECTURE.md: {checked} paths and names checked");
    assert!(
        bad.is_empty(),
        "ARCHITECTURE.md names what is not there: {bad:#?}"
    );
    assert!(
        checked >= 400,
        "only {checked} names checked: did the span parsing break?"
    );
}

/// How ARCHITECTURE.md writes a count.
const NUMBERS: [&str; 13] = [
    "no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve",
];

/// The word before `marker` in `text` (whitespace-normalized), lower-cased.
fn word_before(text: &str, marker: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let (before, _) = flat
        .split_once(marker)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md no longer says {marker:?}"));
    before
        .split_whitespace()
        .last()
        .unwrap_or("")
        .to_lowercase()
}

/// The strings of a TOML array `key = [...]` in `manifest`.
fn toml_list(manifest: &str, key: &str) -> BTreeSet<String> {
    let Some((_, rest)) = manifest.split_once(&format!("{key} = [")) else {
        return BTreeSet::new();
    };
    rest.split(']')
        .next()
        .unwrap()
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The last directory of each `dir/` span of `text`.
fn dir_spans(text: &str) -> BTreeSet<String> {
    code_spans(text)
        .iter()
        .filter_map(|s| s.strip_suffix('/'))
        .filter_map(|s| s.rsplit('/').next())
        .map(str::to_owned)
        .collect()
}

/// The code map's row for `path`: what its line says after `| `path` |`.
fn code_map_row<'a>(text: &'a str, path: &str) -> &'a str {
    let head = format!("| `{path}` |");
    text.lines()
        .find_map(|l| l.strip_prefix(&head))
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no code-map row for `{path}`"))
}

/// ARCHITECTURE.md's first paragraph names the workspace's crates, "in ten crates (`gateway/`,
/// …)": the count and the `dir/` names are Cargo.toml's `members` (`exclude`d ones may be named
/// beside them).
#[test]
fn architecture_names_the_workspace_crates() {
    let root = root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = toml_list(&manifest, "members");
    let excluded = toml_list(&manifest, "exclude");
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let paragraph = text.split("\n\n").nth(1).unwrap();
    let named: BTreeSet<String> = dir_spans(paragraph)
        .difference(&excluded)
        .cloned()
        .collect();
    assert_eq!(
        named, members,
        "the crates of ARCHITECTURE.md's first paragraph"
    );
    assert_eq!(
        word_before(paragraph, " crates ("),
        NUMBERS.get(members.len()).copied().unwrap_or("many"),
        "the workspace has {} members",
        members.len()
    );
}

/// The code map's rows for the test crates name their test binaries (`NAME/main.rs`) and
/// count them: "five test binaries by theme … `tls/`, `oauth/`, …".
#[test]
fn architecture_names_the_test_binaries() {
    let root = root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    for (row, dir) in [
        ("tests/", "tests/tests"),
        ("mcp-service/tests/", "mcp-service/tests"),
    ] {
        let binaries: BTreeSet<String> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("main.rs").is_file())
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        let row = code_map_row(&text, row);
        assert_eq!(dir_spans(row), binaries, "the test binaries in {dir}");
        assert_eq!(
            word_before(row, " test binaries by theme"),
            NUMBERS.get(binaries.len()).copied().unwrap_or("many"),
            "{dir} has {} test binaries",
            binaries.len()
        );
    }
}

/// ARCHITECTURE.md's "Layers" are the allow-list's `layer:` lines, in order and counted: the
/// gateway's numbered list (the modules of each item's first sentence) and oauth's sentence
/// ("`pforte-oauth` has six: `http`; …", layers between semicolons).
#[test]
fn architecture_layers_are_the_allow_lists() {
    let root = root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let list = std::fs::read_to_string(root.join(IMPORTS)).unwrap();
    let section = text
        .split_once("\n## Layers\n")
        .and_then(|(_, s)| s.split("\n## ").next())
        .expect("ARCHITECTURE.md has a Layers section");
    let modules = |s: &str| -> Vec<String> {
        let mut found: Vec<String> = code_spans(s)
            .into_iter()
            .filter(|s| is_identifier(s))
            .collect();
        found.sort();
        found
    };
    let layers = |krate: &str| -> Vec<Vec<String>> {
        let (rules, errors) = imports::rules(&list, krate);
        assert!(errors.is_empty(), "{errors:?}");
        rules
            .layers
            .into_iter()
            .map(|mut l| {
                l.sort();
                l
            })
            .collect()
    };
    let mut items: Vec<String> = Vec::new();
    for line in section.lines() {
        let trimmed = line.trim_start();
        let numbered = trimmed
            .split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if numbered {
            items.push(trimmed.split_once(". ").unwrap().1.to_owned());
        } else if let Some(last) = items.last_mut().filter(|_| line.starts_with("   ")) {
            last.push(' ');
            last.push_str(trimmed);
        } else if !items.is_empty() {
            break;
        }
    }
    let gateway: Vec<Vec<String>> = items
        .iter()
        .map(|item| modules(item.split(". ").next().unwrap()))
        .collect();
    assert_eq!(gateway, layers("gateway"), "the gateway's layers");
    assert_eq!(
        word_before(section, " layers, top first"),
        NUMBERS[gateway.len()]
    );
    let flat = section.split_whitespace().collect::<Vec<_>>().join(" ");
    let (said, rest) = flat
        .split_once("`pforte-oauth` has ")
        .and_then(|(_, s)| s.split_once(':'))
        .expect("ARCHITECTURE.md gives pforte-oauth's layers");
    let oauth: Vec<Vec<String>> = rest
        .split(". ")
        .next()
        .unwrap()
        .split(';')
        .map(modules)
        .collect();
    assert_eq!(oauth, layers("oauth"), "pforte-oauth's layers");
    assert_eq!(said, NUMBERS[oauth.len()]);
}

/// ARCHITECTURE.md counts the programs' statics ("The seven statics there are: …") and names
/// the file of each: a new static, or one gone, fails here.
#[test]
fn architecture_counts_the_statics_there_are() {
    let root = root();
    let mut holders = BTreeSet::new();
    let mut count = 0;
    for krate in [
        "clock",
        "gateway",
        "oauth",
        "outbound",
        "page",
        "mcp-service",
        "redis-profile",
    ] {
        let src = root.join(krate).join("src");
        if !src.is_dir() {
            continue;
        }
        for file in rust_files(&src) {
            if file.file_name().is_some_and(|n| n == "tests.rs")
                || file.components().any(|c| c.as_os_str() == "tests")
            {
                continue;
            }
            for line in std::fs::read_to_string(&file).unwrap().lines() {
                let line = line.trim_start();
                let line = line
                    .strip_prefix("pub(crate) ")
                    .or_else(|| line.strip_prefix("pub "))
                    .unwrap_or(line);
                if line.starts_with("static ") {
                    count += 1;
                    holders.insert(relative(&file));
                }
            }
        }
    }
    let words = NUMBERS;
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let (_, rest) = text
        .split_once("statics there are")
        .expect("ARCHITECTURE.md lists the statics there are");
    let said = text[..text.len() - rest.len()]
        .split_whitespace()
        .rev()
        .nth(3)
        .unwrap_or("")
        .to_owned();
    assert_eq!(
        said,
        words.get(count).copied().unwrap_or("many"),
        "the code holds {count} statics, in {holders:?}"
    );
    let paragraph = rest.split("\n- ").next().unwrap().replace("\n  ", " ");
    let unnamed: Vec<&String> = holders.iter().filter(|h| !paragraph.contains(*h)).collect();
    assert!(
        unnamed.is_empty(),
        "statics in files ARCHITECTURE.md does not name: {unnamed:?}"
    );
}
