//! `pforte-bench --nginx`: the gateway side by side with nginx doing the same job in front of the
//! same mcp-service — TLS with the same self-signed certificate, a bearer check (`map
//! $http_authorization`), `proxy_pass` over an upstream keep-alive pool with buffering off, an
//! access log, as many workers as the gateway has threads — all loaded by the same generator
//! (`wrk` when installed, else a reqwest loop), targets interleaved in rotating rounds.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use pforte_tests::{Proc, eventually, free_port, http_client};

use crate::{
    Gateway, Knobs, Limits, Options, bin, cpu_time, sends, start_service, start_service_on, tail,
};

/// The measured request: MCP `tools/call whoami` on one initialized session.
const CALL: &str =
    r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"whoami","arguments":{}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const PROTOCOL: &str = "2025-06-18";

/// The OAuth user the bench signs in as.
const OAUTH_USER: &str = "bench";
const OAUTH_PASSWORD: &str = "bench-password-not-secret";

/// Calls made through a target before its counted calls (connections opened, pools filled).
const UNCOUNTED_CALLS: usize = 50;

/// A gateway build and configuration under test: one, or two in an A/B run.
struct Variant {
    /// `pforte`, or `A` / `B`.
    name: &'static str,
    /// For the gateways' directory names.
    slug: &'static str,
    binary: PathBuf,
    /// Top-level config lines of this variant.
    config: String,
    /// Its upstream is the second service, on a Unix domain socket (`--b-unix`).
    unix: bool,
}

impl Variant {
    fn from_options(sibling: &Path, opts: &Options) -> Vec<Self> {
        let a = |name| Self {
            name,
            slug: "a",
            binary: sibling.to_owned(),
            config: opts.a_config.clone(),
            unix: false,
        };
        if opts.ab.is_none() && opts.b_config.is_none() && !opts.b_unix {
            return vec![a("pforte")];
        }
        let b = Self {
            name: "B",
            slug: "b",
            binary: opts.ab.clone().unwrap_or_else(|| sibling.to_owned()),
            config: opts.b_config.clone().unwrap_or_default(),
            unix: opts.b_unix,
        };
        vec![a("A"), b]
    }

    fn knobs(&self, limits: Limits, policy: bool) -> Knobs<'_> {
        Knobs {
            limits,
            policy,
            binary: &self.binary,
            extra: &self.config,
        }
    }

    fn describe(&self) -> String {
        let config = self.config.lines().collect::<Vec<_>>().join("; ");
        format!(
            "{}: {}{}{}",
            self.name,
            self.binary.display(),
            if config.is_empty() {
                String::new()
            } else {
                format!(" with {config}")
            },
            if self.unix {
                ", upstream over a Unix domain socket (a second mcp-service)"
            } else {
                ""
            }
        )
    }
}

/// What a target's ratios are taken against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Direct,
    Nginx { tls: bool },
    Pforte { tls: bool },
}

/// One measured target: a URL, a credential and the session opened through it.
struct Target {
    label: String,
    kind: Kind,
    url: String,
    ca_pem: Option<String>,
    token: String,
    /// The subject `whoami` must report (`None`: nothing in front that sets one).
    subject: Option<&'static str>,
    /// The process whose CPU time is charged to the target (nginx: the master and its workers).
    pid: u32,
    session: String,
}

/// One target's outcome, summed over rounds.
#[derive(Default)]
struct Tally {
    requests: u64,
    errors: u64,
    secs: f64,
    cpu: Duration,
    /// Per round: its request count and its latency quantiles (µs) at 0.1 % steps.
    quantiles: Vec<(u64, Vec<f64>)>,
}

impl Tally {
    fn rate(&self) -> f64 {
        self.requests as f64 / self.secs.max(1e-9)
    }

    fn cpu_us_per_request(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.requests.max(1) as f64
    }

    /// The `p`-th percentile in ms of the rounds' pooled quantiles, each round weighted by its
    /// request count (wrk reports quantiles, not samples; 999 per round keep the pooling exact
    /// to a tenth of a percent).
    fn pct_ms(&self, p: f64) -> f64 {
        let mut pooled: Vec<(f64, f64)> = self
            .quantiles
            .iter()
            .flat_map(|(n, q)| {
                let w = *n as f64 / q.len().max(1) as f64;
                q.iter().map(move |v| (*v, w))
            })
            .collect();
        if pooled.is_empty() {
            return f64::NAN;
        }
        pooled.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total: f64 = pooled.iter().map(|(_, w)| w).sum();
        let mut seen = 0.0;
        for (v, w) in &pooled {
            seen += w;
            if seen >= total * p / 100.0 {
                return v / 1e3;
            }
        }
        pooled.last().map_or(f64::NAN, |(v, _)| v / 1e3)
    }
}

/// One round of one target as the load generator saw it.
struct Round {
    requests: u64,
    errors: u64,
    secs: f64,
    quantiles_us: Vec<f64>,
}

/// The load generator.
enum Generator {
    Wrk(PathBuf),
    /// No wrk: one tokio task per connection, each with its own keep-alive client.
    Reqwest,
}

impl Generator {
    fn name(&self) -> String {
        match self {
            Self::Wrk(p) => format!("wrk ({}), 2 threads", p.display()),
            Self::Reqwest => "reqwest loop (wrk not installed), one task per connection".into(),
        }
    }

    async fn load(
        &self,
        work: &Path,
        t: &Target,
        connections: usize,
        secs: u64,
    ) -> anyhow::Result<Round> {
        match self {
            Self::Wrk(wrk) => run_wrk(wrk, work, t, connections, secs),
            Self::Reqwest => run_reqwest(t, connections, secs).await,
        }
    }
}

/// `name` on `PATH`, if there.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn lua_quote(s: &str) -> String {
    format!("{s:?}")
}

/// The wrk script: the same POST on every connection; `done` prints the totals and 999
/// latency quantiles in one line each.
fn wrk_script(t: &Target) -> String {
    let mut s = String::new();
    s.push_str("wrk.method = \"POST\"\n");
    // Every request its own JSON-RPC id (a session answers by id): thread number, then count.
    let (head, tail) = CALL.split_once("\"id\":2").unwrap_or((CALL, ""));
    let _ = writeln!(
        s,
        "local threads = 0\n\
         function setup(thread) threads = threads + 1; thread:set(\"base\", threads * 1000000000) end\n\
         local n = 0\n\
         function request()\n\
         \x20 n = n + 1\n\
         \x20 return wrk.format(nil, nil, nil, {} .. string.format(\"%d\", base + n) .. {})\n\
         end",
        lua_quote(&format!("{head}\"id\":")),
        lua_quote(tail)
    );
    for (name, value) in request_headers(t) {
        let _ = writeln!(
            s,
            "wrk.headers[{}] = {}",
            lua_quote(name),
            lua_quote(&value)
        );
    }
    s.push_str(
        "function done(summary, latency, requests)\n\
         \x20 local e = summary.errors\n\
         \x20 io.write(string.format(\"BENCH-TOTAL %d %d %d\\n\", summary.requests,\n\
         \x20   e.connect + e.read + e.write + e.status + e.timeout, summary.duration))\n\
         \x20 local q = {}\n\
         \x20 for i = 1, 999 do q[#q + 1] = string.format(\"%d\", latency:percentile(i / 10)) end\n\
         \x20 io.write(\"BENCH-QUANTILES \" .. table.concat(q, \" \") .. \"\\n\")\n\
         end\n",
    );
    s
}

fn request_headers(t: &Target) -> Vec<(&'static str, String)> {
    vec![
        ("Content-Type", "application/json".to_owned()),
        ("Accept", "application/json, text/event-stream".to_owned()),
        ("Authorization", format!("Bearer {}", t.token)),
        ("Mcp-Session-Id", t.session.clone()),
        ("Mcp-Protocol-Version", PROTOCOL.to_owned()),
    ]
}

fn run_wrk(
    wrk: &Path,
    work: &Path,
    t: &Target,
    connections: usize,
    secs: u64,
) -> anyhow::Result<Round> {
    let script = work.join("wrk-call.lua");
    std::fs::write(&script, wrk_script(t))?;
    let out = Command::new(wrk)
        .arg(format!("-t{}", connections.min(2)))
        .arg(format!("-c{connections}"))
        .arg(format!("-d{secs}s"))
        .args(["--timeout", "5s", "-s"])
        .arg(&script)
        .arg(&t.url)
        .output()
        .context("running wrk")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{}: wrk failed ({}): {stdout}{}",
            t.label,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = |tag: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(tag))
            .with_context(|| format!("{}: no {tag} in wrk's output: {stdout}", t.label))
    };
    let total: Vec<u64> = line("BENCH-TOTAL ")?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let [requests, errors, duration_us] = total[..] else {
        bail!("{}: unreadable wrk totals: {stdout}", t.label);
    };
    let quantiles_us = line("BENCH-QUANTILES ")?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    Ok(Round {
        requests: requests.saturating_sub(errors),
        errors,
        secs: duration_us as f64 / 1e6,
        quantiles_us,
    })
}

async fn run_reqwest(t: &Target, connections: usize, secs: u64) -> anyhow::Result<Round> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|task| {
            let http = http_client(t.ca_pem.as_deref());
            let headers = request_headers(t);
            let url = t.url.clone();
            tokio::spawn(async move {
                let (mut lat, mut errors) = (Vec::new(), 0u64);
                let mut n = 0u64;
                while Instant::now() < deadline {
                    n += 1;
                    // Every request its own JSON-RPC id: a session answers by id.
                    let id = format!("\"id\":{}", (task as u64 + 1) * 1_000_000_000 + n);
                    let body = CALL.replacen("\"id\":2", &id, 1);
                    let t0 = Instant::now();
                    let mut req = http.post(&url).body(body);
                    for (name, value) in &headers {
                        req = req.header(*name, value);
                    }
                    let ok = match req.send().await {
                        Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
                        _ => false,
                    };
                    if ok {
                        lat.push(t0.elapsed().as_secs_f64() * 1e6);
                    } else {
                        errors += 1;
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let (mut all, mut errors) = (Vec::new(), 0);
    for task in tasks {
        let (lat, e) = task.await?;
        all.extend(lat);
        errors += e;
    }
    let secs = started.elapsed().as_secs_f64();
    all.sort_by(f64::total_cmp);
    let quantiles_us = if all.is_empty() {
        Vec::new()
    } else {
        (1..=999)
            .map(|i| all[(all.len() * i / 1000).min(all.len() - 1)])
            .collect()
    };
    Ok(Round {
        requests: all.len() as u64,
        errors,
        secs,
        quantiles_us,
    })
}

/// The JSON-RPC message in a response body, plain JSON or the `data:` of an SSE event.
fn rpc_message(body: &str) -> Option<serde_json::Value> {
    serde_json::from_str(body).ok().or_else(|| {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
            .find(|m| m.get("id").is_some())
    })
}

/// Opens one MCP session through the target (initialize, initialized), then checks that
/// `whoami` answers with the expected subject; returns the session id.
async fn open_session(t: &Target) -> anyhow::Result<String> {
    let http = http_client(t.ca_pem.as_deref());
    let post = |body: String, session: Option<&str>| {
        let mut req = http
            .post(&t.url)
            .bearer_auth(&t.token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(id) = session {
            req = req
                .header("mcp-session-id", id)
                .header("mcp-protocol-version", PROTOCOL);
        }
        req.send()
    };
    let initialize =
        pforte_tests::initialize_request(PROTOCOL, "pforte-bench", &serde_json::json!({}));
    let resp = post(initialize.to_string(), None).await?;
    let status = resp.status();
    let session = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = resp.text().await?;
    let Some(session) = session.filter(|_| status.is_success()) else {
        bail!("{}: initialize answered {status}: {body}", t.label);
    };
    let resp = post(INITIALIZED.to_owned(), Some(&session)).await?;
    if !resp.status().is_success() {
        bail!("{}: notifications/initialized: {}", t.label, resp.status());
    }
    let resp = post(CALL.to_owned(), Some(&session)).await?;
    let status = resp.status();
    let body = resp.text().await?;
    let message = rpc_message(&body)
        .with_context(|| format!("{}: whoami answered {status}: {body}", t.label))?;
    let subject = message
        .pointer("/result/structuredContent/subject")
        .and_then(|v| v.as_str());
    if subject != t.subject {
        bail!(
            "{}: whoami subject is {subject:?}, expected {:?}: {body}",
            t.label,
            t.subject
        );
    }
    Ok(session)
}

/// A running nginx (master and workers) with an http and an https listener.
struct Nginx {
    proc: Proc,
    http_url: String,
    https_url: String,
}

/// The nginx configuration equivalent to the gateway's job.
fn nginx_conf(
    home: &Path,
    workers: usize,
    ports: (u16, u16),
    upstream: &str,
    token: &str,
    cert: &pforte_tests::TestCert,
) -> String {
    let h = home.display();
    format!(
        "worker_processes {workers};\n\
         daemon off;\n\
         pid {h}/nginx.pid;\n\
         error_log {h}/error.log warn;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n\
         \x20 access_log {h}/access.log combined;\n\
         \x20 client_body_temp_path {h}/tmp-body;\n\
         \x20 proxy_temp_path {h}/tmp-proxy;\n\
         \x20 fastcgi_temp_path {h}/tmp-fastcgi;\n\
         \x20 uwsgi_temp_path {h}/tmp-uwsgi;\n\
         \x20 scgi_temp_path {h}/tmp-scgi;\n\
         \x20 keepalive_requests 1000000;\n\
         \x20 map_hash_bucket_size 256;\n\
         \x20 map $http_authorization $bench_authorized {{\n\
         \x20   default 0;\n\
         \x20   \"Bearer {token}\" 1;\n\
         \x20 }}\n\
         \x20 upstream mcp_service {{\n\
         \x20   server {upstream};\n\
         \x20   keepalive 64;\n\
         \x20   keepalive_requests 1000000;\n\
         \x20 }}\n\
         \x20 server {{\n\
         \x20   listen 127.0.0.1:{http};\n\
         \x20   listen 127.0.0.1:{https} ssl;\n\
         \x20   ssl_certificate {cert};\n\
         \x20   ssl_certificate_key {key};\n\
         \x20   ssl_protocols TLSv1.2 TLSv1.3;\n\
         \x20   location = /mcp {{\n\
         \x20     if ($bench_authorized = 0) {{ return 401; }}\n\
         \x20     proxy_pass http://mcp_service;\n\
         \x20     proxy_http_version 1.1;\n\
         \x20     proxy_buffering off;\n\
         \x20     proxy_set_header Connection \"\";\n\
         \x20     proxy_set_header Host {upstream};\n\
         \x20     proxy_set_header Authorization \"\";\n\
         \x20     proxy_set_header X-Request-Id $request_id;\n\
         \x20     proxy_set_header X-Forwarded-For $remote_addr;\n\
         \x20     proxy_set_header X-Forwarded-Proto $scheme;\n\
         \x20   }}\n\
         \x20 }}\n\
         }}\n",
        http = ports.0,
        https = ports.1,
        cert = cert.cert.display(),
        key = cert.key.display(),
    )
}

impl Nginx {
    async fn start(
        nginx: &Path,
        work: &Path,
        workers: usize,
        upstream: &str,
        token: &str,
        cert: &pforte_tests::TestCert,
    ) -> anyhow::Result<Self> {
        let home = work.join("nginx");
        std::fs::create_dir_all(&home)?;
        let log = home.join("stderr.log");
        for _attempt in 0..3 {
            let ports = (free_port(), free_port());
            let conf = home.join("nginx.conf");
            std::fs::write(
                &conf,
                nginx_conf(&home, workers, ports, upstream, token, cert),
            )?;
            let mut cmd = Command::new(nginx);
            cmd.arg("-p").arg(&home).arg("-c").arg(&conf);
            cmd.arg("-e").arg(home.join("error.log"));
            let mut proc = Proc::spawn_logged(cmd, &log)?;
            let addrs = [ports.0, ports.1].map(|p| format!("127.0.0.1:{p}"));
            let up = eventually(Duration::from_secs(10), || {
                let addrs = addrs.clone();
                async move {
                    for a in &addrs {
                        if tokio::net::TcpStream::connect(a).await.is_err() {
                            return false;
                        }
                    }
                    true
                }
            })
            .await;
            if up {
                return Ok(Self {
                    proc,
                    http_url: format!("http://127.0.0.1:{}/mcp", ports.0),
                    https_url: format!("https://127.0.0.1:{}/mcp", ports.1),
                });
            }
            if matches!(proc.child.try_wait(), Ok(None)) {
                bail!(
                    "nginx runs but does not listen:\n{}",
                    tail(&home.join("error.log"))
                );
            }
        }
        bail!(
            "nginx did not start:\n{}{}",
            tail(&log),
            tail(&home.join("error.log"))
        )
    }
}

/// CPU time of `pid` and its child processes (nginx's workers).
fn tree_cpu(pid: u32) -> Duration {
    let mut total = cpu_time(pid).unwrap_or_default();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return total;
    };
    for entry in entries.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let parent = std::fs::read_to_string(format!("/proc/{child}/stat"))
            .ok()
            .and_then(|s| {
                let rest = s.rsplit_once(')')?.1.to_owned();
                rest.split_whitespace().nth(1)?.parse::<u32>().ok()
            });
        if parent == Some(pid) {
            total += cpu_time(child).unwrap_or_default();
        }
    }
    total
}

/// Adds the bench's OAuth user to the gateway's store and signs in through the real flow.
async fn oauth_token(dir: &Path, gw: &Gateway) -> anyhow::Result<String> {
    use std::io::Write as _;
    let mut child = Command::new(bin(dir, "pforte")?)
        .args(["user", "add", OAUTH_USER, "--data-dir"])
        .arg(&gw.data_dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(format!("{OAUTH_PASSWORD}\n").as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "pforte user add: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let ca = gw.cert.as_ref().map(|c| c.cert_pem.as_str());
    pforte_tests::oauth::access_token_at(
        &gw.mcp_url,
        ca,
        OAUTH_USER,
        OAUTH_PASSWORD,
        "mcp:read mcp:write",
    )
    .await
    .context("signing in with OAuth")
}

fn ratio(x: f64, base: Option<f64>) -> String {
    match base {
        Some(b) if b > 0.0 && x.is_finite() && b.is_finite() => format!("{:.2}", x / b),
        _ => "-".to_owned(),
    }
}

pub(crate) async fn run(dir: &Path, opts: &Options) -> anyhow::Result<bool> {
    let work = tempfile::Builder::new()
        .prefix("pforte-bench-nginx-")
        .tempdir()?;
    let w = work.path();
    let (svc, svc_url) = start_service(dir, w)?;
    let upstream = svc_url
        .strip_prefix("http://")
        .and_then(|r| r.split('/').next())
        .context("service URL")?
        .to_owned();
    let pforte = bin(dir, "pforte")?;
    let variants = Variant::from_options(&pforte, opts);
    let threads = opts.threads;
    // --b-unix: B's gateways reach a second service over a Unix domain socket.
    let unix_service = if opts.b_unix {
        let socket = format!("unix:{}", w.join("mcp-service.sock").display());
        Some(start_service_on(dir, w, "mcp-service-unix", &socket)?)
    } else {
        None
    };
    // Per variant, an http and an https gateway with a static token; without A/B, also the
    // https rows with OAuth, limits on and policy off.
    let mut pairs = Vec::new();
    for v in &variants {
        let on = v.knobs(Limits::Off, true);
        let upstream = match &unix_service {
            Some((_, url)) if v.unix => url,
            _ => &svc_url,
        };
        let plain = format!("gw-{}-http", v.slug);
        let plain = Gateway::start(w, &plain, false, upstream, threads, on).await?;
        let tls = format!("gw-{}-https", v.slug);
        let tls = Gateway::start(w, &tls, true, upstream, threads, on).await?;
        pairs.push((plain, tls));
    }
    let (plain, tls) = &pairs[0];
    let extra_rows = if variants.len() == 1 {
        let v = &variants[0];
        let lim = v.knobs(Limits::OnUnreached, true);
        let lim = Gateway::start(w, "gw-https-lim", true, &svc_url, threads, lim).await?;
        let nopol = v.knobs(Limits::Off, false);
        let nopol = Gateway::start(w, "gw-https-nopolicy", true, &svc_url, threads, nopol).await?;
        let oauth = oauth_token(dir, tls).await?;
        Some((lim, nopol, oauth))
    } else {
        None
    };
    let cert = tls.cert.clone().context("the https gateway has a cert")?;

    let nginx = match on_path("nginx") {
        Some(path) => Some(
            Nginx::start(
                &path,
                w,
                opts.nginx_workers.unwrap_or(opts.threads).max(1),
                &upstream,
                &plain.token,
                &cert,
            )
            .await?,
        ),
        None => {
            println!("nginx not installed, skipped");
            None
        }
    };
    let generator = match on_path("wrk") {
        Some(p) => Generator::Wrk(p),
        None => Generator::Reqwest,
    };

    let target =
        |label: &str, kind, url: &str, gw: Option<&Gateway>, token: &str, subject, pid| Target {
            label: label.to_owned(),
            kind,
            url: url.to_owned(),
            ca_pem: gw.and_then(|g| g.cert.as_ref()).map(|c| c.cert_pem.clone()),
            token: token.to_owned(),
            subject,
            pid,
            session: String::new(),
        };
    let op = Some("operator");
    let mut targets = vec![target(
        "direct (mcp-service)",
        Kind::Direct,
        &svc_url,
        None,
        &plain.token,
        None,
        svc.child.id(),
    )];
    if let Some(n) = &nginx {
        let pid = n.proc.child.id();
        targets.push(target(
            "nginx http",
            Kind::Nginx { tls: false },
            &n.http_url,
            None,
            &plain.token,
            None,
            pid,
        ));
        let mut t = target(
            "nginx https",
            Kind::Nginx { tls: true },
            &n.https_url,
            None,
            &plain.token,
            None,
            pid,
        );
        t.ca_pem = Some(cert.cert_pem.clone());
        targets.push(t);
    }
    let pf = |tls| Kind::Pforte { tls };
    let pid = |g: &Gateway| g.proc.child.id();
    for (v, (plain, tls)) in variants.iter().zip(&pairs) {
        for (gw, mode) in [(plain, "http"), (tls, "https")] {
            targets.push(target(
                &format!("{} {mode} + token", v.name),
                pf(gw.cert.is_some()),
                &gw.mcp_url,
                Some(gw),
                &gw.token,
                op,
                pid(gw),
            ));
        }
    }
    if let Some((lim, nopol, oauth)) = &extra_rows {
        targets.extend([
            target(
                "pforte https + OAuth",
                pf(true),
                &tls.mcp_url,
                Some(tls),
                oauth,
                Some(OAUTH_USER),
                pid(tls),
            ),
            target(
                "pforte https, limits on",
                pf(true),
                &lim.mcp_url,
                Some(lim),
                &lim.token,
                op,
                pid(lim),
            ),
            target(
                "pforte https, policy off",
                pf(true),
                &nopol.mcp_url,
                Some(nopol),
                &nopol.token,
                op,
                pid(nopol),
            ),
        ]);
    }
    for t in &mut targets {
        t.session = open_session(t).await?;
    }
    eprintln!(
        "{} targets, {} rounds of {} s each, {} connections, {} …",
        targets.len(),
        opts.rounds,
        opts.secs,
        opts.connections,
        generator.name()
    );
    let mut tallies: Vec<Tally> = targets.iter().map(|_| Tally::default()).collect();
    let rounds = if opts.count_only { 0 } else { opts.rounds };
    for round in 0..rounds {
        for k in 0..targets.len() {
            let i = (k + round) % targets.len();
            let t = &targets[i];
            let cpu0 = tree_cpu(t.pid);
            let r = generator.load(w, t, opts.connections, opts.secs).await?;
            let tally = &mut tallies[i];
            tally.cpu += tree_cpu(t.pid).saturating_sub(cpu0);
            tally.requests += r.requests;
            tally.errors += r.errors;
            tally.secs += r.secs;
            tally.quantiles.push((r.requests, r.quantiles_us));
            eprintln!(
                "  round {} {:<26} {:>7.0} req/s{}",
                round + 1,
                t.label,
                r.requests as f64 / r.secs.max(1e-9),
                if r.errors > 0 {
                    format!(", {} errors", r.errors)
                } else {
                    String::new()
                }
            );
        }
    }
    let counts = match (opts.syscall_calls, sends::Strace::find()) {
        (0, _) => None,
        (_, None) => {
            println!("strace not installed, system calls per call skipped");
            None
        }
        (n, Some(strace)) => {
            let upstream_port: u16 = upstream
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse().ok())
                .context("the service's port")?;
            let mut per_call = Vec::with_capacity(targets.len());
            for (i, t) in targets.iter().enumerate() {
                let http = http_client(t.ca_pem.as_deref());
                let base = 9_000_000_000 + i as u64 * 1_000_000;
                one_by_one(t, &http, UNCOUNTED_CALLS, base).await?;
                // CPU time per call one by one, untraced: what the call costs the process,
                // however loaded the machine is (10 ms ticks: 4 × n calls keep it to a few %).
                let cpu0 = tree_cpu(t.pid);
                let timed = one_by_one(t, &http, 4 * n, base + 500_000).await?;
                let cpu_us =
                    tree_cpu(t.pid).saturating_sub(cpu0).as_secs_f64() * 1e6 / timed.max(1) as f64;
                let load = one_by_one(t, &http, n, base + UNCOUNTED_CALLS as u64);
                let counted = strace
                    .count(w, t.pid, upstream_port, load)
                    .await
                    .with_context(|| format!("{}: counting system calls", t.label))?;
                let mut per = counted.per_call();
                per.cpu_us = cpu_us;
                per_call.push(per);
            }
            Some(per_call)
        }
    };
    if !opts.count_only {
        print_report(&targets, &tallies, counts.as_deref(), opts, &generator);
    }
    if let Some(counts) = &counts {
        print_syscalls(&targets, counts, opts.syscall_calls);
    }
    if variants.len() > 1 && !opts.count_only {
        print_ab(&variants, &targets, &tallies, counts.as_deref());
    }
    drop(nginx);
    Ok(opts.count_only || tallies.iter().all(|t| t.errors == 0 && t.requests > 0))
}

fn print_report(
    targets: &[Target],
    tallies: &[Tally],
    sends: Option<&[sends::PerCall]>,
    opts: &Options,
    generator: &Generator,
) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let find = |kind: Kind| {
        targets
            .iter()
            .position(|t| t.kind == kind)
            .map(|i| &tallies[i])
    };
    let direct = find(Kind::Direct);
    let nginx = |tls| find(Kind::Nginx { tls });
    println!();
    println!(
        "MCP tools/call whoami on one initialized session per target · load: {} · {} \
         connections · {} interleaved rounds of {} s · loopback · {cpus} CPUs shared by load \
         generator, proxy and service",
        generator.name(),
        opts.connections,
        opts.rounds,
        opts.secs
    );
    if nginx(false).is_some() {
        println!(
            "nginx: {} workers, TLS with the gateway's certificate, bearer check by map, keepalive \
         upstream pool, proxy_buffering off, access log on · pforte: threads = {}, access log \
         (request line) on, audit log off, limits off and policy on unless the row says otherwise",
            opts.nginx_workers.unwrap_or(opts.threads).max(1),
            opts.threads
        );
    }
    println!();
    println!(
        "{:<26} {:>8} {:>6} {:>8} {:>7} {:>7} {:>8} {:>6} {:>6}   {:>9} {:>9} {:>9} {:>9} {:>9}",
        "target",
        "requests",
        "errors",
        "req/s",
        "p50 ms",
        "p99 ms",
        "cpu µs",
        "sends",
        "reads",
        "rate÷dir",
        "rate÷ngx",
        "p50÷ngx",
        "p99÷ngx",
        "cpu÷ngx"
    );
    println!("{}", "-".repeat(143));
    for (i, (t, tally)) in targets.iter().zip(tallies).enumerate() {
        let against = match t.kind {
            Kind::Direct => None,
            Kind::Nginx { tls } | Kind::Pforte { tls } => nginx(tls),
        };
        println!(
            "{:<26} {:>8} {:>6} {:>8.0} {:>7.2} {:>7.2} {:>8.0} {:>6} {:>6}   {:>9} {:>9} {:>9} {:>9} {:>9}",
            t.label,
            tally.requests,
            tally.errors,
            tally.rate(),
            tally.pct_ms(50.0),
            tally.pct_ms(99.0),
            tally.cpu_us_per_request(),
            sends.map_or("-".to_owned(), |s| format!("{:.2}", s[i].sends)),
            sends.map_or("-".to_owned(), |s| format!("{:.2}", s[i].reads)),
            ratio(tally.rate(), direct.map(Tally::rate)),
            ratio(tally.rate(), against.map(Tally::rate)),
            ratio(tally.pct_ms(50.0), against.map(|a| a.pct_ms(50.0))),
            ratio(tally.pct_ms(99.0), against.map(|a| a.pct_ms(99.0))),
            ratio(
                tally.cpu_us_per_request(),
                against.map(Tally::cpu_us_per_request)
            ),
        );
    }
    println!();
    println!(
        "cpu µs: CPU time of the target's process per request (the service when direct, nginx's \
         master and workers, the gateway), from /proc in 10 ms ticks; sends / reads: write- / \
         read-family system calls on sockets per request (reads that find nothing included), \
         counted under strace apart from the measured rounds (below); ÷ngx: against nginx in \
         the same TLS mode"
    );
    let by_label = |l: &str| {
        targets
            .iter()
            .position(|t| t.label == l)
            .map(|i| &tallies[i])
    };
    let mut checks: Vec<(String, Option<f64>, f64, bool)> = Vec::new();
    for (label, tls) in [
        ("pforte http + token", false),
        ("pforte https + token", true),
    ] {
        let (Some(p), Some(n)) = (by_label(label), nginx(tls)) else {
            continue;
        };
        checks.push((
            format!("{label}: req/s ÷ nginx"),
            Some(p.rate() / n.rate()),
            0.85,
            true,
        ));
        checks.push((
            format!("{label}: cpu µs ÷ nginx"),
            Some(p.cpu_us_per_request() / n.cpu_us_per_request()),
            1.5,
            false,
        ));
        checks.push((
            format!("{label}: p99 ÷ nginx"),
            Some(p.pct_ms(99.0) / n.pct_ms(99.0)),
            1.3,
            false,
        ));
    }
    if let (Some(on), Some(off)) = (
        by_label("pforte https, limits on"),
        by_label("pforte https + token"),
    ) {
        checks.push((
            "limits on ÷ off (https)".into(),
            Some(on.rate() / off.rate()),
            0.95,
            true,
        ));
    }
    if let (Some(o), Some(s)) = (
        by_label("pforte https + OAuth"),
        by_label("pforte https + token"),
    ) {
        checks.push((
            "OAuth ÷ static token (https)".into(),
            Some(o.rate() / s.rate()),
            0.95,
            true,
        ));
    }
    println!();
    // Against nginx: the third pass's (issue 39); limits and OAuth: the first pass's (issue 12).
    println!("targets:");
    for (name, value, bound, at_least) in checks {
        let Some(v) = value.filter(|v| v.is_finite()) else {
            continue;
        };
        let met = if at_least { v >= bound } else { v <= bound };
        println!(
            "  {:<40} {v:>5.2}  ({} {bound:.2})  {}",
            name,
            if at_least { "≥" } else { "≤" },
            if met { "met" } else { "NOT met" }
        );
    }
    println!();
}

/// The system calls per call of every target, counted one call at a time.
fn print_syscalls(targets: &[Target], counts: &[sends::PerCall], calls: usize) {
    println!(
        "system calls per call (strace -f -yy on the target's process and its children, {calls} \
         calls one after another on one kept-alive connection, after {UNCOUNTED_CALLS} \
         uncounted): sends / reads are the write- / read-family calls on sockets (empty: reads \
         that found nothing), to the client and to the upstream; all is every system call; cpu µs: \
         the process's CPU time per call over {} calls one by one before, untraced",
        4 * calls
    );
    println!(
        "{:<26} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7}   by name (at least 0.05 a call)",
        "target", "sends", "client", "up", "reads", "client", "up", "empty", "all", "cpu µs"
    );
    for (t, c) in targets.iter().zip(counts) {
        let names: Vec<String> = c
            .by_name
            .iter()
            .filter(|(_, n)| *n >= 0.05)
            .map(|(name, n)| format!("{name} {n:.2}"))
            .collect();
        println!(
            "{:<26} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>7.1}   {}",
            t.label,
            c.sends,
            c.sends - c.upstream_sends,
            c.upstream_sends,
            c.reads,
            c.reads - c.upstream_reads,
            c.upstream_reads,
            c.empty_reads,
            c.all,
            c.cpu_us,
            names.join(", ")
        );
    }
    println!();
}

/// `n` calls one after another on `http` (one kept-alive connection: each waits for the one
/// before), JSON-RPC ids from `first_id`; how many were made.
async fn one_by_one(
    t: &Target,
    http: &reqwest::Client,
    n: usize,
    first_id: u64,
) -> anyhow::Result<u64> {
    let headers = request_headers(t);
    for k in 0..n as u64 {
        let body = CALL.replacen("\"id\":2", &format!("\"id\":{}", first_id + k), 1);
        let mut req = http.post(&t.url).body(body);
        for (name, value) in &headers {
            req = req.header(*name, value);
        }
        let resp = req.send().await?;
        let status = resp.status();
        let body = resp.bytes().await?;
        if !status.is_success() {
            bail!(
                "{}: a counted call answered {status}: {}",
                t.label,
                String::from_utf8_lossy(&body)
            );
        }
    }
    Ok(n as u64)
}

/// The A/B summary: B's figures over A's, per TLS mode.
fn print_ab(
    variants: &[Variant],
    targets: &[Target],
    tallies: &[Tally],
    sends: Option<&[sends::PerCall]>,
) {
    println!("A/B (B ÷ A; req/s above 1 and the others below 1 favour B):");
    for v in variants {
        println!("  {}", v.describe());
    }
    let find = |label: String| targets.iter().position(|t| t.label == label);
    println!(
        "  {:<6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "", "req/s", "p50", "p99", "cpu µs", "sends", "reads"
    );
    for mode in ["http", "https"] {
        let (Some(a), Some(b)) = (
            find(format!("A {mode} + token")),
            find(format!("B {mode} + token")),
        ) else {
            continue;
        };
        let (ta, tb) = (&tallies[a], &tallies[b]);
        println!(
            "  {:<6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            mode,
            ratio(tb.rate(), Some(ta.rate())),
            ratio(tb.pct_ms(50.0), Some(ta.pct_ms(50.0))),
            ratio(tb.pct_ms(99.0), Some(ta.pct_ms(99.0))),
            ratio(tb.cpu_us_per_request(), Some(ta.cpu_us_per_request())),
            sends.map_or("-".to_owned(), |s| ratio(s[b].sends, Some(s[a].sends))),
            sends.map_or("-".to_owned(), |s| ratio(s[b].reads, Some(s[a].reads))),
        );
    }
    println!();
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn percentiles_pool_the_rounds_by_their_request_counts() {
        let tally = Tally {
            quantiles: vec![
                (3000, (1..=999).map(|_| 1000.0).collect()),
                (1000, (1..=999).map(|_| 5000.0).collect()),
            ],
            ..Tally::default()
        };
        assert_eq!(tally.pct_ms(50.0), 1.0);
        assert_eq!(tally.pct_ms(74.0), 1.0);
        assert_eq!(tally.pct_ms(76.0), 5.0);
        assert!(Tally::default().pct_ms(50.0).is_nan());
    }

    #[test]
    fn the_answer_is_read_from_json_or_from_an_sse_event() {
        let json = r#"{"jsonrpc":"2.0","id":2,"result":{}}"#;
        assert_eq!(rpc_message(json).unwrap()["id"], 2);
        let sse = "data: \nid: 0/1\nretry: 3000\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n\n";
        assert_eq!(rpc_message(sse).unwrap()["id"], 2);
        assert!(rpc_message("data: \n\n").is_none());
    }

    #[test]
    fn the_wrk_script_numbers_every_request() {
        let t = Target {
            label: "t".into(),
            kind: Kind::Direct,
            url: "http://127.0.0.1:1/mcp".into(),
            ca_pem: None,
            token: "pft_x".into(),
            subject: None,
            pid: 0,
            session: "s-1".into(),
        };
        let script = wrk_script(&t);
        assert!(script.contains("function request()"), "{script}");
        assert!(script.contains("\"id\\\":\" .. string.format"), "{script}");
        assert!(script.contains("Bearer pft_x"), "{script}");
        assert!(script.contains("\"Mcp-Session-Id\"] = \"s-1\""), "{script}");
    }
}
