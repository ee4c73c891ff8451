//! Core fixtures test: the six Werkbaum example plans through the engine give upstream's figures.
use std::time::Duration;

use crate::fixtures_dir;
use mcp_service::{Engine, EngineConfig};
use serde_json::{Value, json};

struct Expect {
    plan: &'static str,
    nodes: u64,
    warnings: &'static [&'static str],
    needed: u64,
    stations: u64,
}

const EXPECT: &[Expect] = &[
    Expect {
        plan: "werkbaum",
        nodes: 233,
        warnings: &[],
        needed: 188,
        stations: 30,
    },
    Expect {
        plan: "example-werkbaum",
        nodes: 104,
        warnings: &["duplicateId", "sizeConflict", "sizeConflict"],
        needed: 80,
        stations: 21,
    },
    Expect {
        plan: "example-plan-0",
        nodes: 19,
        warnings: &[],
        needed: 16,
        stations: 5,
    },
    Expect {
        plan: "example-plan-1",
        nodes: 26,
        warnings: &["sizeConflict"],
        needed: 20,
        stations: 11,
    },
    Expect {
        plan: "example-plan-2",
        nodes: 43,
        warnings: &["sizeConflict"],
        needed: 40,
        stations: 16,
    },
    Expect {
        plan: "example-plan-3",
        nodes: 28,
        warnings: &["sizeConflict"],
        needed: 22,
        stations: 11,
    },
];

fn engine() -> Engine {
    Engine::new(EngineConfig {
        pool_size: 2,
        // Debug builds of QuickJS are slow; the deadline here guards against hangs only.
        deadline: Duration::from_secs(30),
        ..EngineConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn fixtures_match_upstream_figures() {
    let Some(dir) = fixtures_dir() else { return };
    let engine = engine();
    let mut failures = Vec::new();
    for e in EXPECT {
        let text = std::fs::read_to_string(dir.join(format!("{}.werkbaum", e.plan))).unwrap();
        let r = engine
            .call("inspect", json!({ "text": text }))
            .await
            .unwrap();
        let s = &r["summary"];
        let mut types: Vec<&str> = r["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["type"].as_str().unwrap())
            .collect();
        types.sort_unstable();
        let got = (
            s["nodes"].as_u64(),
            s["warnings"].as_u64(),
            s["needed"].as_u64(),
            s["stations"].as_u64(),
            s["exact"].as_bool(),
        );
        let want = (
            Some(e.nodes),
            Some(e.warnings.len() as u64),
            Some(e.needed),
            Some(e.stations),
            Some(true),
        );
        if got != want || types != e.warnings {
            failures.push(format!(
                "{}: got (nodes, warnings, needed, stations, exact) = {got:?} {types:?}, want {want:?} {:?}",
                e.plan, e.warnings
            ));
        }
        // The path section agrees with the summary.
        assert_eq!(
            r["path"]["needed"].as_array().map(Vec::len),
            Some(e.needed as usize),
            "{}",
            e.plan
        );
        assert_eq!(
            r["path"]["stations"].as_array().map(Vec::len),
            Some(e.stations as usize),
            "{}",
            e.plan
        );
    }
    assert!(
        failures.is_empty(),
        "fixture figures differ:\n{}",
        failures.join("\n")
    );
}

#[tokio::test]
async fn fixtures_check_clean_against_themselves() {
    let Some(dir) = fixtures_dir() else { return };
    let engine = engine();
    for e in EXPECT {
        let text = std::fs::read_to_string(dir.join(format!("{}.werkbaum", e.plan))).unwrap();
        let r = engine.check(&text, Some(&text)).await.unwrap();
        assert_eq!(r["blocking"], Value::Bool(false), "{}: {r}", e.plan);
        assert_eq!(r["findings"], json!([]), "{}", e.plan);
    }
}

#[tokio::test]
async fn subtree_inspect_by_id() {
    let Some(dir) = fixtures_dir() else { return };
    let engine = engine();
    let text = std::fs::read_to_string(dir.join("werkbaum.werkbaum")).unwrap();
    let r = engine
        .inspect(&text, Some("not"), Some(&["tree"]))
        .await
        .unwrap();
    let tree = r["tree"].as_array().unwrap();
    assert_eq!(tree.len(), 1);
    assert_eq!(tree[0]["id"], "not");
    let err = engine
        .inspect(&text, Some("no-such-id"), None)
        .await
        .unwrap_err();
    assert_eq!(err.core_code(), Some("unknownNode"));
}

/// The core caches the analysis of the last text per runtime. Answers must not depend on what
/// the runtime saw before: every call interleaved on one runtime equals the same call on a
/// fresh one.
#[tokio::test]
async fn answers_do_not_depend_on_earlier_calls() {
    let Some(dir) = fixtures_dir() else { return };
    let fresh = || {
        Engine::new(EngineConfig {
            pool_size: 1,
            deadline: Duration::from_secs(30),
            ..EngineConfig::default()
        })
        .unwrap()
    };
    let a = std::fs::read_to_string(dir.join("example-werkbaum.werkbaum")).unwrap();
    let b = std::fs::read_to_string(dir.join("example-plan-1.werkbaum")).unwrap();
    let calls = [
        ("inspect", json!({ "text": a })),
        ("inspect", json!({ "text": a, "showDiscarded": true })),
        ("inspect", json!({ "text": a, "include": ["path"] })),
        ("check", json!({ "text": a, "against": b })),
        (
            "inspect",
            json!({ "text": a, "id": 1, "include": ["tree"] }),
        ),
        ("check", json!({ "text": b, "against": a })),
        ("inspect", json!({ "text": b })),
        ("inspect", json!({ "text": a, "showDiscarded": true })),
        ("setStatus", json!({ "text": a, "id": 1, "status": "x" })),
        ("inspect", json!({ "text": a })),
    ];
    let shared = fresh();
    for (method, params) in &calls {
        let got = shared.call(method, params.clone()).await;
        let want = fresh().call(method, params.clone()).await;
        assert_eq!(got, want, "{method} {params}");
    }
}
