//! `pforte-bench`: tools/call `whoami` rate and latency direct to mcp-service vs through the
//! gateway (plain HTTP and TLS, static token; rate limits off, and on with a budget the run never
//! reaches; per-tool policy on, and off to show what it costs), real release binaries on
//! loopback, modes interleaved in rounds, one table with ratios vs direct.
//!
//! Run: `cargo run --release -p pforte-bench --bin pforte-bench [-- --help]`. It builds `pforte`
//! and `mcp-service` into its own target dir first (when started by cargo), starts them on
//! 127.0.0.1, and stops them when done. Bounded: a fixed number of calls per mode and a time cap.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use pforte_tests::{Proc, TestCert, eventually, free_port, http_client, rmcp_client};
use rmcp::model::CallToolRequestParams;

mod sends;
mod versus;

const USAGE: &str = "\
pforte-bench: tools/call `whoami` direct to mcp-service vs through pforte (http and https)

usage: pforte-bench [--sessions N] [--calls N] [--rounds N] [--warmup N] [--max-secs S] [--threads N] [--no-build]
       pforte-bench --nginx [--connections N] [--secs S] [--rounds N] [--threads N] [--no-build]
                    [--nginx-workers N] [--ab BIN] [--a-config TOML] [--b-config TOML]
                    [--syscall-calls N] [--count-only]

  --nginx        side by side with nginx doing the same job (TLS, bearer check, access log,
                 keepalive upstream): direct, nginx http/https, pforte http/https with a static
                 and an OAuth token, limits on, policy off; load from wrk when installed

  --sessions N   concurrent rmcp client sessions per mode            (default 8)
  --calls N      measured calls per mode, shared by the sessions     (default 2000)
  --rounds N     the modes take turns N times, calls split evenly     (default 3)
  --warmup N     unmeasured calls per mode before measuring          (default 200)
  --max-secs S   time cap for the measured phase of one mode         (default 60)
  --threads N    gateway worker threads (`threads` in pforte.toml)   (default 2)
  --connections N  (--nginx) concurrent keep-alive connections    (default 16)
  --secs S       (--nginx) seconds per target and round               (default 8)
  --nginx-workers N  (--nginx) nginx's worker_processes         (default: --threads)
  --ab BIN       (implies --nginx) A/B: gateway A is the `pforte` beside this program, gateway
                 B is BIN (e.g. a build of another commit); both run in http and https beside
                 direct and nginx, in the same interleaved rounds, and the report adds B÷A
  --a-config TOML, --b-config TOML
                 top-level pforte.toml lines added to A's or B's config (e.g. 'threads = 1');
                 with --b-config alone, B defaults to the same binary as A
  --syscall-calls N  (--nginx) calls per target counted under strace (default 1000; 0: none)
  --count-only   (implies --nginx) only count the system calls, no measured rounds
  --no-build     do not run `cargo build` for pforte and mcp-service first

System calls per call are counted with `strace -f -y` when strace is installed: per target, after
the measured rounds (which run without it), --syscall-calls calls one after another on one
kept-alive connection (after 50 unmeasured ones); sends and reads are the write- and read-family
calls on sockets, the same on every run.";

#[derive(Debug, Clone)]
struct Options {
    sessions: usize,
    calls: usize,
    rounds: usize,
    warmup: usize,
    max_secs: u64,
    threads: usize,
    build: bool,
    nginx: bool,
    connections: usize,
    secs: u64,
    nginx_workers: Option<usize>,
    /// A/B: gateway B's binary (`None`: no A/B unless `b_config` is set).
    ab: Option<PathBuf>,
    a_config: String,
    b_config: Option<String>,
    /// (--nginx) calls per target counted under strace, one by one (0: none).
    syscall_calls: usize,
    /// (--nginx) only the counted calls, no measured rounds.
    count_only: bool,
}

impl Options {
    fn parse() -> anyhow::Result<Self> {
        let mut o = Self {
            sessions: 8,
            calls: 2000,
            rounds: 3,
            warmup: 200,
            max_secs: 60,
            threads: 2,
            build: true,
            nginx: false,
            connections: 16,
            secs: 8,
            nginx_workers: None,
            ab: None,
            a_config: String::new(),
            b_config: None,
            syscall_calls: 1000,
            count_only: false,
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
                "--sessions" => o.sessions = num("--sessions")?.clamp(1, 256) as usize,
                "--calls" => o.calls = num("--calls")?.clamp(1, 1_000_000) as usize,
                "--rounds" => o.rounds = num("--rounds")?.clamp(1, 100) as usize,
                "--warmup" => o.warmup = num("--warmup")?.min(100_000) as usize,
                "--max-secs" => o.max_secs = num("--max-secs")?.clamp(1, 3600),
                "--threads" => o.threads = num("--threads")?.min(64) as usize,
                "--no-build" => o.build = false,
                "--nginx" => o.nginx = true,
                "--connections" => o.connections = num("--connections")?.clamp(1, 1024) as usize,
                "--secs" => o.secs = num("--secs")?.clamp(1, 600),
                "--nginx-workers" => {
                    o.nginx_workers = Some(num("--nginx-workers")?.clamp(1, 64) as usize);
                }
                "--ab" => {
                    let v = args.next().context("--ab needs a binary")?;
                    o.ab = Some(PathBuf::from(v));
                    o.nginx = true;
                }
                "--syscall-calls" => {
                    o.syscall_calls = num("--syscall-calls")?.min(100_000) as usize;
                }
                "--count-only" => {
                    o.count_only = true;
                    o.nginx = true;
                }
                "--a-config" => o.a_config = args.next().context("--a-config needs TOML")?,
                "--b-config" => {
                    o.b_config = Some(args.next().context("--b-config needs TOML")?);
                    o.nginx = true;
                }
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

/// The directory of this executable: `target/<profile>/`, where the sibling binaries live.
fn bin_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("current exe")?;
    let dir = exe.parent().context("exe has no parent dir")?;
    // Run as a test or example it sits one level deeper, in deps/ or examples/.
    Ok(match dir.file_name().and_then(|n| n.to_str()) {
        Some("deps" | "examples") => dir.parent().unwrap_or(dir).to_owned(),
        _ => dir.to_owned(),
    })
}

/// Builds `pforte` and `mcp-service` with the profile and target dir of this executable, so the
/// measured binaries are current. Only when started by cargo (which sets `CARGO`).
fn build_siblings(dir: &Path) -> anyhow::Result<()> {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(());
    };
    let target_dir = dir.parent().context("target dir")?;
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_owned(),
        Some(p) => p.to_owned(),
        None => bail!("cannot tell the cargo profile from {}", dir.display()),
    };
    if profile == "dev" {
        eprintln!("warning: a debug build measures nothing useful; run with --release");
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("workspace dir")?
        .join("Cargo.toml");
    eprintln!("building pforte and mcp-service ({profile}) …");
    // The same package set as the documented build command, so that cargo's feature unification
    // matches it and reuses its artifacts instead of building every dependency a second time.
    let mut cmd = Command::new(cargo);
    // `cargo run` gave this process per-crate variables and a library path; a nested build that
    // sees them re-runs some build scripts (and rebuilds their dependents). Undo them.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let user_setting = [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_",
            "CARGO_PROFILE_",
            "CARGO_NET_",
            "CARGO_HTTP_",
            "CARGO_REGISTR",
            "CARGO_TERM_",
            "CARGO_INCREMENTAL",
        ]
        .iter()
        .any(|p| key.starts_with(p));
        if (key.starts_with("CARGO_") && !user_setting) || key == "OUT_DIR" {
            cmd.env_remove(key.as_ref());
        }
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        let kept: Vec<PathBuf> = std::env::split_paths(&paths)
            .filter(|p| !p.starts_with(target_dir) && !p.to_string_lossy().contains("/toolchains/"))
            .collect();
        match std::env::join_paths(&kept) {
            Ok(v) if !kept.is_empty() => cmd.env("LD_LIBRARY_PATH", v),
            _ => cmd.env_remove("LD_LIBRARY_PATH"),
        };
    }
    let status = cmd
        .args(["build", "--quiet", "--profile", &profile, "--bins"])
        .args(["-p", "pforte", "-p", "mcp-service", "-p", "pforte-bench"])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build of pforte and mcp-service failed ({status})");
    }
    Ok(())
}

fn bin(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let p = dir.join(name);
    if !p.exists() {
        bail!(
            "{} is missing: build it with `cargo build --release -p pforte -p mcp-service`",
            p.display()
        );
    }
    Ok(p)
}

/// The last lines of a log file, for error messages.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Starts `mcp-service serve` on a kernel-chosen loopback port; returns it and its MCP URL.
fn start_service(dir: &Path, work: &Path) -> anyhow::Result<(Proc, String)> {
    let log = work.join("mcp-service.log");
    let mut cmd = Command::new(bin(dir, "mcp-service")?);
    cmd.env("MCP_SERVICE_DATA_DIR", work.join("mcp-service-data"))
        .args(["serve", "--listen", "127.0.0.1:0"]);
    let mut proc = Proc::spawn_logged(cmd, &log)?;
    let line = proc
        .wait_line("listening on", Duration::from_secs(30))
        .with_context(|| format!("mcp-service did not start:\n{}", tail(&log)))?;
    let url = line
        .rsplit(' ')
        .next()
        .filter(|u| u.starts_with("http://"))
        .with_context(|| format!("no URL in {line:?}"))?
        .to_owned();
    Ok((proc, url))
}

/// The gateway's rate limits during a run.
#[derive(Debug, Clone, Copy)]
enum Limits {
    /// `[limits] enabled = false`: the proxy path alone.
    Off,
    /// Enabled (in-process limiter), with a budget far above what the run sends: the limiter
    /// decides on every request but never refuses, so its cost shows.
    OnUnreached,
}

impl Limits {
    fn toml(self) -> &'static str {
        match self {
            Self::Off => "[limits]\nenabled = false\n",
            Self::OnUnreached => {
                "[limits]\nenabled = true\n\
                 [limits.mcp]\nrate = 100000000\nperiod_secs = 60\nburst = 10000000\n"
            }
        }
    }
}

/// What a benchmarked gateway has switched on, and which build runs.
#[derive(Debug, Clone, Copy)]
struct Knobs<'a> {
    limits: Limits,
    /// `tool_policy`: every body parsed, scopes decided per tool.
    policy: bool,
    /// The `pforte` binary.
    binary: &'a Path,
    /// Top-level config lines that replace the bench's own for the same key (A/B configs).
    extra: &'a str,
}

/// The top-level part of a bench gateway's config: `base` lines, each replaced by the line of
/// `extra` that sets the same key, then `extra`'s other lines.
fn top_level(base: &[String], extra: &str) -> String {
    let key = |line: &str| line.split_once('=').map(|(k, _)| k.trim().to_owned());
    let extra: Vec<&str> = extra.lines().filter(|l| !l.trim().is_empty()).collect();
    let overridden = |line: &str| {
        extra
            .iter()
            .any(|e| key(e).is_some() && key(e) == key(line))
    };
    let mut out = String::new();
    for line in base.iter().filter(|l| !overridden(l)) {
        out.push_str(line);
        out.push('\n');
    }
    for line in extra {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A running `pforte serve` with a static token.
struct Gateway {
    proc: Proc,
    mcp_url: String,
    /// The TLS certificate and key (https gateways); nginx serves the same ones.
    cert: Option<TestCert>,
    data_dir: PathBuf,
    token: String,
}

impl Gateway {
    fn http(&self) -> reqwest::Client {
        http_client(self.cert.as_ref().map(|c| c.cert_pem.as_str()))
    }

    async fn start(
        work: &Path,
        name: &str,
        tls: bool,
        upstream: &str,
        threads: usize,
        Knobs {
            limits,
            policy,
            binary,
            extra,
        }: Knobs<'_>,
    ) -> anyhow::Result<Self> {
        let home = work.join(name);
        std::fs::create_dir_all(&home)?;
        let data_dir = home.join("data");
        let cert = tls.then(|| TestCert::create(&home)).transpose()?;
        let log = home.join("pforte.log");
        // pingora binds its listeners itself: pick a free port, retry on the rare race.
        for _attempt in 0..3 {
            let port = free_port();
            let tls_section = cert.as_ref().map_or(String::new(), |c| {
                format!(
                    "[tls]\ncert = {:?}\nkey = {:?}\n",
                    c.cert.display().to_string(),
                    c.key.display().to_string()
                )
            });
            let base = [
                format!("listen = \"127.0.0.1:{port}\""),
                format!("data_dir = {:?}", data_dir.display().to_string()),
                format!("threads = {threads}"),
                format!("tool_policy = {policy}"),
                "audit_log = \"off\"".to_owned(),
                "max_connections_per_ip = 0".to_owned(),
            ];
            let config = format!(
                "{}{tls_section}[upstream]\nurl = {upstream:?}\n{}",
                top_level(&base, extra),
                limits.toml(),
            );
            let config_path = home.join("pforte.toml");
            std::fs::write(&config_path, config)?;
            let mut cmd = Command::new(binary);
            // A fresh data dir: create its store. By the environment, not `--init`, so that
            // `--ab` can measure a build from before the flag.
            cmd.arg("serve").arg("--config").arg(&config_path);
            cmd.env("PFORTE_INIT", "1");
            let mut proc = Proc::spawn_logged(cmd, &log)?;
            let scheme = if tls { "https" } else { "http" };
            let base = format!("{scheme}://127.0.0.1:{port}");
            let http = http_client(cert.as_ref().map(|c| c.cert_pem.as_str()));
            let health = format!("{base}/healthz");
            let up = eventually(Duration::from_secs(20), || {
                let req = http.get(&health).send();
                async move { req.await.is_ok_and(|r| r.status() == 200) }
            })
            .await;
            if !up {
                if matches!(proc.child.try_wait(), Ok(None)) {
                    bail!(
                        "{name}: pforte runs but never became healthy:\n{}",
                        tail(&log)
                    );
                }
                continue; // It exited: most likely the port was taken meanwhile.
            }
            let out = Command::new(binary)
                .args(["token", "create", "bench", "--data-dir"])
                .arg(&data_dir)
                .output()?;
            if !out.status.success() {
                bail!(
                    "pforte token create failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let token = String::from_utf8(out.stdout)?.trim().to_owned();
            let mcp_url = format!("{base}/mcp");
            // The gateway reloads tokens within a second; wait until it knows this one.
            let seen = eventually(Duration::from_secs(3), || {
                let req = http.get(&mcp_url).bearer_auth(&token).send();
                async move { req.await.is_ok_and(|r| r.status() != 401) }
            })
            .await;
            if !seen {
                bail!("{name}: the gateway did not accept the new token within 3 s");
            }
            let _ = proc.stdout_lines.try_iter().count();
            return Ok(Self {
                proc,
                mcp_url,
                cert,
                data_dir,
                token,
            });
        }
        bail!("{name}: pforte did not start:\n{}", tail(&log))
    }
}

/// One mode's measured outcome.
struct Outcome {
    label: &'static str,
    ok: usize,
    errors: usize,
    wall: Duration,
    capped: bool,
    /// Sorted latencies of the successful calls.
    latencies: Vec<Duration>,
    /// CPU time the measured process (the gateway, or the service when direct) spent on the
    /// measured calls: a cost per call that the machine's drifting speed affects far less.
    cpu: Duration,
}

impl Outcome {
    /// Adds another round of the same mode.
    fn merge(&mut self, other: Self) {
        self.ok += other.ok;
        self.errors += other.errors;
        self.wall += other.wall;
        self.capped |= other.capped;
        self.cpu += other.cpu;
        self.latencies.extend(other.latencies);
        self.latencies.sort_unstable();
    }

    /// Microseconds of the measured process's CPU per successful call.
    fn cpu_us_per_call(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / (self.ok.max(1) as f64)
    }

    fn rate(&self) -> f64 {
        self.ok as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    /// Nearest-rank percentile in milliseconds.
    fn pct_ms(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * self.latencies.len() as f64).ceil() as usize;
        let i = rank.clamp(1, self.latencies.len()) - 1;
        self.latencies[i].as_secs_f64() * 1e3
    }
}

/// Connects `opts.sessions` rmcp sessions to `url`, checks one `whoami`, warms up, then makes
/// `opts.calls` calls shared by the sessions (or as many as fit in the time cap).
async fn measure(
    label: &'static str,
    url: &str,
    http: impl Fn() -> reqwest::Client,
    token: &str,
    expect_subject: Option<&str>,
    pid: u32,
    opts: &Options,
) -> anyhow::Result<Outcome> {
    let mut clients = Vec::with_capacity(opts.sessions);
    for _ in 0..opts.sessions {
        // One HTTP client (connection pool) per session, as separate agents would have.
        let client = rmcp_client(url, http(), token, &[])
            .await
            .with_context(|| format!("{label}: connecting an rmcp session to {url}"))?;
        clients.push(Arc::new(client));
    }
    // Sanity: the call works, and through the gateway it carries the gateway's identity.
    let first = clients[0]
        .call_tool(CallToolRequestParams::new("whoami"))
        .await
        .with_context(|| format!("{label}: whoami"))?;
    let subject = first
        .structured_content
        .as_ref()
        .and_then(|v| v.get("subject"))
        .and_then(|v| v.as_str());
    if subject != expect_subject {
        bail!("{label}: whoami subject is {subject:?}, expected {expect_subject:?}");
    }

    let run = |n: usize, cap: Duration| {
        let next = Arc::new(AtomicUsize::new(0));
        let deadline = Instant::now() + cap;
        let tasks: Vec<_> = clients
            .iter()
            .map(|c| {
                let (c, next) = (Arc::clone(c), Arc::clone(&next));
                tokio::spawn(async move {
                    let mut lat = Vec::new();
                    let mut errors = 0usize;
                    let mut first_error = None;
                    while next.fetch_add(1, Ordering::Relaxed) < n && Instant::now() < deadline {
                        let t0 = Instant::now();
                        match c.call_tool(CallToolRequestParams::new("whoami")).await {
                            Ok(r) if r.is_error != Some(true) => lat.push(t0.elapsed()),
                            Ok(r) => {
                                errors += 1;
                                first_error.get_or_insert_with(|| format!("tool error: {r:?}"));
                            }
                            Err(e) => {
                                errors += 1;
                                first_error.get_or_insert_with(|| e.to_string());
                            }
                        }
                    }
                    (lat, errors, first_error)
                })
            })
            .collect();
        async move {
            let started = Instant::now();
            let mut latencies = Vec::with_capacity(n);
            let mut errors = 0;
            let mut first_error = None;
            for t in tasks {
                let (lat, e, first) = t.await.context("bench task panicked")?;
                latencies.extend(lat);
                errors += e;
                first_error = first_error.or(first);
            }
            let wall = started.elapsed();
            if let Some(e) = &first_error {
                eprintln!("{label}: {errors} failed calls; the first: {e}");
            }
            anyhow::Ok((latencies, errors, wall, Instant::now() >= deadline))
        }
    };

    if opts.warmup > 0 {
        run(opts.warmup, Duration::from_secs(opts.max_secs)).await?;
    }
    let cpu_before = cpu_time(pid)?;
    let (mut latencies, errors, wall, capped) =
        run(opts.calls, Duration::from_secs(opts.max_secs)).await?;
    let cpu = cpu_time(pid)?.saturating_sub(cpu_before);
    latencies.sort_unstable();
    for c in clients {
        if let Ok(c) = Arc::try_unwrap(c) {
            let _ = c.cancel().await;
        }
    }
    Ok(Outcome {
        label,
        ok: latencies.len(),
        errors,
        wall,
        capped,
        latencies,
        cpu,
    })
}

/// User + system CPU time of process `pid` (all its threads), from `/proc/PID/stat`.
fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may contain blanks; the fields after its closing parenthesis are fixed.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("unreadable /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5), i.e. 12 and 13 after the name.
    let ticks: u64 = [11, 12]
        .iter()
        .map(|&i| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum();
    // USER_HZ is 100 on Linux for every architecture this runs on.
    Ok(Duration::from_millis(ticks * 10))
}

fn ratio(x: f64, base: f64) -> String {
    if base > 0.0 && x.is_finite() && base.is_finite() {
        format!("{:.2}x", x / base)
    } else {
        "-".to_owned()
    }
}

fn print_table(outcomes: &[Outcome], opts: &Options) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!();
    println!(
        "tools/call whoami · {} sessions · {} calls per mode in {} interleaved rounds (warm-up {} \
         each) · loopback · {cpus} CPUs shared by client, gateway ({} threads) and service",
        opts.sessions, opts.calls, opts.rounds, opts.warmup, opts.threads
    );
    println!(
        "gateway rate limits off, except \"limits on\": in-process GCRA deciding every call, \
         with a budget the run never reaches; per-tool policy on (every body parsed, catalog \
         lookup, scope decision), except \"policy off\"; audit log off"
    );
    println!();
    println!(
        "{:<26} {:>6} {:>6} {:>9} {:>8} {:>8} {:>10}   {:>9} {:>8} {:>8}",
        "mode",
        "calls",
        "errors",
        "req/s",
        "p50 ms",
        "p99 ms",
        "cpu µs/call",
        "req/s÷dir",
        "p50÷dir",
        "p99÷dir"
    );
    println!("{}", "-".repeat(112));
    let base = &outcomes[0];
    for o in outcomes {
        println!(
            "{:<26} {:>6} {:>6} {:>9.0} {:>8.2} {:>8.2} {:>10.0}   {:>9} {:>8} {:>8}{}",
            o.label,
            o.ok,
            o.errors,
            o.rate(),
            o.pct_ms(50.0),
            o.pct_ms(99.0),
            o.cpu_us_per_call(),
            ratio(o.rate(), base.rate()),
            ratio(o.pct_ms(50.0), base.pct_ms(50.0)),
            ratio(o.pct_ms(99.0), base.pct_ms(99.0)),
            if o.capped { "  (time cap hit)" } else { "" },
        );
    }
    println!();
    println!(
        "cpu µs/call: CPU time of the measured process (the service when direct, else the \
         gateway) per call, from /proc (10 ms ticks)"
    );
    println!();
}

async fn run(opts: Options) -> anyhow::Result<bool> {
    let dir = bin_dir()?;
    if opts.build {
        build_siblings(&dir)?;
    }
    if opts.nginx {
        return versus::run(&dir, &opts).await;
    }
    let work = tempfile::Builder::new().prefix("pforte-bench-").tempdir()?;
    let w = work.path();
    let (svc, svc_url) = start_service(&dir, w)?;
    let threads = opts.threads;
    let pforte = bin(&dir, "pforte")?;
    let start = |name, tls, limits, policy| {
        let knobs = Knobs {
            limits,
            policy,
            binary: &pforte,
            extra: &opts.a_config,
        };
        Gateway::start(w, name, tls, &svc_url, threads, knobs)
    };
    let plain = start("gw-http", false, Limits::Off, true).await?;
    let tls = start("gw-https", true, Limits::Off, true).await?;
    let tls_lim = start("gw-https-lim", true, Limits::OnUnreached, true).await?;
    let tls_nopol = start("gw-https-nopolicy", true, Limits::Off, false).await?;
    eprintln!("mcp-service {svc_url}; four gateways in front of it; measuring …");

    // Direct mode sends the same Authorization header (the service ignores it), so the request
    // bytes match the gateway modes' client side. The modes take turns, `rounds` times, so
    // that the machine's drifting speed affects them alike.
    let modes: [(&'static str, Option<&Gateway>); 5] = [
        ("direct (mcp-service)", None),
        ("pforte http + token", Some(&plain)),
        ("pforte https + token", Some(&tls)),
        ("pforte https + limits on", Some(&tls_lim)),
        ("pforte https, policy off", Some(&tls_nopol)),
    ];
    let per_round = Options {
        calls: opts.calls.div_ceil(opts.rounds),
        ..opts.clone()
    };
    let mut slots: Vec<Option<Outcome>> = modes.iter().map(|_| None).collect();
    for round in 0..opts.rounds {
        // Each round starts one mode later, so that no mode always runs right after another.
        for k in 0..modes.len() {
            let i = (k + round) % modes.len();
            let (label, gw) = &modes[i];
            let outcome = match gw {
                None => {
                    let http = || http_client(None);
                    let pid = svc.child.id();
                    measure(label, &svc_url, http, &plain.token, None, pid, &per_round).await?
                }
                Some(gw) => {
                    let http = || gw.http();
                    let subject = Some("operator");
                    let pid = gw.proc.child.id();
                    let url = &gw.mcp_url;
                    measure(label, url, http, &gw.token, subject, pid, &per_round).await?
                }
            };
            match slots[i].as_mut() {
                Some(o) => o.merge(outcome),
                None => slots[i] = Some(outcome),
            }
        }
    }
    let outcomes: Vec<Outcome> = slots.into_iter().flatten().collect();
    print_table(&outcomes, &opts);
    Ok(outcomes.iter().all(|o| o.errors == 0 && o.ok > 0))
}

fn main() -> std::process::ExitCode {
    let opts = match Options::parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("pforte-bench: {e:#}");
            return std::process::ExitCode::from(64);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pforte-bench: starting the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(opts)) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("pforte-bench: some calls failed (see the errors column)");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("pforte-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ab_config_line_replaces_the_bench_line_for_its_key() {
        let base = ["threads = 2".to_owned(), "tool_policy = true".to_owned()];
        assert_eq!(
            top_level(&base, "threads = 1\nlog_format = \"json\"\n"),
            "tool_policy = true\nthreads = 1\nlog_format = \"json\"\n"
        );
        assert_eq!(top_level(&base, ""), "threads = 2\ntool_policy = true\n");
    }
}
