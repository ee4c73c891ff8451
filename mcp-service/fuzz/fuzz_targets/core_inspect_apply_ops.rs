//! Fuzz target: arbitrary bytes (lossy UTF-8) to the core's `inspect`, `check` and `applyOps`
//! through the engine. Any outcome but a result or a clean error is a crash.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use mcp_service::{Engine, EngineConfig, EngineError};
use serde_json::{Value, json};

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        match Engine::new(EngineConfig {
            pool_size: 1,
            deadline: Duration::from_secs(5),
            ..EngineConfig::default()
        }) {
            Ok(engine) => engine,
            Err(e) => panic!("the built-in core does not load: {e}"),
        }
    })
}

/// Clean outcomes: a result, the core's own error, or a limit.
fn assert_clean(what: &str, outcome: Result<Value, EngineError>) -> Option<Value> {
    match outcome {
        Ok(v) => Some(v),
        Err(EngineError::Core { code, message }) => {
            assert_ne!(code, "internal", "{what}: the core threw: {message}");
            None
        }
        Err(
            EngineError::Deadline(_) | EngineError::OutOfMemory(_) | EngineError::StackOverflow(_),
        ) => None,
        Err(e) => panic!("{what}: {e}"),
    }
}

/// Line ops derived from the input: a JSON array is used as is, otherwise bytes pick ops.
fn ops_from(data: &[u8], text: &str) -> Value {
    if let Ok(v @ Value::Array(_)) = serde_json::from_slice::<Value>(data) {
        return v;
    }
    let lines: Vec<&str> = text.split('\n').collect();
    let ops: Vec<Value> = data
        .chunks(3)
        .take(16)
        .map(|c| {
            let index = usize::from(c[0]) % (lines.len() + 2);
            let count = c.get(1).map_or(1, |b| usize::from(*b % 4));
            let line = lines.get(usize::from(c.get(2).copied().unwrap_or(0)) % lines.len().max(1));
            match c[0] % 3 {
                0 => json!({"op": "insert", "index": index, "lines": [line.copied().unwrap_or("- x")]}),
                1 => json!({"op": "replace", "index": index, "count": count, "lines": ["  - [x] y (S)"]}),
                _ => json!({"op": "delete", "index": index, "count": count}),
            }
        })
        .collect();
    Value::Array(ops)
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data).into_owned();
    let engine = engine();
    assert_clean(
        "inspect",
        engine.call_blocking("inspect", json!({"text": text})),
    );
    assert_clean(
        "check",
        engine.call_blocking("check", json!({"text": text, "against": "R\n  - a\n"})),
    );
    let ops = ops_from(data, &text);
    if let Some(applied) = assert_clean(
        "applyOps",
        engine.call_blocking("applyOps", json!({"text": text, "ops": ops})),
    ) {
        if let Some(after) = applied["text"].as_str() {
            assert_clean(
                "inspect after applyOps",
                engine.call_blocking("inspect", json!({"text": after})),
            );
        }
    }
});
