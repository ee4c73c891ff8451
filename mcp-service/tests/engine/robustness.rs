//! Core robustness test: hostile and huge plans return a result or a clean error within the
//! deadline, runaway bundles hit the deadline and the memory limit, and the pool recovers.
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use mcp_service::{CoreSource, Engine, EngineConfig, EngineError};
use serde_json::{Value, json};

/// The production default deadline: every hostile input must finish (or be cut) within it.
const DEADLINE: Duration = Duration::from_secs(2);
/// Time allowed on top of the deadline for the Rust side (encoding a 50 MB param, parsing the
/// reply in a debug build) and for replacing a discarded runtime. Generous on purpose: the
/// engine enforces the deadline on the JS side; this bound only proves nothing hangs, also on
/// a loaded 2-core CI machine running the other tests of this file in parallel.
const SLACK: Duration = Duration::from_secs(45);

fn engine() -> Engine {
    Engine::new(EngineConfig {
        pool_size: 2,
        deadline: DEADLINE,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// A result, or an error that is one of the engine's clean outcomes (never a hang or a panic).
fn assert_clean(what: &str, outcome: &Result<Value, EngineError>, elapsed: Duration) {
    assert!(
        elapsed < DEADLINE + SLACK,
        "{what}: took {elapsed:?}, beyond the deadline"
    );
    match outcome {
        Ok(v) => assert!(v.is_object(), "{what}: result is not an object"),
        Err(
            EngineError::Core { .. }
            | EngineError::Deadline(_)
            | EngineError::OutOfMemory(_)
            | EngineError::StackOverflow(_),
        ) => {}
        // A reply too deep to hand to Rust is refused cleanly too.
        Err(EngineError::Engine(m)) if m.contains("nested") => {}
        Err(e) => panic!("{what}: unclean error {e:?}"),
    }
    println!(
        "{what}: {} in {elapsed:?}",
        match outcome {
            Ok(_) => "result".to_owned(),
            Err(e) => format!("error ({e})"),
        }
    );
}

async fn timed(
    engine: &Engine,
    what: &str,
    method: &str,
    params: Value,
) -> Result<Value, EngineError> {
    let started = Instant::now();
    let outcome = engine.call(method, params).await;
    assert_clean(what, &outcome, started.elapsed());
    outcome
}

/// The pool still computes a known plan correctly.
async fn assert_pool_healthy(engine: &Engine) {
    let text = "R (M)\n  - [x] a (S)\n  - [ ] b (S) @tom\n  | c\n";
    for _ in 0..4 {
        let r = engine
            .call("inspect", json!({"text": text, "include": ["warnings"]}))
            .await
            .unwrap();
        assert_eq!(r["summary"]["nodes"], 4, "{r}");
        assert_eq!(r["warnings"][0]["type"], "mixedGate", "{r}");
    }
}

#[tokio::test]
async fn one_mebibyte_line() {
    let engine = engine();
    let mut line = String::from("- [ ] ");
    while line.len() < 1024 * 1024 {
        line.push_str("word (M) @who &mark #id :#dep !!! https://x.y/z ");
    }
    let text = format!("Root\n{line}\n  - child\n");
    timed(&engine, "1 MiB line", "inspect", json!({"text": text}))
        .await
        .ok();
    timed(
        &engine,
        "1 MiB line, setSize",
        "setSize",
        json!({"text": text, "id": 2, "size": "S"}),
    )
    .await
    .ok();
    assert_pool_healthy(&engine).await;
}

#[tokio::test]
async fn deep_nesting() {
    let engine = engine();
    // Depth is indentation width (a tab counts 2), so depth d needs ~d/2 tabs per line.
    let nest = |depth: usize| {
        let mut text = String::new();
        for d in 0..depth {
            let tabs = d / 2;
            let space = if d % 2 == 1 { " " } else { "" };
            let _ = writeln!(text, "{}{space}- n{d} (S)", "\t".repeat(tabs));
        }
        text
    };
    // 2,000 levels: a real result, computed without recursion on depth (a generous deadline
    // here, so a loaded CI machine cannot turn this into a deadline error).
    let text = nest(2000);
    let patient = Engine::new(EngineConfig {
        pool_size: 1,
        deadline: Duration::from_secs(20),
        ..EngineConfig::default()
    })
    .unwrap();
    let r = patient
        .call(
            "inspect",
            json!({"text": text, "include": ["warnings", "path"]}),
        )
        .await
        .unwrap();
    assert_eq!(r["summary"]["nodes"], 2000);
    timed(&engine, "2,000-deep tree", "inspect", json!({"text": text}))
        .await
        .ok();
    // 10,000 levels (~25 MB of indentation): a result or a clean error.
    let text = nest(10_000);
    timed(
        &engine,
        "10,000-deep path",
        "inspect",
        json!({"text": text, "include": ["path"]}),
    )
    .await
    .ok();
    timed(
        &engine,
        "10,000-deep tree",
        "inspect",
        json!({"text": text}),
    )
    .await
    .ok();
    assert_pool_healthy(&engine).await;
}

#[tokio::test]
async fn fifty_thousand_nodes() {
    let engine = engine();
    let mut text = String::new();
    let mut n = 0;
    'outer: for r in 0..100 {
        let _ = writeln!(text, "[~] #r{r}: Root {r} (XL) @owner{}", r % 7);
        for g in 0..50 {
            let sigil = if g % 5 == 0 { "|" } else { "-" };
            let _ = writeln!(text, "  - #g{r}.{g}: Group {g}");
            for c in 0..9 {
                let dep = if c == 0 && r > 0 {
                    format!(" :#g{}.{g}", r - 1)
                } else {
                    String::new()
                };
                let _ = writeln!(text, "    {sigil} [ ] #c{r}.{g}.{c}: Item {c} (S){dep}");
                n += 1;
            }
            n += 1;
            if n >= 50_000 {
                break 'outer;
            }
        }
        n += 1;
    }
    timed(
        &engine,
        "50,000 nodes, summary+path",
        "inspect",
        json!({"text": text, "include": ["path"]}),
    )
    .await
    .ok();
    timed(
        &engine,
        "50,000 nodes, full",
        "inspect",
        json!({"text": text}),
    )
    .await
    .ok();
    timed(
        &engine,
        "50,000 nodes, check",
        "check",
        json!({"text": text, "against": text}),
    )
    .await
    .ok();
    assert_pool_healthy(&engine).await;
}

#[tokio::test]
async fn pathological_regex_input() {
    let engine = engine();
    const N: usize = 200_000;
    let runs: Vec<(&str, String)> = vec![
        ("@ run", format!("- {}", "@".repeat(N))),
        ("# run", format!("- {}", "#".repeat(N))),
        ("( run", format!("- {}", "(".repeat(N))),
        ("(M run", format!("- {}", "(M".repeat(N / 2))),
        ("(S) run", format!("- {}", " (S)".repeat(N / 4))),
        ("backslash run", format!("- {}", "\\".repeat(N))),
        ("continuation chain", "- a \\\n".repeat(N / 8)),
        ("space run", format!("- x{}y", " ".repeat(N))),
        ("leading spaces", format!("{}- x", " ".repeat(N))),
        ("%% run", format!("- x {}", "%%".repeat(N / 2))),
        ("& run", format!("- {}", " &".repeat(N / 2))),
        (":# run", format!("- x :#{}", "a,#".repeat(N / 3))),
        ("! run", format!("- x {}", "!".repeat(N))),
        ("[ run", format!("{}x", "[".repeat(N))),
        ("url run", format!("- https://{}", "a".repeat(N))),
        ("quote lines", "- a\n\" x\n".repeat(N / 8)),
        (
            "separator then junk",
            format!("- a #a\n---\n{}", "#a:\n  t\n".repeat(N / 8)),
        ),
        ("CR run", format!("- a{}b\r\n", "\r".repeat(N))),
        ("mixed", "@#(\\ %%&:#!!![x]|=+-".repeat(N / 20)),
    ];
    for (what, text) in runs {
        let text = format!("Root\n{text}\n");
        timed(&engine, what, "inspect", json!({"text": text}))
            .await
            .ok();
        timed(&engine, what, "check", json!({"text": text}))
            .await
            .ok();
    }
    assert_pool_healthy(&engine).await;
}

#[tokio::test]
async fn coupled_search_beyond_the_exact_limit_is_greedy() {
    let engine = engine();
    // 40 coupled binary groups: P = 2^40 > 20000.
    let mut text = String::from("R\n");
    for g in 1..=40 {
        let _ = write!(text, "  - G{g}\n    | a{g} (XS) :#t\n    | b{g} (S)\n");
    }
    text.push_str("  + #t: T (S)\n");
    let r = timed(
        &engine,
        "P = 2^40",
        "inspect",
        json!({"text": text, "include": ["warnings", "path"]}),
    )
    .await
    .unwrap();
    assert_eq!(r["summary"]["exact"], false, "{r}");
    assert_eq!(r["path"]["exact"], false);
    let types: Vec<&str> = r["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["type"].as_str())
        .collect();
    assert!(types.contains(&"cheapApprox"), "{types:?}");
}

/// The real core behind a wrapper entry that can also spin forever or hog memory.
fn runaway_bundle() -> CoreSource {
    let core = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("core");
    let mut modules = CoreSource::Dir(core).read().unwrap();
    for (name, _) in &mut modules {
        if name == "index.js" {
            *name = "core-index.js".to_owned();
        }
    }
    modules.push((
        "index.js".to_owned(),
        r#"
import { dispatch as core } from './core-index.js';
export function dispatch(method, params) {
  if (method === 'spin') { for (;;) {} }
  if (method === 'spinCatching') { for (;;) { try { for (;;) {} } catch (e) {} } }
  if (method === 'hog') { const a = []; for (;;) a.push('x'.repeat(65536) + a.length); }
  if (method === 'recurse') { const f = (n) => f(n + 1) + 1; return f(0); }
  return core(method, params);
}
"#
        .to_owned(),
    ));
    CoreSource::Modules(modules)
}

#[tokio::test]
async fn runaway_bundles_hit_the_limits_and_the_pool_recovers() {
    let engine = Engine::new(EngineConfig {
        pool_size: 2,
        deadline: Duration::from_millis(500),
        memory_limit: 32 * 1024 * 1024,
        core: runaway_bundle(),
        ..EngineConfig::default()
    })
    .unwrap();
    assert_pool_healthy(&engine).await;

    // Both runtimes spin at once; both are cut at the deadline.
    let started = Instant::now();
    let (a, b) = tokio::join!(
        engine.call("spin", json!({})),
        engine.call("spinCatching", json!({}))
    );
    assert!(matches!(a, Err(EngineError::Deadline(_))), "{a:?}");
    assert!(matches!(b, Err(EngineError::Deadline(_))), "{b:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_pool_healthy(&engine).await;

    let hog = engine.call("hog", json!({})).await;
    assert!(matches!(hog, Err(EngineError::OutOfMemory(_))), "{hog:?}");
    assert_pool_healthy(&engine).await;

    let deep = engine.call("recurse", json!({})).await;
    assert!(
        matches!(deep, Err(EngineError::StackOverflow(_))),
        "{deep:?}"
    );

    // Many failures in a row never exhaust the pool.
    for _ in 0..5 {
        assert!(engine.call("spin", json!({})).await.is_err());
        assert!(engine.call("hog", json!({})).await.is_err());
    }
    assert_pool_healthy(&engine).await;
    let mem = engine.memory_usage().await.unwrap();
    assert!(mem.malloc_size < 32 * 1024 * 1024, "{mem:?}");
}

#[tokio::test]
async fn a_spinning_runtime_does_not_block_the_others() {
    let engine = Engine::new(EngineConfig {
        pool_size: 2,
        deadline: Duration::from_secs(3),
        core: runaway_bundle(),
        ..EngineConfig::default()
    })
    .unwrap();
    let spinner = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.call("spin", json!({})).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    assert_pool_healthy(&engine).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(
        spinner.await.unwrap(),
        Err(EngineError::Deadline(_))
    ));
}
