//! `mcp-service pull-doc URL DOCUMENT FILE [--git-commit] [--with-history]`: an MCP client
//! that mirrors a server document into a file of a git worktree. The token comes from the
//! environment (`PFORTE_TOKEN`), never from an argument.
//!
//! With `--git-commit` it commits FILE only when its content changed: the subject names the
//! version and who changed it, the body lists the versions since the last mirror commit
//! (`v7 alice`, `v8 Claude Code · alice`), and the trailers are one `Werkbaum-Changed-By:` per
//! participant plus `Werkbaum-Version:` and `Werkbaum-Document:`. The next run reads the last
//! mirrored version from that trailer. With `--with-history` every version since then becomes
//! its own commit, its text rebuilt from the history's line operations by the core
//! (`applyOps`) and verified against the version's checksum.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use rmcp::{
    ServiceExt as _,
    model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};

use crate::engine::{Engine, EngineConfig};
use crate::tools::checksum;

/// The env variable holding the bearer token.
pub(crate) const TOKEN_ENV: &str = "PFORTE_TOKEN";
/// The trailer keys.
pub(crate) const TRAILER_VERSION: &str = "Werkbaum-Version";
pub(crate) const TRAILER_CHANGED_BY: &str = "Werkbaum-Changed-By";
pub(crate) const TRAILER_DOCUMENT: &str = "Werkbaum-Document";

/// Arguments of `mcp-service pull-doc`.
#[derive(Debug, clap::Args)]
pub struct PullDocArgs {
    /// The MCP URL (through the gateway: https://host/mcp).
    pub url: String,
    /// The document uuid.
    pub document: String,
    /// The file to write (inside a git worktree with --git-commit).
    pub file: PathBuf,
    /// Commit FILE when it changed.
    #[arg(long)]
    pub git_commit: bool,
    /// One commit per version since the last mirror commit (implies --git-commit).
    #[arg(long)]
    pub with_history: bool,
    /// Trust only this CA certificate (PEM), e.g. the gateway's self-signed one.
    #[arg(long, value_name = "PEM", env = "PFORTE_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
}

/// Why a mirror run failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PullError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot reach {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("the server answered {tool} with an error: {message}")]
    Tool { tool: &'static str, message: String },
    #[error("unexpected answer from {0}")]
    Answer(&'static str),
    #[error("{0}")]
    Io(String),
    #[error("git {args}: {message}")]
    Git { args: String, message: String },
}

/// One version in the history answer.
#[derive(Debug, Clone)]
struct Version {
    version: u64,
    author: String,
    subject: String,
    checksum: String,
    ops: Value,
}

/// Runs a mirror; prints what it did.
pub async fn run(args: PullDocArgs) -> ExitCode {
    match pull(args).await {
        Ok(msg) => {
            println!("{msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mcp-service pull-doc: {e}");
            ExitCode::from(match e {
                PullError::Usage(_) => 64,
                _ => 1,
            })
        }
    }
}

async fn pull(args: PullDocArgs) -> Result<String, PullError> {
    let git_commit = args.git_commit || args.with_history;
    let client = connect(&args).await?;
    let read = call(&client, "werkbaum_read", json!({"document": args.document})).await?;
    let text = read["text"]
        .as_str()
        .ok_or(PullError::Answer("werkbaum_read"))?;
    let version = read["revision"]["version"]
        .as_u64()
        .ok_or(PullError::Answer("werkbaum_read"))?;
    let title = read["title"].as_str().unwrap_or("plan").to_owned();
    let current = match std::fs::read(&args.file) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(PullError::Io(format!(
                "reading {}: {e}",
                args.file.display()
            )));
        }
    };
    let unchanged = current.as_deref() == Some(text.as_bytes());
    if !git_commit {
        if unchanged {
            return Ok(format!(
                "{} is up to date (v{version})",
                args.file.display()
            ));
        }
        write_file(&args.file, text)?;
        return Ok(format!("wrote v{version} to {}", args.file.display()));
    }
    let repo = Repo::of(&args.file)?;
    let last = repo.last_mirrored_version(&args.file)?;
    if unchanged {
        return Ok(format!(
            "{} is up to date (v{version}); nothing to commit",
            args.file.display()
        ));
    }
    let history = call(
        &client,
        "werkbaum_history",
        json!({"document": args.document, "since": last.unwrap_or(0).saturating_sub(1)}),
    )
    .await?;
    let _ = client.cancel().await;
    let mut versions = parse_history(&history)?;
    let base_entry = match last {
        Some(l) => versions
            .iter()
            .position(|v| v.version == l)
            .map(|i| versions.remove(i)),
        None => None,
    };
    versions.retain(|v| v.version <= version);
    if args.with_history {
        let start = match (&current, &base_entry) {
            (Some(bytes), Some(b)) if checksum_bytes(bytes) == b.checksum => {
                String::from_utf8(bytes.clone()).ok()
            }
            (None, None) => Some(String::new()),
            _ => None,
        };
        if let Some(start) = start
            && let Some(texts) = replay(&start, &versions).await
            && texts.last().map(String::as_str) == Some(text)
        {
            for (v, t) in versions.iter().zip(&texts) {
                write_file(&args.file, t)?;
                repo.commit(
                    &args.file,
                    &message(&title, &args.document, v.version, std::slice::from_ref(v)),
                )?;
            }
            return Ok(format!(
                "committed {} version(s) of \"{title}\" up to v{version}",
                versions.len()
            ));
        }
        eprintln!(
            "mcp-service pull-doc: the file is not the last mirrored version; committing v{version} as one commit"
        );
    }
    write_file(&args.file, text)?;
    repo.commit(
        &args.file,
        &message(&title, &args.document, version, &versions),
    )?;
    Ok(format!(
        "committed v{version} of \"{title}\" to {}",
        args.file.display()
    ))
}

fn checksum_bytes(bytes: &[u8]) -> String {
    std::str::from_utf8(bytes).map(checksum).unwrap_or_default()
}

/// Rebuilds each version's text from `start` with the core's `applyOps`; `None` when an op
/// fails or a checksum does not match.
async fn replay(start: &str, versions: &[Version]) -> Option<Vec<String>> {
    let engine = Engine::new(EngineConfig {
        pool_size: 1,
        ..EngineConfig::default()
    })
    .ok()?;
    let mut text = start.to_owned();
    let mut out = Vec::with_capacity(versions.len());
    for v in versions {
        let r = engine
            .call("applyOps", json!({"text": text, "ops": v.ops}))
            .await
            .ok()?;
        text = r["text"].as_str()?.to_owned();
        if checksum(&text) != v.checksum {
            return None;
        }
        out.push(text.clone());
    }
    Some(out)
}

/// The commit message: subject, body (one line per version), trailers.
fn message(title: &str, document: &str, version: u64, versions: &[Version]) -> String {
    let by = versions
        .last()
        .map_or("unknown".to_owned(), |v| v.author.clone());
    let mut msg = format!("werkbaum: {title} v{version} by {by}\n\n");
    for v in versions {
        msg.push_str(&format!("v{} {} — {}\n", v.version, v.author, v.subject));
    }
    if !versions.is_empty() {
        msg.push('\n');
    }
    let mut seen: Vec<&str> = Vec::new();
    for v in versions {
        if !seen.contains(&v.author.as_str()) {
            seen.push(&v.author);
            msg.push_str(&format!("{TRAILER_CHANGED_BY}: {}\n", v.author));
        }
    }
    msg.push_str(&format!("{TRAILER_DOCUMENT}: {document}\n"));
    msg.push_str(&format!("{TRAILER_VERSION}: {version}\n"));
    msg
}

fn parse_history(v: &Value) -> Result<Vec<Version>, PullError> {
    let entries = v["entries"]
        .as_array()
        .ok_or(PullError::Answer("werkbaum_history"))?;
    entries
        .iter()
        .map(|e| {
            Ok(Version {
                version: e["version"]
                    .as_u64()
                    .ok_or(PullError::Answer("werkbaum_history"))?,
                author: e["author"].as_str().unwrap_or("unknown").to_owned(),
                subject: e["subject"].as_str().unwrap_or("").to_owned(),
                checksum: e["checksum"].as_str().unwrap_or("").to_owned(),
                ops: e["ops"].clone(),
            })
        })
        .collect()
}

fn write_file(path: &Path, text: &str) -> Result<(), PullError> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| PullError::Usage(format!("{} is not a file path", path.display())))?;
    let tmp = dir.join(format!(".{}.pull-doc.tmp", name.to_string_lossy()));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| PullError::Io(format!("writing {}: {e}", path.display())))
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>;

async fn connect(args: &PullDocArgs) -> Result<Client, PullError> {
    let connect_err = |reason: String| PullError::Connect {
        url: args.url.clone(),
        reason,
    };
    let mut builder = reqwest::Client::builder().timeout(std::time::Duration::from_secs(60));
    if let Some(ca) = &args.ca_cert {
        let pem = std::fs::read(ca)
            .map_err(|e| PullError::Usage(format!("cannot read {}: {e}", ca.display())))?;
        let cert = reqwest::Certificate::from_pem(&pem)
            .map_err(|e| PullError::Usage(format!("{}: {e}", ca.display())))?;
        builder = builder.tls_certs_only([cert]);
    }
    let http = builder.build().map_err(|e| connect_err(e.to_string()))?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(args.url.clone());
    if let Some(token) = std::env::var(TOKEN_ENV)
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        config = config.auth_header(token.trim().to_owned());
    }
    let transport = StreamableHttpClientTransport::with_client(http, config);
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("mcp-service pull-doc", env!("CARGO_PKG_VERSION")),
    );
    info.serve(transport)
        .await
        .map_err(|e| connect_err(e.to_string()))
}

async fn call(client: &Client, tool: &'static str, args: Value) -> Result<Value, PullError> {
    let arguments = args.as_object().cloned().unwrap_or_default();
    let r = client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
        .await
        .map_err(|e| PullError::Tool {
            tool,
            message: e.to_string(),
        })?;
    let structured = r.structured_content.unwrap_or(Value::Null);
    if r.is_error == Some(true) {
        return Err(PullError::Tool {
            tool,
            message: structured["error"]["message"]
                .as_str()
                .unwrap_or("unknown error")
                .to_owned(),
        });
    }
    Ok(structured)
}

/// The git worktree holding the mirrored file.
struct Repo {
    root: PathBuf,
}

impl Repo {
    fn git(&self, args: &[&str], stdin: Option<&str>) -> Result<String, PullError> {
        git_in(&self.root, args, stdin)
    }

    fn of(file: &Path) -> Result<Self, PullError> {
        let dir = file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let root = git_in(dir, &["rev-parse", "--show-toplevel"], None).map_err(|_| {
            PullError::Usage(format!("{} is not inside a git worktree", dir.display()))
        })?;
        Ok(Self {
            root: PathBuf::from(root.trim()),
        })
    }

    fn rel(&self, file: &Path) -> Result<String, PullError> {
        let abs = std::path::absolute(file).map_err(|e| PullError::Io(e.to_string()))?;
        let root = std::fs::canonicalize(&self.root).map_err(|e| PullError::Io(e.to_string()))?;
        let dir = abs
            .parent()
            .map(std::fs::canonicalize)
            .transpose()
            .map_err(|e| PullError::Io(e.to_string()))?;
        let name = abs
            .file_name()
            .ok_or_else(|| PullError::Usage("no file name".into()))?;
        let full = dir.unwrap_or_default().join(name);
        full.strip_prefix(&root)
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|_| PullError::Usage(format!("{} is outside the worktree", file.display())))
    }

    /// The `Werkbaum-Version` trailer of the last commit touching `file`, if any.
    fn last_mirrored_version(&self, file: &Path) -> Result<Option<u64>, PullError> {
        let rel = self.rel(file)?;
        let has_head = self
            .git(&["rev-parse", "--verify", "-q", "HEAD"], None)
            .is_ok();
        if !has_head {
            return Ok(None);
        }
        let format = format!("--format=%(trailers:key={TRAILER_VERSION},valueonly,separator=%x2C)");
        let out = self.git(&["log", &format, "--", &rel], None)?;
        Ok(out
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .and_then(|l| l.split(',').next_back())
            .and_then(|v| v.trim().parse().ok()))
    }

    fn commit(&self, file: &Path, message: &str) -> Result<(), PullError> {
        let rel = self.rel(file)?;
        self.git(&["add", "--", &rel], None)?;
        self.git(
            &["commit", "-q", "--no-verify", "-F", "-", "--", &rel],
            Some(message),
        )?;
        Ok(())
    }
}

fn git_in(dir: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, PullError> {
    let err = |message: String| PullError::Git {
        args: args.join(" "),
        message,
    };
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("cannot run git: {e}")))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use std::io::Write as _;
        pipe.write_all(input.as_bytes())
            .map_err(|e| err(e.to_string()))?;
    }
    let out = child.wait_with_output().map_err(|e| err(e.to_string()))?;
    if !out.status.success() {
        return Err(err(String::from_utf8_lossy(&out.stderr).trim().to_owned()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_has_subject_body_and_one_trailer_per_participant() {
        let v = |n: u64, a: &str| Version {
            version: n,
            author: a.to_owned(),
            subject: format!("edit {n}"),
            checksum: String::new(),
            ops: Value::Null,
        };
        let m = message(
            "Plan",
            "u-1",
            9,
            &[v(7, "alice"), v(8, "Claude Code · alice"), v(9, "alice")],
        );
        let mut lines = m.lines();
        assert_eq!(lines.next(), Some("werkbaum: Plan v9 by alice"));
        assert!(m.contains("v8 Claude Code · alice — edit 8\n"));
        assert_eq!(m.matches("Werkbaum-Changed-By: alice\n").count(), 1);
        assert!(m.ends_with("Werkbaum-Document: u-1\nWerkbaum-Version: 9\n"));
    }
}
