//! The cost of one `[[policy]]` decision (issue 43 point 2): the 20 rules of
//! `bench/policy-20.toml` (none matches, so each decision evaluates all 20) decided for a
//! `tools/call` with arguments and for a `tools/list` filter's question, each decision timed
//! on its own; prints p50, p99 and p99.9. Run it with `--release`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use pforte::for_tests::{Client, Input, RuleConfig, Rules, Tool, User};

/// Decisions measured per case (after as many unmeasured ones).
const DECISIONS: usize = 200_000;

fn rules() -> Rules {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/policy-20.toml");
    let text = std::fs::read_to_string(path).expect("bench/policy-20.toml");
    let file: toml::Table = toml::from_str(&text).expect("TOML");
    let configs: Vec<RuleConfig> = file["policy"]
        .as_array()
        .expect("[[policy]]")
        .iter()
        .map(|v| v.clone().try_into().expect("a [[policy]] table"))
        .collect();
    assert_eq!(configs.len(), 20);
    let started = Instant::now();
    let rules = Rules::compile(&configs, &["mcp", "finance"]).expect("the rules compile");
    println!("compiled 20 rules in {:?}", started.elapsed());
    rules
}

/// Each of `n` calls of `decide` timed: p50, p99, p99.9.
fn measure(n: usize, mut decide: impl FnMut() -> bool) -> (Duration, Duration, Duration) {
    for _ in 0..n {
        assert!(
            !decide(),
            "a rule matched: the benchmark wants all 20 evaluated"
        );
    }
    let mut took: Vec<Duration> = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let matched = decide();
        took.push(t.elapsed());
        std::hint::black_box(matched);
    }
    took.sort();
    let at = |q: f64| took[((n as f64) * q) as usize];
    (at(0.5), at(0.99), at(0.999))
}

fn main() {
    let rules = rules();
    let groups = vec!["eng".to_owned(), "planning".to_owned()];
    let roles = vec!["everyone".to_owned()];
    let annotations = serde_json::json!({"readOnlyHint": true, "title": "Read a plan"});
    let args = serde_json::json!({
        "document": "6f1c2a4e-0b7d-4c1e-9a53-3d2b8f0e7c11",
        "version": 42,
        "include": ["tree", "warnings"],
    });
    let user = User {
        name: "ann@example.com",
        email: Some("ann@example.com"),
        groups: &groups,
        roles: &roles,
        kind: "oauth",
    };
    let client = Client {
        id: "c-7f3a",
        name: Some("Claude"),
    };
    let call = Input {
        user,
        client,
        route: "mcp",
        tool: Some(Tool {
            name: "werkbaum_inspect",
            annotations: Some(&annotations),
        }),
        args: Some(&args),
        method: "tools/call",
        ip: Some("127.0.0.1".parse().unwrap()),
        now_ms: 1_800_000_000_000 + 12 * 3_600_000,
    };
    let list = Input { args: None, ..call };
    println!("one decision, 20 rules, {DECISIONS} decisions per case:");
    let (p50, p99, p999) = measure(DECISIONS, || rules.decide(&call).is_some());
    println!("  tools/call with arguments   p50 {p50:>9.2?}  p99 {p99:>9.2?}  p99.9 {p999:>9.2?}");
    let (p50, p99, p999) = measure(DECISIONS, || rules.hides(&list));
    println!("  tools/list: hidden?         p50 {p50:>9.2?}  p99 {p99:>9.2?}  p99.9 {p999:>9.2?}");
}
