//! Core edit property test: every edit verb on random nodes of every fixture keeps the plan free
//! of new structural warnings and changes only the lines it is meant to change.
//!
//! Seeded and bounded: `CORE_EDITS_SEED` (default 1) and `CORE_EDITS_CASES` (random nodes per
//! verb and fixture, default 6) reproduce or widen a run.
use std::collections::HashMap;
use std::time::Duration;

use crate::fixtures_dir;
use mcp_service::{Engine, EngineConfig, EngineError};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

const PLANS: &[&str] = &[
    "werkbaum",
    "example-werkbaum",
    "example-plan-0",
    "example-plan-1",
    "example-plan-2",
    "example-plan-3",
];

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A node of the plan in document (pre-)order.
#[derive(Debug, Clone)]
struct Node {
    line: u64,
    id: Option<String>,
    typ: String,
    status_code: Option<String>,
    parent: Option<usize>,
    /// Index one past the last node of this node's subtree.
    subtree_end: usize,
    children: Vec<usize>,
}

struct Plan {
    text: String,
    nodes: Vec<Node>,
    /// 1-based line of the `---` separator, if any.
    separator: Option<u64>,
    line_count: u64,
    duplicated_ids: Vec<String>,
}

impl Plan {
    fn new(text: String, tree: &Value) -> Plan {
        let mut nodes = Vec::new();
        fn walk(list: &Value, parent: Option<usize>, nodes: &mut Vec<Node>) {
            for n in list.as_array().unwrap() {
                let me = nodes.len();
                nodes.push(Node {
                    line: n["line"].as_u64().unwrap(),
                    id: n["id"].as_str().map(str::to_owned),
                    typ: n["type"].as_str().unwrap().to_owned(),
                    status_code: n["statusCode"].as_str().map(str::to_owned),
                    parent,
                    subtree_end: 0,
                    children: Vec::new(),
                });
                if let Some(p) = parent {
                    nodes[p].children.push(me);
                }
                walk(&n["children"], Some(me), nodes);
                nodes[me].subtree_end = nodes.len();
            }
        }
        walk(tree, None, &mut nodes);
        let separator = text
            .split('\n')
            .position(|l| {
                let l = l.split("%%").next().unwrap_or_default().trim();
                l.len() >= 3 && l.chars().all(|c| c == '-')
            })
            .map(|i| i as u64 + 1);
        let line_count = text.split('\n').count() as u64;
        let mut seen: HashMap<&str, u32> = HashMap::new();
        for n in &nodes {
            if let Some(id) = &n.id {
                *seen.entry(id).or_default() += 1;
            }
        }
        let duplicated_ids = seen
            .into_iter()
            .filter(|(_, c)| *c > 1)
            .map(|(id, _)| id.to_owned())
            .collect();
        Plan {
            text,
            nodes,
            separator,
            line_count,
            duplicated_ids,
        }
    }

    /// How to address node `i`: its id when unique, else its line number.
    fn address(&self, i: usize) -> Value {
        match &self.nodes[i].id {
            Some(id) if !self.duplicated_ids.contains(id) => json!(id),
            _ => json!(self.nodes[i].line),
        }
    }

    /// One past the last line that can belong to node `i`'s subtree (exclusive, 1-based).
    fn region_end(&self, i: usize) -> u64 {
        let end = self.nodes[i].subtree_end;
        self.nodes
            .get(end)
            .map(|n| n.line)
            .or(self.separator)
            .unwrap_or(self.line_count + 1)
    }

    /// One past the last line of node `i`'s own (logical) line.
    fn own_end(&self, i: usize) -> u64 {
        self.nodes
            .get(i + 1)
            .map(|n| n.line)
            .or(self.separator)
            .unwrap_or(self.line_count + 1)
    }

    fn in_subtree(&self, root: usize, i: usize) -> bool {
        i >= root && i < self.nodes[root].subtree_end
    }

    /// Types of `parent`'s children (or of the roots) after removing `without` and adding `with`.
    fn homogeneous_after(&self, parent: Option<usize>, without: usize, with: Option<&str>) -> bool {
        let Some(p) = parent else { return true }; // roots are never checked for mixing
        let mut types: Vec<&str> = self.nodes[p]
            .children
            .iter()
            .filter(|&&c| c != without)
            .map(|&c| self.nodes[c].typ.as_str())
            .collect();
        types.extend(with);
        types.windows(2).all(|w| w[0] == w[1])
    }
}

/// Spans of `before`-lines (1-based, half-open) each op touches; inserts give empty spans.
fn touched(ops: &Value) -> Vec<(u64, u64, &'static str)> {
    let mut shift: i64 = 0;
    let mut out = Vec::new();
    for op in ops.as_array().unwrap() {
        let index = op["index"].as_i64().unwrap();
        let inserted = op["lines"].as_array().map_or(0, Vec::len) as i64;
        let before_index = (index - shift) as u64 + 1;
        match op["op"].as_str().unwrap() {
            "insert" => {
                out.push((before_index, before_index, "insert"));
                shift += inserted;
            }
            "replace" => {
                let count = op["count"].as_i64().unwrap_or(inserted);
                out.push((before_index, before_index + count as u64, "replace"));
                shift += inserted - count;
            }
            "delete" => {
                let count = op["count"].as_i64().unwrap_or(1);
                out.push((before_index, before_index + count as u64, "delete"));
                shift -= count;
            }
            other => panic!("unknown op {other}"),
        }
    }
    out
}

fn sorted_trimmed(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .split('\n')
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    v.sort();
    v
}

struct Case {
    what: String,
    method: &'static str,
    params: Value,
    /// Allowed spans of before-lines (half-open); an insert must fall in [lo, hi].
    allowed: Vec<(u64, u64)>,
    expect_prod: bool,
    /// Known core limitation: `check` matches id-less nodes by label path, so moving an
    /// id-less `[^]` node reports it as newly `[^]`. Tolerated (and counted) for moves.
    tolerate_prod: bool,
    only_deletes: bool,
    same_content: bool,
    added_lines: Option<usize>,
}

const STATUS_CODES: &[&str] = &[" ", "?", "~", "/", "x", "-", "!", "^"];
const SIZES: &[Option<&str>] = &[
    Some("XS"),
    Some("S"),
    Some("M"),
    Some("L"),
    Some("XL"),
    Some("XXL"),
    None,
];

fn make_cases(plan: &Plan, rng: &mut StdRng, per_verb: u64, serial: &mut u32) -> Vec<Case> {
    let n = plan.nodes.len();
    let mut cases = Vec::new();
    for _ in 0..per_verb {
        // setStatus
        let i = rng.random_range(0..n);
        let code = *STATUS_CODES.choose(rng).unwrap();
        let node = &plan.nodes[i];
        cases.push(Case {
            what: format!("setStatus line {} to [{code}]", node.line),
            method: "setStatus",
            params: json!({"text": plan.text, "id": plan.address(i), "status": code}),
            allowed: vec![(node.line, node.line + 1)],
            expect_prod: code == "^" && node.status_code.as_deref() != Some("^"),
            tolerate_prod: false,
            only_deletes: false,
            same_content: false,
            added_lines: None,
        });

        // setSize
        let i = rng.random_range(0..n);
        let size = *SIZES.choose(rng).unwrap();
        cases.push(Case {
            what: format!("setSize line {} to {size:?}", plan.nodes[i].line),
            method: "setSize",
            params: json!({"text": plan.text, "id": plan.address(i), "size": size}),
            allowed: vec![(plan.nodes[i].line, plan.own_end(i))],
            expect_prod: false,
            tolerate_prod: false,
            only_deletes: false,
            same_content: false,
            added_lines: None,
        });

        // addNode under a random parent, with the sigil of the parent's group
        let p = rng.random_range(0..n);
        let sigil = match plan.nodes[p]
            .children
            .first()
            .map(|&c| plan.nodes[c].typ.as_str())
        {
            Some("or") => "|",
            Some("xor") => "=",
            _ => "-",
        };
        *serial += 1;
        let line = format!("{sigil} [ ] Property step {serial} #pt-new-{serial} (S) @prop");
        cases.push(Case {
            what: format!("addNode under line {}", plan.nodes[p].line),
            method: "addNode",
            params: json!({"text": plan.text, "parent": plan.address(p), "line": line}),
            allowed: vec![(plan.nodes[p].line + 1, plan.region_end(p))],
            expect_prod: false,
            tolerate_prod: false,
            only_deletes: false,
            same_content: false,
            added_lines: Some(1),
        });

        // moveNode to a parent outside its subtree, keeping both groups unmixed
        let candidates: Vec<(usize, Option<usize>)> = (0..200)
            .filter_map(|_| {
                let i = rng.random_range(0..n);
                let target = if rng.random_bool(0.15) {
                    None
                } else {
                    Some(rng.random_range(0..n))
                };
                let node = &plan.nodes[i];
                let ok = target.is_none_or(|t| !plan.in_subtree(i, t))
                    && plan.homogeneous_after(node.parent, i, None)
                    && plan.homogeneous_after(target, i, Some(&node.typ));
                ok.then_some((i, target))
            })
            .take(1)
            .collect();
        if let Some(&(i, target)) = candidates.first() {
            let node = &plan.nodes[i];
            let (t_lo, t_hi) = match target {
                Some(t) => (plan.nodes[t].line + 1, plan.region_end(t)),
                None => (1, plan.separator.unwrap_or(plan.line_count + 1)),
            };
            let lo = node.line.min(t_lo);
            let hi = plan.region_end(i).max(t_hi);
            cases.push(Case {
                what: format!(
                    "moveNode line {} under {}",
                    node.line,
                    target.map_or("the roots".to_owned(), |t| format!(
                        "line {}",
                        plan.nodes[t].line
                    ))
                ),
                method: "moveNode",
                params: json!({
                    "text": plan.text,
                    "id": plan.address(i),
                    "parent": target.map(|t| plan.address(t)),
                }),
                allowed: vec![(lo, hi)],
                expect_prod: false,
                tolerate_prod: (i..node.subtree_end).any(|k| {
                    plan.nodes[k].id.is_none() && plan.nodes[k].status_code.as_deref() == Some("^")
                }),
                only_deletes: false,
                same_content: true,
                added_lines: Some(0),
            });
        }

        // removeNode, discard: only the node's own line
        let i = rng.random_range(0..n);
        cases.push(Case {
            what: format!("removeNode(discard) line {}", plan.nodes[i].line),
            method: "removeNode",
            params: json!({"text": plan.text, "id": plan.address(i), "discard": true}),
            allowed: vec![(plan.nodes[i].line, plan.nodes[i].line + 1)],
            expect_prod: false,
            tolerate_prod: false,
            only_deletes: false,
            same_content: false,
            added_lines: None,
        });

        // removeNode, delete: the subtree and its description blocks
        let i = rng.random_range(0..n);
        let mut allowed = vec![(plan.nodes[i].line, plan.region_end(i))];
        if let Some(sep) = plan.separator {
            allowed.push((sep + 1, plan.line_count + 1));
        }
        cases.push(Case {
            what: format!("removeNode(delete) line {}", plan.nodes[i].line),
            method: "removeNode",
            params: json!({"text": plan.text, "id": plan.address(i), "discard": false}),
            allowed,
            expect_prod: false,
            tolerate_prod: false,
            only_deletes: true,
            same_content: false,
            added_lines: None,
        });
    }
    cases
}

async fn run_case(engine: &Engine, plan: &Plan, case: &Case) -> Result<(), String> {
    let edited = match engine.call(case.method, case.params.clone()).await {
        Ok(r) => r,
        // A token split by a continuation line is refused on purpose (edit the text directly).
        Err(EngineError::Core { code, .. }) if code == "unsupportedLine" => return Ok(()),
        Err(e) => return Err(format!("edit failed: {e}")),
    };
    let after = edited["text"]
        .as_str()
        .ok_or("no text in result")?
        .to_owned();

    // The result parses.
    engine
        .call("inspect", json!({"text": after, "include": ["warnings"]}))
        .await
        .map_err(|e| format!("result does not inspect: {e}"))?;

    // Only the intended lines change.
    let ops = engine
        .call("computeOps", json!({"before": plan.text, "after": after}))
        .await
        .map_err(|e| format!("computeOps: {e}"))?["ops"]
        .clone();
    for (lo, hi, kind) in touched(&ops) {
        let inside = case.allowed.iter().any(|&(a, b)| {
            if kind == "insert" {
                lo >= a && lo <= b
            } else {
                lo >= a && hi <= b
            }
        });
        if !inside {
            return Err(format!(
                "{kind} of lines {lo}..{hi} lies outside {:?}; ops {ops}",
                case.allowed
            ));
        }
        if case.only_deletes && kind != "delete" {
            return Err(format!("expected only deletes, got {ops}"));
        }
    }
    // The edit's own ops agree with computeOps' view of the change.
    let replayed = engine
        .call("applyOps", json!({"text": plan.text, "ops": edited["ops"]}))
        .await
        .map_err(|e| format!("applyOps of the edit's ops: {e}"))?;
    if replayed["text"].as_str() != Some(after.as_str()) {
        return Err("applyOps(before, edit.ops) differs from the edit's text".into());
    }
    if case.same_content && sorted_trimmed(&plan.text) != sorted_trimmed(&after) {
        return Err("a move changed line content, not just position and indentation".into());
    }
    if let Some(added) = case.added_lines {
        let delta = after.split('\n').count() as i64 - plan.text.split('\n').count() as i64;
        if delta != added as i64 {
            return Err(format!("expected {added} added lines, got {delta}"));
        }
    }

    // No new structural warnings (a node newly set to [^] is expected to block).
    let check = engine
        .check(&after, Some(&plan.text))
        .await
        .map_err(|e| format!("check: {e}"))?;
    let findings = check["findings"].as_array().ok_or("no findings")?;
    let mut prod_seen = false;
    for f in findings.iter().filter(|f| f["blocking"] == json!(true)) {
        match f["type"].as_str() {
            Some("prodStatus") if case.expect_prod => prod_seen = true,
            Some("prodStatus") if case.tolerate_prod => {
                eprintln!("known core limitation: {}: {}", case.what, f["text"]);
            }
            // Moving/removing one of several holders of an id re-anchors that warning.
            Some("duplicateId")
                if f["id"]
                    .as_str()
                    .is_some_and(|id| plan.duplicated_ids.iter().any(|d| d == id)) => {}
            _ => return Err(format!("new blocking finding {f}")),
        }
    }
    if case.expect_prod && !prod_seen {
        return Err(format!("setting [^] did not block: {check}"));
    }
    Ok(())
}

#[tokio::test]
async fn edit_verbs_change_only_their_lines() {
    let Some(dir) = fixtures_dir() else { return };
    let seed = env_num("CORE_EDITS_SEED", 1);
    let per_verb = env_num("CORE_EDITS_CASES", 6);
    let engine = Engine::new(EngineConfig {
        pool_size: 2,
        deadline: Duration::from_secs(30),
        ..EngineConfig::default()
    })
    .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut serial = 0;
    let (mut total, mut failures) = (0, Vec::new());
    for name in PLANS {
        let text = std::fs::read_to_string(dir.join(format!("{name}.werkbaum"))).unwrap();
        let tree = engine
            .call(
                "inspect",
                json!({"text": text, "include": ["tree"], "showDiscarded": true}),
            )
            .await
            .unwrap();
        let plan = Plan::new(text, &tree["tree"]);
        assert!(!plan.nodes.is_empty(), "{name}: no nodes");
        for case in make_cases(&plan, &mut rng, per_verb, &mut serial) {
            total += 1;
            if let Err(why) = run_case(&engine, &plan, &case).await {
                failures.push(format!(
                    "{name}: {} ({}): {why}",
                    case.what, case.params["id"]
                ));
            }
        }
    }
    println!(
        "{total} edit cases (seed {seed}), {} failed",
        failures.len()
    );
    assert!(total > 100, "too few cases: {total}");
    assert!(
        failures.is_empty(),
        "{} of {total} edit cases failed (seed {seed}):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
