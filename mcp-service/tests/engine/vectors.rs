//! Core vector test: runs every case in `mcp-service/core/tests/*.json` through the engine.
//!
//! Each file is an array of `{name, method, params, expect}`; `expect` is `{result: <partial>}`
//! (every key given must deep-equal the actual value; objects are compared as subsets
//! recursively, arrays whole) or `{error: "<code>"}`.
use std::path::PathBuf;
use std::time::Duration;

use mcp_service::{Engine, EngineConfig, EngineError};
use serde_json::Value;

/// `expected` is a subset of `actual`: objects recursively by key, everything else equal.
fn subset(expected: &Value, actual: &Value, at: &str) -> Result<(), String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let path = format!("{at}.{k}");
                match a.get(k) {
                    Some(av) => subset(ev, av, &path)?,
                    None => return Err(format!("{path}: missing")),
                }
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                return Err(format!("{at}: {} items, expected {}", a.len(), e.len()));
            }
            // Arrays are compared whole; recurse only to name the first difference.
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                if ev != av {
                    return Err(format!("{at}[{i}]: got {av}, expected {ev}"));
                }
            }
            Ok(())
        }
        _ if expected == actual => Ok(()),
        _ => Err(format!("{at}: got {actual}, expected {expected}")),
    }
}

#[tokio::test]
async fn every_core_vector_passes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("core/tests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no vector files in {}", dir.display());

    let engine = Engine::new(EngineConfig {
        pool_size: 2,
        deadline: Duration::from_secs(30),
        ..EngineConfig::default()
    })
    .unwrap();

    let (mut total, mut failures) = (0usize, Vec::new());
    for file in &files {
        let fname = file.file_name().unwrap().to_string_lossy().into_owned();
        let cases: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(file).unwrap())
            .unwrap_or_else(|e| panic!("{fname}: not a JSON array of cases: {e}"));
        for case in cases {
            total += 1;
            let name = format!("{fname}: {}", case["name"].as_str().unwrap_or("(unnamed)"));
            let method = case["method"].as_str().unwrap_or_default();
            let outcome = engine.call(method, case["params"].clone()).await;
            let expect = &case["expect"];
            let verdict = match (expect.get("result"), expect.get("error"), outcome) {
                (Some(want), _, Ok(got)) => subset(want, &got, "result"),
                (Some(_), _, Err(e)) => Err(format!("expected a result, got error {e}")),
                (None, Some(code), Err(EngineError::Core { code: got, message })) => {
                    if code.as_str() == Some(got.as_str()) {
                        Ok(())
                    } else {
                        Err(format!("expected error {code}, got {got}: {message}"))
                    }
                }
                (None, Some(code), Err(e)) => Err(format!("expected core error {code}, got {e}")),
                (None, Some(code), Ok(got)) => {
                    Err(format!("expected error {code}, got result {got}"))
                }
                (None, None, _) => Err("case has neither expect.result nor expect.error".into()),
            };
            if let Err(why) = verdict {
                failures.push(format!("{name}\n    {why}"));
            }
        }
    }
    println!("{total} core vectors run, {} failed", failures.len());
    assert!(
        failures.is_empty(),
        "{} of {total} core vectors failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The not-a-plan notice fires on no vector text (they are terse plans, not prose) except the
/// one vector written to show it.
#[tokio::test]
async fn no_vector_text_gets_a_notice() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("core/tests");
    // Notices are what this test is about, not speed: a loaded 2-core machine may take longer
    // than the production deadline for one of hundreds of calls.
    let engine = Engine::new(EngineConfig {
        deadline: Duration::from_secs(30),
        ..EngineConfig::default()
    })
    .unwrap();
    let mut seen = 0;
    for file in std::fs::read_dir(&dir).unwrap() {
        let file = file.unwrap().path();
        if file.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let cases: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        for case in cases {
            let name = case["name"].as_str().unwrap_or_default();
            if name.contains("notAPlan") {
                continue;
            }
            for key in ["text", "against", "before", "after"] {
                let Some(text) = case["params"][key].as_str() else {
                    continue;
                };
                seen += 1;
                let r = engine
                    .call("inspect", serde_json::json!({ "text": text }))
                    .await
                    .unwrap();
                assert_eq!(r["notices"], serde_json::json!([]), "{name} ({key})");
            }
        }
    }
    assert!(seen > 200, "only {seen} vector texts");
}
