//! core-bench: latency of `inspect` through the core engine, warm (same text) and cold (a new
//! text every call), side by side with the same core under `node` when installed; memory per
//! runtime.
//!
//! `cargo run --release -p pforte-bench --bin core-bench [-- --core DIR --plan FILE --runs N]`

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mcp_service::{CoreSource, Engine, EngineConfig};
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

impl Mode {
    fn text(self, text: &str, i: usize) -> String {
        match self {
            Mode::Warm => text.to_owned(),
            Mode::Cold => format!("{text}\n%% core-bench call {i}\n"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Warm => "warm",
            Mode::Cold => "cold",
        }
    }
}

/// One `inspect` through the engine: `call_raw` (validated result JSON) or `call` (parsed
/// into a `serde_json::Value`). Returns the elapsed time.
async fn engine_call(
    engine: &Engine,
    params: serde_json::Value,
    raw: bool,
) -> Result<Duration, String> {
    let t = Instant::now();
    if raw {
        engine.call_raw("inspect", params).await.map(drop)
    } else {
        engine.call("inspect", params).await.map(drop)
    }
    .map_err(|e| format!("inspect: {e}"))?;
    Ok(t.elapsed())
}

/// The same core under node, driven line by line so that its calls interleave with the
/// engine's: a request is `NAME MODE N`, the answer the milliseconds of that one `inspect`
/// (params encoded before the clock starts, result parsed before it stops).
const NODE_DRIVER: &str = r#"
import { pathToFileURL } from 'node:url';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
const [coreDir, ...pairs] = process.argv.slice(2);
const { dispatch } = await import(pathToFileURL(coreDir + '/index.js').href);
const texts = {};
for (let i = 0; i < pairs.length; i += 2) texts[pairs[i]] = readFileSync(pairs[i + 1], 'utf8');
for await (const line of createInterface({ input: process.stdin })) {
  const [name, mode, n] = line.split(' ');
  const text = mode === 'cold' ? texts[name] + '\n%% core-bench call ' + n + '\n' : texts[name];
  const params = JSON.stringify({ text });
  const s = process.hrtime.bigint();
  JSON.parse(dispatch('inspect', params));
  process.stdout.write(String(Number(process.hrtime.bigint() - s) / 1e6) + '\n');
}
"#;

/// A running node driver; `None` from `start` when node is missing or fails.
struct Node {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    dir: PathBuf,
}

impl Node {
    fn start(core_dir: &Path, texts: &[(&str, &str)]) -> Option<Node> {
        use std::process::{Command, Stdio};
        let dir = std::env::temp_dir().join(format!("pforte-core-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let driver = dir.join("driver.mjs");
        std::fs::write(&driver, NODE_DRIVER).ok()?;
        let mut cmd = Command::new("node");
        cmd.arg(&driver).arg(core_dir);
        for (name, text) in texts {
            let file = dir.join(format!("{name}.werkbaum"));
            std::fs::write(&file, text).ok()?;
            cmd.arg(name).arg(&file);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .ok()?;
        let stdin = child.stdin.take()?;
        let stdout = std::io::BufReader::new(child.stdout.take()?);
        Some(Node {
            child,
            stdin,
            stdout,
            dir,
        })
    }

    fn call(&mut self, name: &str, mode: Mode, i: usize) -> Option<f64> {
        use std::io::{BufRead, Write};
        writeln!(self.stdin, "{name} {} {i}", mode.name()).ok()?;
        self.stdin.flush().ok()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line).ok()?;
        line.trim().parse().ok()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// p50/p99 of one row: engine raw, engine Value, node (ms).
#[derive(Default)]
struct Row {
    raw: Vec<Duration>,
    value: Vec<Duration>,
    node: Vec<f64>,
}

/// Calls per block: the engine (raw), the engine (Value) and node take turns in blocks, so all
/// three see the same machine conditions over the run, and a block is long enough that one
/// side does not run on caches the other just evicted.
const BLOCK: usize = 10;

/// Runs `runs` calls of each kind (after a tenth as warm-up), in alternating blocks.
async fn bench_row(
    engine: &Engine,
    node: &mut Option<Node>,
    (name, text): (&str, &str),
    mode: Mode,
    runs: usize,
) -> Result<Row, String> {
    let warmup = (runs / 10).max(3);
    let mut row = Row::default();
    let mut i = 0;
    while i < warmup + runs {
        let block = BLOCK.min(warmup + runs - i);
        for k in i..i + block {
            let raw = engine_call(engine, json!({ "text": mode.text(text, 2 * k) }), true).await?;
            if k >= warmup {
                row.raw.push(raw);
            }
        }
        for k in i..i + block {
            let value =
                engine_call(engine, json!({ "text": mode.text(text, 2 * k + 1) }), false).await?;
            if k >= warmup {
                row.value.push(value);
            }
        }
        for k in i..i + block {
            let n = node.as_mut().and_then(|n| n.call(name, mode, k));
            if node.is_some() && n.is_none() {
                eprintln!("node stopped answering: no comparison");
                *node = None;
            }
            if k >= warmup {
                row.node.extend(n);
            }
        }
        i += block;
    }
    Ok(row)
}

fn pick(mut v: Vec<f64>, q: f64) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied()
}

fn ms_all(v: &[Duration]) -> Vec<f64> {
    v.iter().map(|d| ms(*d)).collect()
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
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../mcp-service/core"));
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
    let mut node = Node::start(&core_dir, &[("werkbaum", &werkbaum), ("big", &big)]);
    let wb = ("werkbaum", werkbaum.as_str());
    let wb_warm = bench_row(&engine, &mut node, wb, Mode::Warm, args.runs).await?;
    let cached = engine.memory_usage().await.map_err(|e| e.to_string())?;
    let wb_cold = bench_row(&engine, &mut node, wb, Mode::Cold, args.runs).await?;
    let big_cold = bench_row(
        &engine,
        &mut node,
        ("big", big.as_str()),
        Mode::Cold,
        big_runs,
    )
    .await?;
    let mut summary = Vec::with_capacity(args.runs);
    for i in 0..args.runs {
        let params = json!({ "text": Mode::Cold.text(&werkbaum, i), "include": [] });
        summary.push(engine_call(&engine, params, true).await?);
    }
    let mut trivial = Vec::with_capacity(args.runs);
    for _ in 0..args.runs {
        trivial.push(engine_call(&engine, json!({ "text": "R\n" }), true).await?);
    }
    let after = engine.memory_usage().await.map_err(|e| e.to_string())?;
    let have_node = node.is_some();
    drop(node);

    println!("core-bench: inspect (full: tree, warnings, path); 1 runtime, loaded and warmed up;");
    println!(
        "  engine, +Value and node calls take turns in blocks of {BLOCK} (same machine conditions)"
    );
    println!(
        "  engine = Engine::call_raw: params in, validated result JSON out; +Value = Engine::call"
    );
    println!("  warm = the same text every call (the core's analysis cache answers); cold = a new");
    println!("  text every call (a distinct comment line appended): every call parses and models");
    println!("engine start (compile + 1 runtime): {:.1} ms", ms(startup));
    println!(
        "{:<34} {:>11} {:>11} {:>12} {:>11} {:>11} {:>9}",
        "plan", "engine p50", "engine p99", "+Value p50", "node p50", "node p99", "p50 ratio"
    );
    let mut p50 = Vec::new();
    for (label, row) in [
        (format!("werkbaum.werkbaum warm ({})", args.runs), &wb_warm),
        (format!("werkbaum.werkbaum cold ({})", args.runs), &wb_cold),
        (
            format!("generated {big_nodes} nodes cold ({big_runs})"),
            &big_cold,
        ),
    ] {
        let raw50 = pick(ms_all(&row.raw), 0.5).unwrap_or_default();
        let raw99 = pick(ms_all(&row.raw), 0.99).unwrap_or_default();
        let val50 = pick(ms_all(&row.value), 0.5).unwrap_or_default();
        let n50 = pick(row.node.clone(), 0.5);
        let n99 = pick(row.node.clone(), 0.99);
        let fmt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2} ms"));
        let ratio = n50.map_or("-".to_owned(), |n| format!("{:.1}x", raw50 / n));
        println!(
            "{label:<34} {raw50:>8.2} ms {raw99:>8.2} ms {val50:>9.2} ms {:>11} {:>11} {ratio:>9}",
            fmt(n50),
            fmt(n99),
        );
        p50.push(raw50);
    }
    println!(
        "{:<34} {:>8.2} ms {:>8.2} ms   (parse + model only: no tree/warnings/path output)",
        "werkbaum.werkbaum cold, include []",
        pick(ms_all(&summary), 0.5).unwrap_or_default(),
        pick(ms_all(&summary), 0.99).unwrap_or_default()
    );
    println!(
        "{:<34} {:>8.3} ms {:>8.3} ms   (round-trip overhead of the engine)",
        "one-line plan",
        pick(ms_all(&trivial), 0.5).unwrap_or_default(),
        pick(ms_all(&trivial), 0.99).unwrap_or_default()
    );
    if !have_node {
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
        verdict(p50[0] <= 5.0),
        p50[1],
        verdict(p50[2] <= 300.0),
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
