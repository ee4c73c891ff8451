//! The import graph between a crate's top-level modules, read from its source files: every
//! `crate::X` path (in `use` or inline, `crate::{X, Y::…}` groups included) and every
//! `super::…` that climbs to the crate root, outside comments, strings and test code
//! (`tests.rs`, `tests/`, an item under `#[cfg(test)]`). Plain text work, no parser crate, so
//! the graph comes out the same way every run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One use of module `to` inside module `from`, at `at` (`path:line`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Arrow {
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) at: String,
}

/// The modules a crate root declares (`mod x;`, any visibility; `#[doc(hidden)] pub mod`
/// blocks written inline are not part of the graph).
pub(crate) fn top_modules(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line
                .strip_prefix("mod ")
                .or_else(|| line.strip_prefix("pub(crate) mod "))
                .or_else(|| line.strip_prefix("pub mod "))?;
            rest.strip_suffix(';').map(str::to_owned)
        })
        .collect()
}

/// Every arrow between the top-level modules of the crate whose source is `src` (`lib.rs`
/// and `main.rs` themselves left out: the root declares every module), sorted.
pub(crate) fn arrows(src: &Path, shown_as: &str) -> Vec<Arrow> {
    let modules = top_modules(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut found = Vec::new();
    for file in super::rust_files(src) {
        let rel = file.strip_prefix(src).unwrap();
        let segments: Vec<String> = rel
            .with_extension("")
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        if segments.len() == 1 && matches!(segments[0].as_str(), "lib" | "main") {
            continue;
        }
        if segments.iter().any(|s| s == "tests") {
            continue;
        }
        let shown = format!("{shown_as}/{}", rel.display());
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, to) in module_uses(&text, segments.len()) {
            if to != segments[0] && modules.contains(&to) {
                found.push(Arrow {
                    from: segments[0].clone(),
                    to,
                    at: format!("{shown}:{line}"),
                });
            }
        }
    }
    found.sort();
    found
}

/// The arrows grouped: `from -> to` with every place that draws it.
pub(crate) fn graph(arrows: &[Arrow]) -> BTreeMap<(String, String), Vec<String>> {
    let mut graph: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for a in arrows {
        graph
            .entry((a.from.clone(), a.to.clone()))
            .or_default()
            .push(a.at.clone());
    }
    graph
}

/// The crate-root names one file's code reaches, with their line: `crate::NAME`,
/// `crate::{NAME, …}`, and `super::` chains that climb `depth` levels (the file's own depth
/// below the root, plus the inline modules around the path) or more.
pub(crate) fn module_uses(text: &str, depth: usize) -> Vec<(usize, String)> {
    let code = without_tests(&code_only(text));
    let bytes = code.as_bytes();
    let inline = inline_modules(&code);
    let mut found = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let starts_word = at == 0 || !is_ident(bytes[at - 1]) && bytes[at - 1] != b'$';
        if !starts_word || !(code[at..].starts_with("crate::") || code[at..].starts_with("super::"))
        {
            at += 1;
            continue;
        }
        let start = at;
        let at_root = if code[at..].starts_with("crate::") {
            at += "crate::".len();
            true
        } else {
            let mut climbs = 0;
            while code[at..].starts_with("super::") {
                climbs += 1;
                at += "super::".len();
            }
            let around = inline.iter().filter(|r| r.contains(&start)).count();
            climbs >= depth + around
        };
        if !at_root {
            continue;
        }
        let line = code[..start].matches('\n').count() + 1;
        for name in path_heads(&code[at..]) {
            found.push((line, name));
        }
    }
    found
}

/// The first names of a path's rest: `NAME…` gives NAME; `{a::b, c, d::{e}}` gives a, c, d.
fn path_heads(rest: &str) -> Vec<String> {
    let rest = rest.trim_start();
    if let Some(group) = rest.strip_prefix('{') {
        let mut heads = Vec::new();
        let mut depth = 0;
        let mut item_start = true;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => item_start = true,
                c if item_start && !c.is_whitespace() => {
                    item_start = false;
                    heads.push(ident(&group[i..]));
                }
                _ => {}
            }
        }
        heads.retain(|h| !h.is_empty() && h != "self");
        heads
    } else {
        let name = ident(rest);
        if name.is_empty() { vec![] } else { vec![name] }
    }
}

fn ident(text: &str) -> String {
    text.bytes()
        .take_while(|b| is_ident(*b))
        .map(char::from)
        .collect()
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The text with comments, string and character literals blanked (same length, newlines
/// kept), so only code is searched and line numbers stay right.
pub(crate) fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let prev_ident = i > 0 && is_ident(b[i - 1]);
        if b[i..].starts_with(b"//") {
            let end = b[i..]
                .iter()
                .position(|c| *c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (0, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if b[i] == b'r'
            && (!prev_ident || (i > 0 && b[i - 1] == b'b' && !(i > 1 && is_ident(b[i - 2]))))
            && matches!(b.get(i + 1), Some(b'"' | b'#'))
        {
            // A raw string: r"…", r#"…"#, br##"…"##.
            let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let open = i + 2 + hashes;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let end = (open..b.len())
                .find(|j| b[*j..].starts_with(&close))
                .map_or(b.len(), |j| j + close.len());
            blank(&mut out, open, end - close.len());
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i + 1, j);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\u{..}', b'"') or a lifetime ('a, 'static).
            let end = if b.get(i + 1) == Some(&b'\\') {
                (i + 2..b.len()).find(|j| b[*j] == b'\'').map(|j| j + 1)
            } else {
                let width = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + width) == Some(&b'\'')).then_some(i + 2 + width)
            };
            match end {
                Some(end) => {
                    blank(&mut out, i + 1, end - 1);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The code with every `#[cfg(test)]` item blanked: from the attribute to the item's first
/// `;` or the end of its first `{…}` block, whichever comes first.
pub(crate) fn without_tests(code: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    let mut from = 0;
    while let Some(p) = code[from..].find("#[cfg(test)]") {
        let start = from + p;
        let mut end = code.len();
        for (i, c) in code[start..].char_indices() {
            if c == ';' {
                end = start + i + 1;
                break;
            }
            if c == '{' {
                end = block_end(code, start + i);
                break;
            }
        }
        for c in &mut out[start..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end;
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The index just past the `}` closing the `{` at `open`.
fn block_end(code: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The byte ranges of the inline modules (`mod name { … }`) in the code.
fn inline_modules(code: &str) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..].find("mod ") {
        let at = from + p;
        from = at + 4;
        if at > 0 && is_ident(code.as_bytes()[at - 1]) {
            continue;
        }
        let rest = &code[at + 4..];
        let name = ident(rest.trim_start());
        let after = rest.trim_start()[name.len()..].trim_start();
        if !name.is_empty() && after.starts_with('{') {
            let open = code.len() - after.len();
            ranges.push(open..block_end(code, open));
        }
    }
    ranges
}

/// The rules of an allow-list file: per crate the modules in layers, top first, and the
/// arrows allowed (`from -> to to …`), each either downward or named as a cycle with its
/// reason.
#[derive(Debug, Default)]
pub(crate) struct Rules {
    pub(crate) layers: Vec<Vec<String>>,
    pub(crate) allowed: BTreeMap<(String, String), usize>,
    pub(crate) cycles: BTreeMap<(String, String), String>,
}

/// Reads the `[name]` section of an allow-list. Lines: `layer: a b c` (top first),
/// `a -> b c d`, `cycle a <-> b: why`, `#` comments. Returns the rules and the parse errors.
pub(crate) fn rules(text: &str, section: &str) -> (Rules, Vec<String>) {
    let mut rules = Rules::default();
    let mut errors = Vec::new();
    let mut inside = false;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name == section;
            continue;
        }
        if !inside {
            continue;
        }
        if let Some(rest) = line.strip_prefix("layer:") {
            rules
                .layers
                .push(rest.split_whitespace().map(str::to_owned).collect());
        } else if let Some(rest) = line.strip_prefix("cycle ") {
            let (pair, why) = rest.split_once(':').unwrap_or((rest, ""));
            match pair.split_once("<->") {
                Some((a, b)) if !why.trim().is_empty() => {
                    let (a, b) = (a.trim().to_owned(), b.trim().to_owned());
                    rules
                        .cycles
                        .insert((a.clone(), b.clone()), why.trim().to_owned());
                    rules.cycles.insert((b, a), why.trim().to_owned());
                }
                _ => errors.push(format!("line {}: `cycle a <-> b: reason` expected", n + 1)),
            }
        } else if let Some((from, tos)) = line.split_once("->") {
            for to in tos.split_whitespace() {
                rules
                    .allowed
                    .insert((from.trim().to_owned(), to.to_owned()), n + 1);
            }
        } else {
            errors.push(format!("line {}: not understood: {raw}", n + 1));
        }
    }
    (rules, errors)
}

impl Rules {
    /// The layer index of a module (0 the top), if listed.
    pub(crate) fn layer(&self, module: &str) -> Option<usize> {
        self.layers
            .iter()
            .position(|l| l.iter().any(|m| m == module))
    }
}

/// Every way the graph and the rules disagree, as lines a person can act on: an arrow not in
/// the list, a listed arrow no code draws, an arrow up a layer, a circle not named as a cycle,
/// a module in no layer.
pub(crate) fn check(
    graph: &BTreeMap<(String, String), Vec<String>>,
    rules: &Rules,
    modules: &BTreeSet<String>,
    list: &str,
    section: &str,
) -> Vec<String> {
    let mut bad = Vec::new();
    for m in modules {
        if rules.layer(m).is_none() {
            bad.push(format!(
                "module `{m}` is in no layer of [{section}] in {list}: add it to the `layer:` line it belongs to"
            ));
        }
    }
    for m in rules.layers.iter().flatten() {
        if !modules.contains(m) {
            bad.push(format!(
                "{list} [{section}]: `{m}` is no module of the crate: remove it"
            ));
        }
    }
    for ((from, to), places) in graph {
        if rules.allowed.contains_key(&(from.clone(), to.clone())) {
            continue;
        }
        let at = &places[0];
        match (rules.layer(from), rules.layer(to)) {
            (Some(a), Some(b)) if b < a => bad.push(format!(
                "{at}: new arrow {from} -> {to} goes up (layer {a} to layer {b} of [{section}] in {list}, 0 the top): move the piece {from} needs down into a lower module, or pass it in"
            )),
            _ => bad.push(format!(
                "{at}: new arrow {from} -> {to}, not in {list} [{section}]: if it belongs, add `{to}` to the `{from} ->` line (down or sideways; a circle fails)"
            )),
        }
    }
    for ((from, to), line) in &rules.allowed {
        if !graph.contains_key(&(from.clone(), to.clone())) {
            bad.push(format!(
                "{list}:{line}: {from} -> {to} is allowed but no code draws it: remove it from the list"
            ));
        }
        if let (Some(a), Some(b)) = (rules.layer(from), rules.layer(to))
            && b < a
            && !rules.cycles.contains_key(&(from.clone(), to.clone()))
        {
            bad.push(format!(
                "{list}:{line}: {from} -> {to} goes up (layer {a} to layer {b}, 0 the top): move the piece {from} needs down into a lower module, or pass it in"
            ));
        }
    }
    for ((from, to), _) in rules.cycles.iter().filter(|((a, b), _)| a < b) {
        let both = graph.contains_key(&(from.clone(), to.clone()))
            && graph.contains_key(&(to.clone(), from.clone()));
        if !both {
            bad.push(format!(
                "{list} [{section}]: cycle {from} <-> {to} is named but the code no longer goes both ways: remove the line"
            ));
        }
    }
    let unnamed: BTreeMap<(String, String), Vec<String>> = graph
        .iter()
        .filter(|(pair, _)| !rules.cycles.contains_key(pair))
        .map(|(pair, places)| (pair.clone(), places.clone()))
        .collect();
    for circle in circles(&unnamed) {
        let arrows: Vec<String> = unnamed
            .iter()
            .filter(|((a, b), _)| circle.contains(a) && circle.contains(b))
            .map(|((a, b), places)| format!("{a} -> {b} ({})", places[0]))
            .collect();
        bad.push(format!(
            "[{section}] modules {circle:?} use each other in a circle: {}; move the shared piece down, or name a pair `cycle a <-> b: reason` in {list}",
            arrows.join(", ")
        ));
    }
    bad
}

/// The circles of a graph: its strongly connected components of more than one module
/// (Tarjan's algorithm), each sorted.
pub(crate) fn circles(graph: &BTreeMap<(String, String), Vec<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        next: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a str) {
        let i = w.index.len();
        w.index.insert(v, i);
        w.low.insert(v, i);
        w.stack.push(v);
        for u in w.next.get(v).cloned().unwrap_or_default() {
            if !w.index.contains_key(u) {
                visit(w, u);
                let low = w.low[v].min(w.low[u]);
                w.low.insert(v, low);
            } else if w.stack.contains(&u) {
                let low = w.low[v].min(w.index[u]);
                w.low.insert(v, low);
            }
        }
        if w.low[v] == w.index[v] {
            let at = w.stack.iter().position(|m| *m == v).unwrap_or(0);
            let mut circle: Vec<String> = w.stack.drain(at..).map(str::to_owned).collect();
            if circle.len() > 1 {
                circle.sort();
                w.found.push(circle);
            }
        }
    }
    let mut walk = Walk {
        next: BTreeMap::new(),
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for (from, to) in graph.keys() {
        walk.next
            .entry(from.as_str())
            .or_default()
            .push(to.as_str());
        walk.next.entry(to.as_str()).or_default();
    }
    let nodes: Vec<&str> = walk.next.keys().copied().collect();
    for v in nodes {
        if !walk.index.contains_key(v) {
            visit(&mut walk, v);
        }
    }
    walk.found.sort();
    walk.found
}

#[test]
fn only_code_outside_tests_draws_arrows() {
    let text = r#"//! crate::audit in a doc line
use crate::{config::{self, Settings}, limit::Limits, self};
use super::super::vault::Key;
/* crate::broker */
fn f() { let s = "crate::tokens"; let c = '"'; crate::auth::x(); $crate::cli::y(); my_crate::z(); }
fn g<'a>(x: &'a str) -> &'a str { crate::mcp::h(x) }
#[cfg(test)]
mod tests { use crate::proxy::X; }
mod inner { use super::super::stores::Site; use super::super::super::tls::T; }
"#;
    let names: Vec<(usize, String)> = module_uses(text, 2);
    let expected = [
        (2, "config"),
        (2, "limit"),
        (3, "vault"),
        (5, "auth"),
        (6, "mcp"),
        (9, "tls"),
    ];
    assert_eq!(
        names,
        expected.map(|(l, n)| (l, n.to_owned())).to_vec(),
        "{names:?}"
    );
}

#[test]
fn an_arrow_up_a_circle_and_a_stale_entry_are_named() {
    let list =
        "[c]\nlayer: top\nlayer: mid\nlayer: low\ntop -> mid gone\nmid -> low\nlow -> mid top\n";
    let (rules, errors) = rules(list, "c");
    assert!(errors.is_empty(), "{errors:?}");
    let modules: BTreeSet<String> = ["top", "mid", "low", "gone", "new"]
        .map(String::from)
        .into();
    let arrows = [
        ("top", "mid"),
        ("mid", "low"),
        ("low", "mid"),
        ("low", "top"),
        ("top", "new"),
    ]
    .map(|(from, to)| Arrow {
        from: from.into(),
        to: to.into(),
        at: format!("c/{from}.rs:1"),
    });
    let bad = check(&graph(&arrows), &rules, &modules, "list.txt", "c").join("\n");
    for needle in [
        "module `gone` is in no layer",
        "module `new` is in no layer",
        "c/top.rs:1: new arrow top -> new",
        "list.txt:5: top -> gone is allowed but no code draws it",
        "list.txt:7: low -> mid goes up",
        "list.txt:7: low -> top goes up",
        "modules [\"low\", \"mid\", \"top\"] use each other in a circle",
    ] {
        assert!(bad.contains(needle), "{needle:?} missing from:\n{bad}");
    }
}
