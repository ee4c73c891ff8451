//! `werkbaum-bench`: tools/call latency through the gateway (TLS, static token) for
//! `werkbaum_read`, `werkbaum_inspect` (werkbaum.werkbaum) and `werkbaum_set_status` (document
//! form), and writes per second on one document (sequential, and concurrent writers with
//! compare-and-set conflicts).
//!
//! Run: `cargo build --release --workspace --bins && cargo run --release -p pforte-bench --bin
//! werkbaum-bench [-- --iterations N]`. Needs the shared fixtures (../shared/fixtures/werkbaum).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use pforte_tests::{Proc, TestCert, eventually, free_port, http_client, rmcp_client};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

type Client = rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig>;

fn bin(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("current exe")?;
    let p = exe.parent().context("bin dir")?.join(name);
    if !p.exists() {
        bail!(
            "{} is missing: cargo build --release --workspace --bins",
            p.display()
        );
    }
    Ok(p)
}

async fn call(c: &Client, tool: &str, args: Value) -> anyhow::Result<Value> {
    let r = c
        .call_tool(
            CallToolRequestParams::new(tool.to_owned())
                .with_arguments(args.as_object().cloned().unwrap_or_default()),
        )
        .await?;
    let data = r.structured_content.unwrap_or(Value::Null);
    if r.is_error == Some(true) {
        bail!("{tool}: {}", data["error"]);
    }
    Ok(data)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let total: Duration = samples.iter().sum();
    println!(
        "{name:<34} n={:<5} p50 {:>7.2} ms  p99 {:>7.2} ms  mean {:>7.2} ms",
        samples.len(),
        percentile(&samples, 0.5).as_secs_f64() * 1e3,
        percentile(&samples, 0.99).as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e3 / samples.len().max(1) as f64
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let iterations: usize = std::env::args()
        .skip_while(|a| a != "--iterations")
        .nth(1)
        .map(|v| v.parse())
        .transpose()?
        .unwrap_or(300);
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/werkbaum/werkbaum.werkbaum");
    let plan = std::fs::read_to_string(&fixture)
        .with_context(|| format!("reading {}", fixture.display()))?;
    let work = tempfile::tempdir()?;

    // mcp-service on its own data dir.
    let mut cmd = Command::new(bin("mcp-service")?);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(work.path().join("svc"));
    let mut svc = Proc::spawn(cmd)?;
    let line = svc.wait_line("listening on", Duration::from_secs(30))?;
    let svc_url = line.rsplit(' ').next().context("url")?.to_owned();

    // The gateway: TLS, static token, rate limits off (this measures the Werkbaum path).
    let cert = TestCert::create(work.path())?;
    let port = free_port();
    let data = work.path().join("gw");
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\ndata_dir = {:?}\nthreads = 2\n[tls]\ncert = {:?}\nkey = {:?}\n[upstream]\nurl = {svc_url:?}\n[limits]\nenabled = false\n",
        data.display().to_string(),
        cert.cert.display().to_string(),
        cert.key.display().to_string(),
    );
    let config_path = work.path().join("pforte.toml");
    std::fs::write(&config_path, config)?;
    let mut cmd = Command::new(bin("pforte")?);
    cmd.args(["serve", "--init", "--config"]).arg(&config_path);
    let _gw = Proc::spawn(cmd)?;
    let http = http_client(Some(&cert.cert_pem));
    let base = format!("https://127.0.0.1:{port}");
    let health = format!("{base}/healthz");
    let up = eventually(Duration::from_secs(30), || {
        let req = http.get(&health).send();
        async move { req.await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
    if !up {
        bail!("gateway did not become healthy");
    }
    let out = Command::new(bin("pforte")?)
        .args(["token", "create", "bench", "--data-dir"])
        .arg(&data)
        .output()?;
    if !out.status.success() {
        bail!("token create: {}", String::from_utf8_lossy(&out.stderr));
    }
    let token = String::from_utf8(out.stdout)?.trim().to_owned();
    let url = format!("{base}/mcp");
    let ok = eventually(Duration::from_secs(3), || {
        let req = http.get(&url).bearer_auth(&token).send();
        async move { req.await.is_ok_and(|r| r.status() != 401) }
    })
    .await;
    if !ok {
        bail!("token not accepted");
    }
    let c = rmcp_client(&url, http.clone(), &token, &[]).await?;
    let created = call(
        &c,
        "werkbaum_create",
        json!({"title": "bench", "text": plan, "allowWarnings": true, "allowProd": true}),
    )
    .await?;
    let doc = created["document"].as_str().context("uuid")?.to_owned();
    println!(
        "werkbaum-bench: through pforte (TLS, static token) to mcp-service; document werkbaum.werkbaum ({} bytes), {iterations} calls each after 20 warm-up calls",
        plan.len()
    );

    for (name, tool, args) in [
        (
            "werkbaum_read (document)",
            "werkbaum_read",
            json!({"document": doc}),
        ),
        (
            "werkbaum_inspect (document)",
            "werkbaum_inspect",
            json!({"document": doc}),
        ),
        (
            "werkbaum_inspect (text)",
            "werkbaum_inspect",
            json!({"text": plan}),
        ),
    ] {
        for _ in 0..20 {
            call(&c, tool, args.clone()).await?;
        }
        let mut samples = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let t = Instant::now();
            call(&c, tool, args.clone()).await?;
            samples.push(t.elapsed());
        }
        report(name, samples);
    }

    // set_status in document form, sequential: every call is a new version.
    let mut base_rev = json!({"version": created["version"], "checksum": created["checksum"]});
    let mut samples = Vec::with_capacity(iterations);
    let started = Instant::now();
    for i in 0..iterations + 20 {
        let status = if i.is_multiple_of(2) { "~" } else { " " };
        let t = Instant::now();
        let r = call(
            &c,
            "werkbaum_set_status",
            json!({"document": doc, "base": base_rev, "id": 5, "status": status}),
        )
        .await?;
        if i >= 20 {
            samples.push(t.elapsed());
        }
        base_rev = json!({"version": r["version"], "checksum": r["checksum"]});
    }
    let seq_rate = (iterations + 20) as f64 / started.elapsed().as_secs_f64();
    report("werkbaum_set_status (document)", samples);
    println!("writes/s on one document, 1 writer:  {seq_rate:>8.1}");

    // Concurrent writers on one document: read, write with that base, retry on conflict.
    let writers = 8;
    let window = Duration::from_secs(5);
    let mut clients = Vec::new();
    for _ in 0..writers {
        clients.push(Arc::new(
            rmcp_client(&url, http.clone(), &token, &[]).await?,
        ));
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (w, client) in clients.into_iter().enumerate() {
        let doc = doc.clone();
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut conflicts) = (0u64, 0u64);
            let mut i = 0u64;
            while started.elapsed() < window {
                let read = call(&client, "werkbaum_read", json!({"document": doc})).await?;
                let base = json!({"version": read["revision"]["version"], "checksum": read["revision"]["checksum"]});
                i += 1;
                let r = client
                    .call_tool(CallToolRequestParams::new("werkbaum_set_size").with_arguments(
                        json!({"document": doc, "base": base, "id": 6 + w, "size": if i.is_multiple_of(2) { "S" } else { "M" }})
                            .as_object()
                            .cloned()
                            .unwrap_or_default(),
                    ))
                    .await?;
                if r.is_error == Some(true) {
                    conflicts += 1;
                } else {
                    ok += 1;
                }
            }
            anyhow::Ok((ok, conflicts))
        }));
    }
    let (mut ok, mut conflicts) = (0, 0);
    for t in tasks {
        let (o, c) = t.await??;
        ok += o;
        conflicts += c;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "writes/s on one document, {writers} writers: {:>8.1}  ({ok} written, {conflicts} conflicts refused, {:.1} attempts/s)",
        ok as f64 / secs,
        (ok + conflicts) as f64 / secs
    );
    Ok(())
}
