//! The MCP conformance runner (`@modelcontextprotocol/conformance`, server mode) as the tests
//! run it: its active server suite against one URL, every check of every scenario collected.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

use crate::{conformance_2026_packages, conformance_packages, conformance_script, in_ci, node22};

/// Node 22 and the npm packages, or why the test cannot run (a skip outside CI, a failure in it).
pub fn tools() -> Option<(PathBuf, PathBuf)> {
    match node22().and_then(|node| Ok((node, conformance_packages()?))) {
        Ok(t) => Some(t),
        Err(why) if !in_ci() => {
            crate::skip(&why);
            None
        }
        Err(why) => panic!("{why}"),
    }
}

/// Node 22 and the 2026-07-28 runner's package directory, or why not (as [`tools`]).
pub fn tools_2026() -> Option<(PathBuf, PathBuf)> {
    match node22().and_then(|node| Ok((node, conformance_2026_packages()?))) {
        Ok(t) => Some(t),
        Err(why) if !in_ci() => {
            crate::skip(&why);
            None
        }
        Err(why) => panic!("{why}"),
    }
}

/// Which wire the 2026-07-28 runner speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Sessions (`initialize`, `Mcp-Session-Id`): the scenarios of 2025-11-25.
    Stateful,
    /// No session: exactly the server scenarios 2026-07-28 requires, at the 2026-07-28 wire
    /// (each request carries its version, client info and capabilities), plus the extension
    /// and pending ones it reports unscored.
    Stateless,
}

impl Wire {
    fn select(self) -> &'static [&'static str] {
        match self {
            Wire::Stateful => &["--spec-version", "2025-11-25"],
            Wire::Stateless => &["--requirements", "2026-07-28"],
        }
    }
}

/// Runs the 2026-07-28 runner (`packages` from [`tools_2026`]) on `wire` against `url`, with
/// `token` as bearer when given; every check of every scenario, and the runner's output.
pub fn run_wire(
    node: &Path,
    packages: &Path,
    url: &str,
    token: Option<&str>,
    wire: Wire,
) -> (Results, String) {
    run(node, packages, url, token, wire.select())
}

/// What the authorization-server scenarios run against.
pub struct AuthorizationTarget<'a> {
    /// The authorization server's issuer.
    pub issuer: &'a str,
    /// A client registered with the callback `http://127.0.0.1:PORT/callback`; the runner
    /// authenticates as a public client unless given the secret.
    pub client_id: &'a str,
    pub client_secret: Option<&'a str>,
    /// The MCP server the token is for (RFC 8707).
    pub resource: &'a str,
    pub port: u16,
    /// The PEM file the issuer's certificate chains to.
    pub ca: Option<&'a Path>,
}

/// The 2026-07-28 runner's authorization-server scenarios against `target`. The runner prints the
/// authorization URL and waits for its callback: `authorize` is given that URL and completes
/// the person's part (sign-in, consent) up to the callback. Every check, and the output.
pub async fn run_authorization<F, Fut>(
    node: &Path,
    packages: &Path,
    target: &AuthorizationTarget<'_>,
    authorize: F,
) -> (Results, String)
where
    F: FnOnce(url::Url) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let out = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(node);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    if let Some(ca) = target.ca {
        cmd.env("NODE_EXTRA_CA_CERTS", ca);
    }
    let secret = target.client_secret.map(|s| ["--client-secret", s]);
    cmd.arg(packages.join("conformance/dist/index.js"))
        .args(["authorization", "--url", target.issuer])
        .args(["--client-id", target.client_id])
        .args(secret.into_iter().flatten())
        .args(["--resource", target.resource])
        .args(["--port", &target.port.to_string(), "--output-dir"])
        .arg(out.path());
    let mut proc = crate::Proc::spawn(cmd).unwrap();
    let limit = std::time::Duration::from_secs(60);
    let mut output = Vec::new();
    let url = loop {
        let line = proc
            .stdout_lines
            .recv_timeout(limit)
            .unwrap_or_else(|e| panic!("no authorization URL: {e}\n{}", output.join("\n")));
        output.push(line.clone());
        if let Ok(url) = url::Url::parse(line.trim())
            && url
                .query_pairs()
                .any(|(k, v)| k == "response_type" && v == "code")
        {
            break url;
        }
    };
    authorize(url).await;
    let deadline = std::time::Instant::now() + limit;
    while proc.child.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the runner did not finish"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    output.extend(proc.stdout_lines.try_iter());
    (collect(out.path()), output.join("\n"))
}

/// `(scenario, check id)` → status (`SUCCESS`, `FAILURE`, `WARNING`, …) and error message.
pub type Results = BTreeMap<(String, String), (String, String)>;

/// Runs the runner's active server suite against `url`, with `token` as bearer when given;
/// returns every check of every scenario.
pub fn run_suite(node: &Path, packages: &Path, url: &str, token: Option<&str>) -> Results {
    let (results, output) = run(node, packages, url, token, &["--suite", "active"]);
    assert!(
        results.len() > 20,
        "the runner produced only {} checks:\n{output}",
        results.len()
    );
    results
}

/// Runs one of the runner's server scenarios against `url` (no bearer of the runner's own);
/// returns its checks and, for a failure's message, what the runner printed.
pub fn run_scenario(node: &Path, packages: &Path, url: &str, scenario: &str) -> (Results, String) {
    run(node, packages, url, None, &["--scenario", scenario])
}

/// Runs the runner in server mode against `url` with `select` (`--suite …` or `--scenario …`);
/// every check of every scenario it ran, and its output.
fn run(
    node: &Path,
    packages: &Path,
    url: &str,
    token: Option<&str>,
    select: &[&str],
) -> (Results, String) {
    let out = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(node);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    if let Some(token) = token {
        cmd.env("PFORTE_CONFORMANCE_TOKEN", token)
            .env("PFORTE_CONFORMANCE_URL", url)
            .arg("--import")
            .arg(conformance_script("bearer.mjs"));
    }
    let run = cmd
        .arg(packages.join("conformance/dist/index.js"))
        .arg("server")
        .args(select)
        .args(["--url", url, "--output-dir"])
        .arg(out.path())
        .output()
        .unwrap();
    // The exit code says whether every check passed; the checks themselves are compared below.
    let stdout = String::from_utf8_lossy(&run.stdout);
    let summary = stdout
        .split_once("=== SUMMARY ===")
        .map_or(stdout.as_ref(), |(_, s)| s);
    if select.first() == Some(&"--suite") {
        eprintln!("conformance against {url}:{summary}");
    }
    let results = collect(out.path());
    let output = format!("{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    (results, output)
}

/// Every check of every scenario the runner wrote under `out` (`<kind>-<scenario>-<time>/
/// checks.json`), `INFO` lines left out.
fn collect(out: &Path) -> Results {
    let mut results = Results::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let entry = entry.unwrap();
        let dir = entry.file_name().into_string().unwrap();
        // server-<scenario>- or authorization-server-<scenario>-<timestamp, 24 characters like 2026-12-01T21-10-07-437Z>
        let scenario = dir
            .strip_prefix("authorization-server-")
            .or_else(|| dir.strip_prefix("server-"))
            .and_then(|d| d.get(..d.len().checked_sub(25)?))
            .unwrap_or_else(|| panic!("unexpected result dir {dir}"))
            .to_owned();
        let Ok(checks) = std::fs::read_to_string(entry.path().join("checks.json")) else {
            // The runner gave up on the scenario (its timeout) before writing its checks.
            let files: Vec<_> = std::fs::read_dir(entry.path())
                .into_iter()
                .flatten()
                .flatten()
                .map(|f| f.file_name().to_string_lossy().into_owned())
                .collect();
            results.insert(
                (scenario, "(no checks.json)".to_owned()),
                (
                    "FAILURE".to_owned(),
                    format!("the scenario ended without its checks (files: {files:?})"),
                ),
            );
            continue;
        };
        let checks: Value = serde_json::from_str(&checks).unwrap();
        for check in checks.as_array().unwrap() {
            let id = check["id"].as_str().unwrap().to_owned();
            let status = check["status"].as_str().unwrap().to_owned();
            if status == "INFO" {
                continue; // a log line of the runner's, not a verdict
            }
            let error = check["errorMessage"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            results.insert((scenario.clone(), id), (status, error));
        }
    }
    results
}
