//! `pforte-soak`: holds many MCP SSE streams open through the gateway, closes them, and does it
//! again, printing the resident memory of the gateway and of the MCP service behind it at each
//! stage and checking both against bounds (hardening finding 14, performance point 3, issue 27
//! points 4 and 5). Not part of `./test.sh`: a bounded benchmark.
//!
//! Run: `cargo build --release --bins && ./target/release/pforte-soak [--short]`. It starts the
//! `mcp-service` and `pforte` beside it on 127.0.0.1 (rate limits off; the per-principal
//! session and stream bounds raised above `--streams`, since all streams use one token; no cap
//! on connections per IP, since all come from 127.0.0.1), opens
//! `--streams` sessions each with one `GET /mcp` (`Accept: text/event-stream`) stream, holds
//! them `--hold-secs`, closes the streams and deletes the sessions, `--rounds` times.
//! `--bins DIR` takes `pforte` and `mcp-service` from DIR instead of beside this binary, so two
//! builds (e.g. a copy of the previous one) can be compared side by side. `--compare N` first
//! runs the same rounds at N streams on a fresh gateway and service, to check that the cost of a
//! stream does not grow with their number (issue 39 point 5: 8,000 streams against 1,000).
//! While the streams are open it times `GET /healthz` on a new connection once a second.

use std::{
    process::Command,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use pforte_tests::{
    Proc, built_bin, delete_session, eventually, free_port, open_session_stream, rss_kib,
};
use tokio::{sync::Semaphore, task::JoinSet};

const USAGE: &str = "\
pforte-soak: hold MCP SSE streams through pforte, close them, repeat; print the RSS of the
gateway and of the MCP service

usage: pforte-soak [--streams N] [--compare N] [--hold-secs S] [--rounds N] [--short] [--threads N] [--settle-secs S] [--bins DIR]

  --streams N     concurrent SSE streams (one session each)         (default 1000, at most 9000)
  --compare N     first the same at N streams (fresh processes); the cost of a stream at
                  --streams must be within 10 % of it                (default: no comparison)
  --hold-secs S   how long the streams stay open each round         (default 120)
  --rounds N      open/hold/close cycles                            (default 2)
  --short         --hold-secs 10
  --threads N     gateway worker threads (`threads` in pforte.toml) (default 2)
  --settle-secs S after closing, wait S s before reading RSS          (default 15)
  --bins DIR      where `pforte` and `mcp-service` are      (default: beside this binary)

checks: RSS a stream over idle (the largest of the rounds) <= 16 KiB in the gateway and
<= 32 KiB in the service; with --compare, that cost at --streams <= 1.10 x the cost at
--compare; GET /healthz through the gateway answered in < 50 ms (each of them) while the
streams are open; for each process, after-close RSS of the last round within 10 % of the first
round's and within 20 MB of idle. Exit 1 when a check fails.";

/// The most RSS a stream may add over idle (KiB), in [`WHO`] order (issue 39 point 5).
const PER_STREAM_KIB: [f64; 2] = [16.0, 32.0];

/// How much more a stream may cost at `--streams` than at `--compare`.
const SCALING: f64 = 1.10;

/// The slowest `/healthz` allowed while the streams are open.
const HEALTHZ_MAX: Duration = Duration::from_millis(50);

#[derive(Debug, Clone)]
struct Options {
    streams: usize,
    compare: Option<usize>,
    hold: Duration,
    rounds: usize,
    threads: usize,
    settle: Duration,
    bins: Option<std::path::PathBuf>,
}

impl Options {
    fn parse() -> anyhow::Result<Self> {
        let mut o = Self {
            streams: 1000,
            compare: None,
            hold: Duration::from_secs(120),
            rounds: 2,
            threads: 2,
            settle: Duration::from_secs(15),
            bins: None,
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
                "--streams" => o.streams = num("--streams")?.clamp(1, 9_000) as usize,
                "--compare" => o.compare = Some(num("--compare")?.clamp(1, 9_000) as usize),
                "--hold-secs" => o.hold = Duration::from_secs(num("--hold-secs")?.min(3600)),
                "--rounds" => o.rounds = num("--rounds")?.clamp(1, 20) as usize,
                "--threads" => o.threads = num("--threads")?.clamp(1, 64) as usize,
                "--settle-secs" => o.settle = Duration::from_secs(num("--settle-secs")?.min(600)),
                "--short" => o.hold = Duration::from_secs(10),
                "--bins" => o.bins = Some(args.next().context("--bins needs a directory")?.into()),
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

/// Open file descriptors of `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit; children inherit it (the
/// service holds a descriptor a stream; the gateway raises its own limit to the hard one and
/// needs two). Warns when `need` (for this process or the service) does not fit.
fn raise_nofile(need: u64) -> anyhow::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    let limit = soft.max(hard);
    if limit < need {
        eprintln!("warning: RLIMIT_NOFILE hard limit {hard} is below the {need} wanted");
    }
    Ok(limit)
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
    let (session, mut stream) = open_session_stream(http, url, Some(token)).await?;
    readers
        .lock()
        .await
        .spawn(async move { while let Ok(Some(_chunk)) = stream.chunk().await {} });
    Ok(Held { session })
}

/// The two processes measured: the gateway and the MCP service behind it.
const WHO: [&str; 2] = ["gateway", "service"];

/// RSS (KiB) of each of `pids` (in [`WHO`] order).
fn rss_both(pids: [u32; 2]) -> anyhow::Result<[u64; 2]> {
    Ok([rss_kib(pids[0])?, rss_kib(pids[1])?])
}

#[derive(Debug, Default, Clone)]
struct Round {
    /// Largest RSS sampled while the streams were open, per process ([`WHO`] order).
    open_kib: [u64; 2],
    /// RSS after the streams closed and the sessions were deleted, per process.
    closed_kib: [u64; 2],
    /// Descriptors each process held with the streams open.
    open_fds: [usize; 2],
    opened: usize,
    open_secs: f64,
    /// `GET /healthz` through the gateway, each on a new connection, while the streams were open.
    healthz: Vec<Duration>,
}

/// One `GET /healthz` on a new connection (`fresh` pools nothing): how long until the whole
/// answer came, or why it did not.
async fn time_healthz(fresh: &reqwest::Client, base: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let resp = fresh.get(format!("{base}/healthz")).send().await?;
    anyhow::ensure!(resp.status() == 200, "/healthz answered {}", resp.status());
    resp.bytes().await?;
    Ok(started.elapsed())
}

/// The gateway and the service behind it, and how to reach the gateway.
struct Stack {
    /// Kept for the stack's life: the processes' data and logs.
    work: tempfile::TempDir,
    gw: Proc,
    svc: Proc,
    base: String,
    token: String,
}

impl Stack {
    fn pids(&self) -> [u32; 2] {
        [self.gw.child.id(), self.svc.child.id()]
    }

    /// The gateway's start-line words on its descriptors, from its log.
    fn descriptor_budget(&self) -> Option<String> {
        let log = std::fs::read_to_string(self.work.path().join("pforte.log")).ok()?;
        let at = log.find("descriptors")?;
        let line_start = log[..at].rfind("budget=").unwrap_or(at);
        let line = &log[line_start..];
        Some(line.lines().next()?.trim().to_owned())
    }
}

/// Starts the service and the gateway in front of it, sized for `streams`.
async fn start(
    o: &Options,
    http: &reqwest::Client,
    streams: usize,
    svc_bin: &std::path::Path,
    gw_bin: &std::path::Path,
) -> anyhow::Result<Stack> {
    let work = tempfile::tempdir()?;
    let mut cmd = Command::new(svc_bin);
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
    let cap = streams + 16;
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\ndata_dir = {:?}\nthreads = {}\naudit_log = \"off\"\nmax_connections_per_ip = 0\n\
         [upstream]\nurl = {upstream:?}\n\
         [limits]\nenabled = false\nsessions_per_principal = {cap}\nstreams_per_principal = {cap}\n",
        data_dir.display().to_string(),
        o.threads,
    );
    let config_path = work.path().join("pforte.toml");
    std::fs::write(&config_path, config)?;
    let mut cmd = Command::new(gw_bin);
    cmd.args(["serve", "--init", "--config"]).arg(&config_path);
    let gw = Proc::spawn_logged(cmd, &work.path().join("pforte.log"))?;
    let base = format!("http://127.0.0.1:{port}");
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
    let out = Command::new(gw_bin)
        .args(["token", "create", "soak", "--data-dir"])
        .arg(&data_dir)
        .output()?;
    anyhow::ensure!(out.status.success(), "token create failed");
    let token = String::from_utf8(out.stdout)?.trim().to_owned();
    let url = format!("{base}/mcp");
    let seen = eventually(Duration::from_secs(5), || {
        let req = http.get(&url).bearer_auth(&token).send();
        async move { req.await.is_ok_and(|r| r.status() != 401) }
    })
    .await;
    anyhow::ensure!(seen, "the gateway never accepted the token");
    Ok(Stack {
        work,
        gw,
        svc,
        base,
        token,
    })
}

async fn round(
    o: &Options,
    streams: usize,
    http: &reqwest::Client,
    fresh: &reqwest::Client,
    stack: &Stack,
    idle_fds: usize,
) -> anyhow::Result<Round> {
    let (url, token, pids) = (format!("{}/mcp", stack.base), &stack.token, stack.pids());
    let readers = Arc::new(tokio::sync::Mutex::new(JoinSet::new()));
    let gate = Arc::new(Semaphore::new(32));
    let started = Instant::now();
    let mut opening = JoinSet::new();
    for _ in 0..streams {
        let (http, url, token) = (http.clone(), url.clone(), token.clone());
        let (readers, gate) = (readers.clone(), gate.clone());
        opening.spawn(async move {
            let _permit = gate.acquire_owned().await?;
            open_stream(&http, &url, &token, &readers).await
        });
    }
    let mut held = Vec::with_capacity(streams);
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
            streams,
            failed[0]
        );
    }
    // Hold: sample RSS and time a `/healthz` once a second; report the largest RSS.
    let mut open_kib = rss_both(pids)?;
    let open_fds = [fds(pids[0]), fds(pids[1])];
    let mut healthz = Vec::new();
    let hold_until = Instant::now() + o.hold;
    while Instant::now() < hold_until {
        let left = hold_until.saturating_duration_since(Instant::now());
        tokio::time::sleep(left.min(Duration::from_secs(1))).await;
        healthz.push(time_healthz(fresh, &stack.base).await?);
        let now = rss_both(pids)?;
        open_kib = [open_kib[0].max(now[0]), open_kib[1].max(now[1])];
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
        let (http, url, token, gate) = (http.clone(), url.clone(), token.clone(), gate.clone());
        deleting.spawn(async move {
            let _permit = gate.acquire_owned().await?;
            delete_session(&http, &url, Some(&token), &h.session).await
        });
    }
    while let Some(r) = deleting.join_next().await {
        r??;
    }
    // Settled: the gateway's connections are gone (idle pooled ones aside), RSS stops moving.
    let settled = eventually(Duration::from_secs(60), || {
        let n = fds(pids[0]);
        async move { n <= idle_fds + 64 }
    })
    .await;
    if !settled {
        eprintln!(
            "warning: the gateway still holds {} descriptors (idle: {idle_fds})",
            fds(pids[0])
        );
    }
    // The allocator hands freed pages back over a few seconds (jemalloc's decay): sample for
    // `--settle-secs` and report the last value.
    let mut closed_kib = rss_both(pids)?;
    for _ in 0..o.settle.as_secs() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        closed_kib = rss_both(pids)?;
    }
    Ok(Round {
        open_kib,
        closed_kib,
        open_fds,
        opened: streams,
        open_secs,
        healthz,
    })
}

/// The rounds at one size, on a gateway and service of their own.
struct Size {
    streams: usize,
    idle_kib: [u64; 2],
    rounds: Vec<Round>,
}

impl Size {
    /// KiB a stream over idle, with the largest RSS of the rounds, per process.
    fn per_stream(&self, k: usize) -> f64 {
        let max_open = self.rounds.iter().map(|r| r.open_kib[k]).max().unwrap_or(0);
        max_open.saturating_sub(self.idle_kib[k]) as f64 / self.streams as f64
    }

    fn healthz(&self) -> Vec<Duration> {
        let mut all: Vec<_> = self.rounds.iter().flat_map(|r| r.healthz.clone()).collect();
        all.sort();
        all
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Starts a stack, runs `--rounds` rounds of `streams` streams, prints them, stops the stack.
async fn soak(
    o: &Options,
    streams: usize,
    bins: (&std::path::Path, &std::path::Path),
) -> anyhow::Result<Size> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .pool_max_idle_per_host(64)
        .build()?;
    let fresh = reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()?;
    let stack = start(o, &http, streams, bins.0, bins.1).await?;
    let pids = stack.pids();
    let idle_kib = rss_both(pids)?;
    let idle_fds = fds(pids[0]);
    println!(
        "{streams} streams: gateway {}",
        stack
            .descriptor_budget()
            .as_deref()
            .unwrap_or("(no descriptor budget in its log)")
    );
    println!(
        "  RSS idle: gateway {:.1} MB, service {:.1} MB",
        mib(idle_kib[0]),
        mib(idle_kib[1])
    );
    let mut rounds = Vec::new();
    for i in 1..=o.rounds {
        let r = round(o, streams, &http, &fresh, &stack, idle_fds).await?;
        let mut times = r.healthz.clone();
        times.sort();
        println!(
            "  round {i}: {} streams opened in {:.1} s; descriptors open: gateway {}, service {}; \
             /healthz ×{} median {:.1} ms, max {:.1} ms",
            r.opened,
            r.open_secs,
            r.open_fds[0],
            r.open_fds[1],
            times.len(),
            times.get(times.len() / 2).copied().map_or(0.0, ms),
            times.last().copied().map_or(0.0, ms),
        );
        for (k, who) in WHO.iter().enumerate() {
            println!(
                "    {who:7} RSS with them open {:.1} MB ({:.1} KiB a stream over idle), after close {:.1} MB",
                mib(r.open_kib[k]),
                r.open_kib[k].saturating_sub(idle_kib[k]) as f64 / r.opened as f64,
                mib(r.closed_kib[k])
            );
        }
        rounds.push(r);
    }
    drop(stack);
    Ok(Size {
        streams,
        idle_kib,
        rounds,
    })
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    let o = Options::parse()?;
    let most = o.streams.max(o.compare.unwrap_or(0)) as u64;
    let nofile = raise_nofile(most + 1024)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(run(o, nofile))
}

async fn run(o: Options, nofile: u64) -> anyhow::Result<std::process::ExitCode> {
    let (svc_bin, gw_bin) = match &o.bins {
        Some(dir) => (dir.join("mcp-service"), dir.join("pforte")),
        None => (built_bin("mcp-service")?, built_bin("pforte")?),
    };
    for bin in [&svc_bin, &gw_bin] {
        anyhow::ensure!(bin.exists(), "{} is missing", bin.display());
    }
    println!(
        "pforte-soak: {} SSE streams{} (one session each, one token; session/stream bounds \
         raised above them), held {} s, {} rounds; gateway threads = {}; RLIMIT_NOFILE {nofile}",
        o.streams,
        o.compare
            .map(|n| format!(", compared with {n}"))
            .unwrap_or_default(),
        o.hold.as_secs(),
        o.rounds,
        o.threads
    );
    println!("binaries: {} and {}", gw_bin.display(), svc_bin.display());
    let bins = (svc_bin.as_path(), gw_bin.as_path());
    let baseline = match o.compare {
        Some(n) => Some(soak(&o, n, bins).await?),
        None => None,
    };
    let size = soak(&o, o.streams, bins).await?;

    let mut ok = true;
    let mut check = |pass: bool, what: String| {
        println!("  [{}] {what}", if pass { "ok" } else { "FAIL" });
        ok &= pass;
    };
    let times = size.healthz();
    let slowest = times.last().copied().unwrap_or_default();
    check(
        !times.is_empty() && slowest < HEALTHZ_MAX,
        format!(
            "/healthz with {} streams open < {} ms: {} requests, median {:.1} ms, max {:.1} ms",
            size.streams,
            HEALTHZ_MAX.as_millis(),
            times.len(),
            times.get(times.len() / 2).copied().map_or(0.0, ms),
            ms(slowest)
        ),
    );
    for (k, who) in WHO.iter().enumerate() {
        let cost = size.per_stream(k);
        check(
            cost <= PER_STREAM_KIB[k],
            format!(
                "{who}: RSS a stream over idle at {} streams ≤ {} KiB: {cost:.1} KiB",
                size.streams, PER_STREAM_KIB[k]
            ),
        );
        if let Some(base) = &baseline {
            let was = base.per_stream(k);
            check(
                cost <= was * SCALING,
                format!(
                    "{who}: a stream at {} costs ≤ {SCALING} × a stream at {}: {cost:.1} vs {was:.1} KiB ({:+.1} %)",
                    size.streams,
                    base.streams,
                    (cost / was - 1.0) * 100.0
                ),
            );
        }
        let rounds = &size.rounds;
        if let (Some(first), Some(last)) = (rounds.first(), rounds.last()) {
            let (a, b) = (first.closed_kib[k] as f64, last.closed_kib[k] as f64);
            check(
                b <= a * 1.10,
                format!(
                    "{who}: after-close RSS of round {} within 10 % of round 1: {:.1} MB vs {:.1} MB ({:+.1} %)",
                    rounds.len(),
                    mib(last.closed_kib[k]),
                    mib(first.closed_kib[k]),
                    (b / a - 1.0) * 100.0
                ),
            );
            let worst = rounds.iter().map(|r| r.closed_kib[k]).max().unwrap_or(0);
            check(
                worst <= size.idle_kib[k] + 20 * 1024,
                format!(
                    "{who}: after-close RSS within 20 MB of idle: {:.1} MB vs {:.1} MB idle",
                    mib(worst),
                    mib(size.idle_kib[k])
                ),
            );
        }
    }
    Ok(if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
