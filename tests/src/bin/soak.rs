//! `pforte-soak`: holds many MCP SSE streams open through the gateway, closes them, and does it
//! again, printing the gateway's resident memory at each stage and checking it against bounds
//! (hardening finding 14, performance point 3). Not part of `./test.sh`: a bounded benchmark.
//!
//! Run: `cargo build --release --bins && ./target/release/pforte-soak [--short]`. It starts the
//! `mcp-service` and `pforte` beside it on 127.0.0.1 (rate limits off; the per-principal
//! session and stream bounds raised above `--streams`, since all streams use one token; no cap
//! on connections per IP, since all come from 127.0.0.1), opens
//! `--streams` sessions each with one `GET /mcp` (`Accept: text/event-stream`) stream, holds
//! them `--hold-secs`, closes the streams and deletes the sessions, `--rounds` times.

use std::{
    process::Command,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use pforte_tests::{Proc, built_bin, eventually, free_port};
use tokio::{sync::Semaphore, task::JoinSet};

const USAGE: &str = "\
pforte-soak: hold MCP SSE streams through pforte, close them, repeat; print gateway RSS

usage: pforte-soak [--streams N] [--hold-secs S] [--rounds N] [--short] [--threads N] [--settle-secs S]

  --streams N     concurrent SSE streams (one session each)         (default 1000)
  --hold-secs S   how long the streams stay open each round         (default 120)
  --rounds N      open/hold/close cycles                            (default 2)
  --short         --hold-secs 10
  --threads N     gateway worker threads (`threads` in pforte.toml) (default 2)
  --settle-secs S after closing, wait S s before reading RSS          (default 15)

checks: RSS with the streams open <= 64 MB; after-close RSS of the last round within 10 % of
the first round's; after-close RSS within 20 MB of idle. Exit 1 when a check fails.";

#[derive(Debug, Clone)]
struct Options {
    streams: usize,
    hold: Duration,
    rounds: usize,
    threads: usize,
    settle: Duration,
}

impl Options {
    fn parse() -> anyhow::Result<Self> {
        let mut o = Self {
            streams: 1000,
            hold: Duration::from_secs(120),
            rounds: 2,
            threads: 2,
            settle: Duration::from_secs(15),
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut num = |name: &str| -> anyhow::Result<u64> {
                let v = args
                    .next()
                    .with_context(|| format!("{name} needs a value"))?;
                v.parse()
                    .with_context(|| format!("{name} {v:?} is not a number"))
            };
            match arg.as_str() {
                "--streams" => o.streams = num("--streams")?.clamp(1, 10_000) as usize,
                "--hold-secs" => o.hold = Duration::from_secs(num("--hold-secs")?.min(3600)),
                "--rounds" => o.rounds = num("--rounds")?.clamp(1, 20) as usize,
                "--threads" => o.threads = num("--threads")?.clamp(1, 64) as usize,
                "--settle-secs" => o.settle = Duration::from_secs(num("--settle-secs")?.min(600)),
                "--short" => o.hold = Duration::from_secs(10),
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => bail!("unknown argument {other:?}\n\n{USAGE}"),
            }
        }
        Ok(o)
    }
}

/// Resident set size of `pid` in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS")
}

/// Open file descriptors of `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Raises this process's soft `RLIMIT_NOFILE` (children inherit it) to fit `need` descriptors.
fn raise_nofile(need: u64) -> anyhow::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= need {
        return Ok(soft);
    }
    let want = need.min(hard);
    setrlimit(Resource::RLIMIT_NOFILE, want, hard)?;
    if want < need {
        eprintln!("warning: RLIMIT_NOFILE hard limit {hard} is below the {need} wanted");
    }
    Ok(want)
}

/// One held stream: its session id and the task reading it.
struct Held {
    session: String,
}

/// Opens a session and its SSE stream; the stream is read (and its keep-alives drained) by a
/// task in `readers` until aborted.
async fn open_stream(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    readers: &tokio::sync::Mutex<JoinSet<()>>,
) -> anyhow::Result<Held> {
    let init = http
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            pforte_tests::initialize_request(
                pforte_tests::PROTOCOL_VERSION,
                "pforte-soak",
                &serde_json::json!({}),
            )
            .to_string(),
        )
        .send()
        .await?;
    if init.status() != 200 {
        bail!("initialize: {}", init.status());
    }
    let session = init
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .context("no mcp-session-id")?
        .to_owned();
    init.bytes().await?;
    let done = http
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .body(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .send()
        .await?;
    if done.status() != 202 {
        bail!("initialized: {}", done.status());
    }
    let mut stream = http
        .get(url)
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await?;
    let sse = stream
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if stream.status() != 200 || !sse {
        bail!("GET stream: {} (SSE: {sse})", stream.status());
    }
    readers
        .lock()
        .await
        .spawn(async move { while let Ok(Some(_chunk)) = stream.chunk().await {} });
    Ok(Held { session })
}

#[derive(Debug, Default, Clone, Copy)]
struct Round {
    open_kib: u64,
    closed_kib: u64,
    opened: usize,
    open_secs: f64,
}

async fn round(
    o: &Options,
    http: &reqwest::Client,
    url: &str,
    token: &str,
    gw_pid: u32,
    idle_fds: usize,
) -> anyhow::Result<Round> {
    let readers = Arc::new(tokio::sync::Mutex::new(JoinSet::new()));
    let gate = Arc::new(Semaphore::new(32));
    let started = Instant::now();
    let mut opening = JoinSet::new();
    for _ in 0..o.streams {
        let (http, url, token) = (http.clone(), url.to_owned(), token.to_owned());
        let (readers, gate) = (readers.clone(), gate.clone());
        opening.spawn(async move {
            let _permit = gate.acquire_owned().await?;
            open_stream(&http, &url, &token, &readers).await
        });
    }
    let mut held = Vec::with_capacity(o.streams);
    let mut failed = Vec::new();
    while let Some(r) = opening.join_next().await {
        match r? {
            Ok(h) => held.push(h),
            Err(e) => failed.push(e.to_string()),
        }
    }
    let open_secs = started.elapsed().as_secs_f64();
    if !failed.is_empty() {
        bail!(
            "{} of {} streams failed, e.g. {}",
            failed.len(),
            o.streams,
            failed[0]
        );
    }
    // Hold: sample RSS; report the largest.
    let mut open_kib = rss_kib(gw_pid)?;
    let hold_until = Instant::now() + o.hold;
    while Instant::now() < hold_until {
        let left = hold_until.saturating_duration_since(Instant::now());
        tokio::time::sleep(left.min(Duration::from_secs(5))).await;
        open_kib = open_kib.max(rss_kib(gw_pid)?);
    }
    let alive = readers.lock().await.len();
    let finished = {
        let mut r = readers.lock().await;
        let mut n = 0;
        while r.try_join_next().is_some() {
            n += 1;
        }
        n
    };
    if finished > 0 {
        bail!("{finished} of {alive} streams ended during the hold");
    }
    // Close: drop every stream, then delete every session.
    readers.lock().await.shutdown().await;
    let mut deleting = JoinSet::new();
    for h in held {
        let (http, url, token, gate) =
            (http.clone(), url.to_owned(), token.to_owned(), gate.clone());
        deleting.spawn(async move {
            let _permit = gate.acquire_owned().await?;
            let r = http
                .delete(&url)
                .bearer_auth(&token)
                .header("mcp-session-id", &h.session)
                .header("mcp-protocol-version", "2025-06-18")
                .send()
                .await?;
            anyhow::ensure!(r.status().is_success(), "DELETE: {}", r.status());
            anyhow::Ok(())
        });
    }
    while let Some(r) = deleting.join_next().await {
        r??;
    }
    // Settled: the gateway's connections are gone (idle pooled ones aside), RSS stops moving.
    let settled = eventually(Duration::from_secs(60), || {
        let n = fds(gw_pid);
        async move { n <= idle_fds + 64 }
    })
    .await;
    if !settled {
        eprintln!(
            "warning: the gateway still holds {} descriptors (idle: {idle_fds})",
            fds(gw_pid)
        );
    }
    // The allocator hands freed pages back over a few seconds (jemalloc's decay): sample for
    // `--settle-secs` and report the last value.
    let mut closed_kib = rss_kib(gw_pid)?;
    for _ in 0..o.settle.as_secs() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        closed_kib = rss_kib(gw_pid)?;
    }
    Ok(Round {
        open_kib,
        closed_kib,
        opened: o.streams,
        open_secs,
    })
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    let o = Options::parse()?;
    // Client, gateway (down- and upstream) and service each hold a descriptor per stream.
    let nofile = raise_nofile(o.streams as u64 * 3 + 1024)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(run(o, nofile))
}

async fn run(o: Options, nofile: u64) -> anyhow::Result<std::process::ExitCode> {
    let work = tempfile::tempdir()?;
    let (svc_bin, gw_bin) = (built_bin("mcp-service")?, built_bin("pforte")?);

    let mut cmd = Command::new(&svc_bin);
    cmd.env("MCP_SERVICE_DATA_DIR", work.path().join("svc"))
        .args(["serve", "--listen", "127.0.0.1:0"]);
    let mut svc = Proc::spawn_logged(cmd, &work.path().join("mcp-service.log"))?;
    let line = svc.wait_line("listening on", Duration::from_secs(30))?;
    let upstream = line
        .rsplit(' ')
        .next()
        .context("no URL in the service's line")?
        .to_owned();

    let data_dir = work.path().join("gw");
    let port = free_port();
    let cap = o.streams + 16;
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\ndata_dir = {:?}\nthreads = {}\naudit_log = \"off\"\nmax_connections_per_ip = 0\n\
         [upstream]\nurl = {upstream:?}\n\
         [limits]\nenabled = false\nsessions_per_principal = {cap}\nstreams_per_principal = {cap}\n",
        data_dir.display().to_string(),
        o.threads,
    );
    let config_path = work.path().join("pforte.toml");
    std::fs::write(&config_path, config)?;
    let mut cmd = Command::new(&gw_bin);
    cmd.args(["serve", "--init", "--config"]).arg(&config_path);
    let gw = Proc::spawn_logged(cmd, &work.path().join("pforte.log"))?;
    let gw_pid = gw.child.id();
    let base = format!("http://127.0.0.1:{port}");
    let url = format!("{base}/mcp");
    let http = reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .pool_max_idle_per_host(64)
        .build()?;
    let healthy = eventually(Duration::from_secs(30), || {
        let req = http.get(format!("{base}/healthz")).send();
        async move { req.await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
    if !healthy {
        bail!(
            "pforte never became healthy; log in {}",
            work.path().display()
        );
    }
    let out = Command::new(&gw_bin)
        .args(["token", "create", "soak", "--data-dir"])
        .arg(&data_dir)
        .output()?;
    anyhow::ensure!(out.status.success(), "token create failed");
    let token = String::from_utf8(out.stdout)?.trim().to_owned();
    let seen = eventually(Duration::from_secs(5), || {
        let req = http.get(&url).bearer_auth(&token).send();
        async move { req.await.is_ok_and(|r| r.status() != 401) }
    })
    .await;
    anyhow::ensure!(seen, "the gateway never accepted the token");
    let idle_kib = rss_kib(gw_pid)?;
    let idle_fds = fds(gw_pid);

    println!(
        "pforte-soak: {} SSE streams (one session each, one token; session/stream bounds raised \
         to {cap}), held {} s, {} rounds; gateway threads = {}; RLIMIT_NOFILE {nofile}",
        o.streams,
        o.hold.as_secs(),
        o.rounds,
        o.threads
    );
    println!("gateway RSS idle: {:.1} MB", mib(idle_kib));
    let mut rounds = Vec::new();
    for i in 1..=o.rounds {
        let r = round(&o, &http, &url, &token, gw_pid, idle_fds).await?;
        println!(
            "round {i}: {} streams opened in {:.1} s; RSS with them open {:.1} MB ({:.0} KiB a stream over idle), after close {:.1} MB",
            r.opened,
            r.open_secs,
            mib(r.open_kib),
            r.open_kib.saturating_sub(idle_kib) as f64 / r.opened as f64,
            mib(r.closed_kib)
        );
        rounds.push(r);
    }
    drop(gw);
    drop(svc);

    let mut ok = true;
    let mut check = |pass: bool, what: String| {
        println!("  [{}] {what}", if pass { "ok" } else { "FAIL" });
        ok &= pass;
    };
    let max_open = rounds.iter().map(|r| r.open_kib).max().unwrap_or(0);
    check(
        max_open <= 64 * 1024,
        format!(
            "RSS with {} streams open ≤ 64 MB: {:.1} MB",
            o.streams,
            mib(max_open)
        ),
    );
    if let (Some(first), Some(last)) = (rounds.first(), rounds.last()) {
        let (a, b) = (first.closed_kib as f64, last.closed_kib as f64);
        check(
            b <= a * 1.10,
            format!(
                "after-close RSS of round {} within 10 % of round 1: {:.1} MB vs {:.1} MB ({:+.1} %)",
                rounds.len(),
                mib(last.closed_kib),
                mib(first.closed_kib),
                (b / a - 1.0) * 100.0
            ),
        );
        let worst = rounds.iter().map(|r| r.closed_kib).max().unwrap_or(0);
        check(
            worst <= idle_kib + 20 * 1024,
            format!(
                "after-close RSS within 20 MB of idle: {:.1} MB vs {:.1} MB idle",
                mib(worst),
                mib(idle_kib)
            ),
        );
    }
    Ok(if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
