//! core-bench: latency of `inspect` through the core engine (warm), the same core under `node`
//! when installed, and memory per runtime.
//!
//! `cargo run --release -p mcp-service --bin core-bench [-- --core DIR --plan FILE --runs N]`

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mcp_service::engine::{CoreSource, Engine, EngineConfig};
use serde_json::json;

struct Args {
    core: Option<PathBuf>,
    plan: PathBuf,
    runs: usize,
}

fn parse_args() -> Result<Args, String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut args = Args {
        core: None,
        plan: manifest.join("../../shared/fixtures/werkbaum/werkbaum.werkbaum"),
        runs: 200,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--core" => args.core = Some(PathBuf::from(value()?)),
            "--plan" => args.plan = PathBuf::from(value()?),
            "--runs" => args.runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "-h" | "--help" => {
                return Err("usage: core-bench [--core DIR] [--plan FILE] [--runs N]".into());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// A plan with `n` nodes: roots with groups of items, alternatives, sizes, owners, statuses,
/// ids and cross-dependencies.
fn generated_plan(n: usize) -> String {
    let mut text = String::new();
    let mut count = 0;
    let statuses = ["[ ] ", "[x] ", "[~] ", "", "[?] ", "[^] "];
    let sizes = ["(XS)", "(S)", "(M)", ""];
    let mut r = 0;
    while count < n {
        let _ = writeln!(text, "[~] #r{r}: Area {r} @lead{}", r % 3);
        count += 1;
        for g in 0..10 {
            if count >= n {
                break;
            }
            let _ = writeln!(text, "  - #g{r}.{g}: Feature {g} (L)");
            count += 1;
            let sigil = if g % 4 == 3 { "|" } else { "-" };
            for c in 0..9 {
                if count >= n {
                    break;
                }
                let st = statuses[(r + g + c) % statuses.len()];
                let size = sizes[(g + c) % sizes.len()];
                let dep = if c == 0 && r > 0 {
                    format!(" :#g{}.{g}", r - 1)
                } else {
                    String::new()
                };
                let _ = writeln!(
                    text,
                    "    {sigil} {st}#i{r}.{g}.{c}: Task {c} {size} @dev{}{dep}",
                    (r + c) % 5
                );
                count += 1;
            }
        }
        r += 1;
    }
    text
}

struct Stats {
    p50: Duration,
    p99: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let pick = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples.get(i).copied().unwrap_or_default()
    };
    Stats {
        p50: pick(0.5),
        p99: pick(0.99),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// How the text varies between calls.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The same text every call: the core's analysis cache answers after the first.
    Warm,
    /// A text never seen before on every call (a distinct comment line appended): every call
    /// parses and models from scratch.
    Cold,
}

/// How the engine hands back the result.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Out {
    /// `Engine::call_raw`: the result's JSON text, validated.
    Raw,
    /// `Engine::call`: parsed into a `serde_json::Value`.
    Value,
}

fn params_for(text: &str, mode: Mode, i: usize, extra: &serde_json::Value) -> serde_json::Value {
    let mut p = extra.clone();
    p["text"] = match mode {
        Mode::Warm => json!(text),
        Mode::Cold => json!(format!("{text}\n%% core-bench call {i}\n")),
    };
    p
}

async fn bench_engine(
    engine: &Engine,
    text: &str,
    runs: usize,
    mode: Mode,
    out: Out,
    extra: serde_json::Value,
) -> Result<Stats, String> {
    let warmup = (runs / 10).max(3);
    let mut samples = Vec::with_capacity(runs);
    for i in 0..warmup + runs {
        let params = params_for(text, mode, i, &extra);
        let t = Instant::now();
        match out {
            Out::Raw => engine.call_raw("inspect", params).await.map(drop),
            Out::Value => engine.call("inspect", params).await.map(drop),
        }
        .map_err(|e| format!("inspect: {e}"))?;
        if i >= warmup {
            samples.push(t.elapsed());
        }
    }
    Ok(stats(samples))
}

const NODE_DRIVER: &str = r#"
import { pathToFileURL } from 'node:url';
import { readFileSync } from 'node:fs';
const [coreDir, ...jobs] = process.argv.slice(2);
const { dispatch } = await import(pathToFileURL(coreDir + '/index.js').href);
const out = {};
for (let i = 0; i < jobs.length; i += 4) {
  const [name, file, runs, mode] = [jobs[i], jobs[i + 1], Number(jobs[i + 2]), jobs[i + 3]];
  const text = readFileSync(file, 'utf8');
  const warmup = Math.max(3, runs / 10);
  const t = [];
  for (let k = 0; k < warmup + runs; k++) {
    const params = JSON.stringify({ text: mode === 'cold' ? text + '\n%% core-bench call ' + k + '\n' : text });
    const s = process.hrtime.bigint();
    const r = dispatch('inspect', params);
    JSON.parse(r);
    if (k >= warmup) t.push(Number(process.hrtime.bigint() - s) / 1e6);
  }
  t.sort((a, b) => a - b);
  const q = (p) => t[Math.round((t.length - 1) * p)];
  out[name] = { p50: q(0.5), p99: q(0.99) };
}
console.log(JSON.stringify(out));
"#;

/// Runs the same core under node; `None` when node is missing or fails.
fn bench_node(core_dir: &Path, jobs: &[(&str, &str, usize, Mode)]) -> Option<serde_json::Value> {
    let dir = std::env::temp_dir().join(format!("pforte-core-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let driver = dir.join("driver.mjs");
    std::fs::write(&driver, NODE_DRIVER).ok()?;
    let mut cmd = std::process::Command::new("node");
    cmd.arg(&driver).arg(core_dir);
    for (name, text, runs, mode) in jobs {
        let file = dir.join(format!("{name}.werkbaum"));
        std::fs::write(&file, text).ok()?;
        let mode = if *mode == Mode::Cold { "cold" } else { "warm" };
        cmd.arg(name).arg(&file).arg(runs.to_string()).arg(mode);
    }
    let output = cmd.output().ok();
    let _ = std::fs::remove_dir_all(&dir);
    let output = output?;
    if !output.status.success() {
        eprintln!(
            "node failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
        return None;
    }
    serde_json::from_slice(&output.stdout).ok()
}

async fn run() -> Result<(), String> {
    let args = parse_args()?;
    let source = args
        .core
        .clone()
        .map_or(CoreSource::BuiltIn, CoreSource::Dir);
    let core_dir = args
        .core
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("core"));
    let werkbaum = std::fs::read_to_string(&args.plan)
        .map_err(|e| format!("cannot read {}: {e}", args.plan.display()))?;
    let big = generated_plan(10_000);

    let config = EngineConfig {
        pool_size: 1,
        deadline: Duration::from_secs(30),
        core: source,
        ..EngineConfig::default()
    };
    let t = Instant::now();
    let engine = Engine::new(config).map_err(|e| e.to_string())?;
    let startup = t.elapsed();
    let fresh = engine.memory_usage().await.map_err(|e| e.to_string())?;

    let big_nodes = engine
        .call("inspect", json!({"text": big, "include": []}))
        .await
        .map_err(|e| format!("10k plan: {e}"))?["summary"]["nodes"]
        .clone();
    let big_runs = (args.runs / 10).max(10);
    let none = json!({});
    let wb_warm = bench_engine(
        &engine,
        &werkbaum,
        args.runs,
        Mode::Warm,
        Out::Raw,
        none.clone(),
    )
    .await?;
    let wb_warm_v = bench_engine(
        &engine,
        &werkbaum,
        args.runs,
        Mode::Warm,
        Out::Value,
        none.clone(),
    )
    .await?;
    let cached = engine.memory_usage().await.map_err(|e| e.to_string())?;
    let wb_cold = bench_engine(
        &engine,
        &werkbaum,
        args.runs,
        Mode::Cold,
        Out::Raw,
        none.clone(),
    )
    .await?;
    let wb_cold_v = bench_engine(
        &engine,
        &werkbaum,
        args.runs,
        Mode::Cold,
        Out::Value,
        none.clone(),
    )
    .await?;
    let big_cold =
        bench_engine(&engine, &big, big_runs, Mode::Cold, Out::Raw, none.clone()).await?;
    let big_cold_v = bench_engine(
        &engine,
        &big,
        big_runs,
        Mode::Cold,
        Out::Value,
        none.clone(),
    )
    .await?;
    let wb_summary = bench_engine(
        &engine,
        &werkbaum,
        args.runs,
        Mode::Cold,
        Out::Raw,
        json!({"include": []}),
    )
    .await?;
    let trivial = bench_engine(&engine, "R\n", args.runs, Mode::Warm, Out::Raw, none).await?;
    let after = engine.memory_usage().await.map_err(|e| e.to_string())?;

    let node = bench_node(
        &core_dir,
        &[
            ("wb_warm", &werkbaum, args.runs, Mode::Warm),
            ("wb_cold", &werkbaum, args.runs, Mode::Cold),
            ("big_cold", &big, big_runs, Mode::Cold),
        ],
    );

    println!("core-bench: inspect (full: tree, warnings, path), 1 runtime, loaded and warmed up");
    println!(
        "  engine = Engine::call_raw (params in, validated result JSON out); +Value = Engine::call"
    );
    println!(
        "  warm = the same text every call (the core's analysis cache answers); cold = a new text"
    );
    println!("  every call (a distinct comment line appended), so every call parses and models");
    println!("engine start (compile + 1 runtime): {:.1} ms", ms(startup));
    println!(
        "{:<34} {:>11} {:>11} {:>12} {:>11} {:>11} {:>9}",
        "plan", "engine p50", "engine p99", "+Value p50", "node p50", "node p99", "p50 ratio"
    );
    let rows = [
        (
            format!("werkbaum.werkbaum warm ({})", args.runs),
            "wb_warm",
            &wb_warm,
            &wb_warm_v,
        ),
        (
            format!("werkbaum.werkbaum cold ({})", args.runs),
            "wb_cold",
            &wb_cold,
            &wb_cold_v,
        ),
        (
            format!("generated {big_nodes} nodes cold ({big_runs})"),
            "big_cold",
            &big_cold,
            &big_cold_v,
        ),
    ];
    for (label, key, s, v) in rows {
        let (np50, np99) = node
            .as_ref()
            .and_then(|n| Some((n[key]["p50"].as_f64()?, n[key]["p99"].as_f64()?)))
            .map_or((None, None), |(a, b)| (Some(a), Some(b)));
        let fmt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2} ms"));
        let ratio = np50.map_or("-".to_owned(), |n| format!("{:.1}x", ms(s.p50) / n));
        println!(
            "{label:<34} {:>8.2} ms {:>8.2} ms {:>9.2} ms {:>11} {:>11} {ratio:>9}",
            ms(s.p50),
            ms(s.p99),
            ms(v.p50),
            fmt(np50),
            fmt(np99),
        );
    }
    println!(
        "{:<34} {:>8.2} ms {:>8.2} ms   (parse + model only: no tree/warnings/path output)",
        "werkbaum.werkbaum cold, include []",
        ms(wb_summary.p50),
        ms(wb_summary.p99)
    );
    println!(
        "{:<34} {:>8.3} ms {:>8.3} ms   (round-trip overhead of the engine)",
        "one-line plan",
        ms(trivial.p50),
        ms(trivial.p99)
    );
    if node.is_none() {
        println!("(node not available: no comparison)");
    }
    let mib = |b: i64| b as f64 / (1024.0 * 1024.0);
    println!(
        "memory per runtime (after GC): {:.2} MiB fresh (core loaded), {:.2} MiB holding the cached werkbaum analysis, {:.2} MiB after all runs; limit {:.0} MiB",
        mib(fresh.malloc_size),
        mib(cached.malloc_size),
        mib(after.malloc_size),
        mib(after.malloc_limit)
    );
    println!(
        "targets: werkbaum warm p50 <= 5 ms: {} (cold: {:.2} ms); 10,000 nodes p50 <= 300 ms: {}; <= 4 MiB per runtime: {}",
        verdict(ms(wb_warm.p50) <= 5.0),
        ms(wb_cold.p50),
        verdict(ms(big_cold.p50) <= 300.0),
        verdict(
            mib(after
                .malloc_size
                .max(fresh.malloc_size)
                .max(cached.malloc_size))
                <= 4.0
        )
    );
    Ok(())
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("core-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("core-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
