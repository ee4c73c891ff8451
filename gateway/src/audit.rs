//! The audit log: one JSON object per line for every MCP request that names a tool, resource or
//! prompt, and for every refusal. Never arguments, never tokens.
//!
//! The request path only formats the line and hands it to a writer thread through a bounded
//! channel ([`AuditLog::record`] never blocks: when the channel is full the line is dropped and
//! counted, see [`AuditLog::dropped`]). [`AuditLog::reopen`] (SIGHUP via
//! [`AuditLog::spawn_sighup_reopen`] or [`SighupReopen`]) makes the writer reopen its path, for
//! log rotation by another program; the writer also rotates by size itself ([`Rotation`]:
//! `audit.jsonl` → `audit.jsonl.1` → … → `audit.jsonl.N`, the oldest dropped).
//!
//! The client's text in a line (the method and the tool, prompt or resource name) is cut to
//! [`crate::logging::MAX_NAME_BYTES`] and its control and bidi characters escaped
//! ([`crate::logging::untrusted_name`]): a line's size is bounded whatever the request says.
//!
//! ```json
//! {"time":"2026-12-01T21:08:41.123Z","request_id":"5f0c…","route":"mcp","virtual":null,"member":null,"principal":{"kind":"static","subject":"operator","client":"ci"},"method":"tools/call","name":"werkbaum_write","decision":"denied","reason":"insufficient_scope","rule":null,"upstream_status":null,"duration_ms":0}
//! ```

use std::{
    fs::File,
    io::{BufWriter, Write as _},
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
        mpsc::{self, SyncSender, TrySendError},
    },
    time::Duration,
};

use async_trait::async_trait;
use pingora::{server::ShutdownWatch, services::background::BackgroundService};
use serde::{Serialize, Serializer};

use crate::auth::Principal;

/// Short codes for `reason` on denials.
pub mod reason {
    pub const UNAUTHENTICATED: &str = "unauthenticated";
    pub const INSUFFICIENT_SCOPE: &str = "insufficient_scope";
}

/// Default capacity of the channel to the writer, in lines.
pub(crate) const DEFAULT_CAPACITY: usize = 8192;

/// The outcome recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditDecision {
    Allowed,
    Denied,
}

/// Who made the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AuditPrincipal<'a> {
    /// `static` or `oauth`.
    pub kind: &'a str,
    /// The user (OAuth) or `operator` (static tokens).
    pub subject: &'a str,
    /// The OAuth client id or the static token's name.
    pub client: &'a str,
}

impl<'a> From<&'a Principal> for AuditPrincipal<'a> {
    fn from(p: &'a Principal) -> Self {
        Self {
            kind: p.kind.as_str(),
            subject: &p.subject,
            client: &p.client,
        }
    }
}

/// One audit line. Every key is always present (`null` when it does not apply).
#[derive(Debug, Clone, Serialize)]
pub struct AuditRecord<'a> {
    /// When the request arrived, milliseconds since the Unix epoch; written as RFC 3339 UTC
    /// with milliseconds.
    #[serde(rename = "time", serialize_with = "serialize_time")]
    pub time_ms: u64,
    pub request_id: &'a str,
    /// The route's name (`mcp` for `[upstream]`), or the virtual server's.
    pub route: &'a str,
    /// Through a virtual server: its name, and the member route the request went to.
    #[serde(rename = "virtual")]
    pub virtual_server: Option<&'a str>,
    pub member: Option<&'a str>,
    /// `None` when unauthenticated.
    pub principal: Option<AuditPrincipal<'a>>,
    /// The JSON-RPC method, or the HTTP method for GET / DELETE (bounded and escaped when
    /// written).
    #[serde(serialize_with = "serialize_untrusted")]
    pub method: &'a str,
    /// The tool or prompt name or the resource URI, when the request names one (bounded and
    /// escaped when written).
    #[serde(serialize_with = "serialize_untrusted_opt")]
    pub name: Option<&'a str>,
    pub decision: AuditDecision,
    /// For denials: a code from [`reason`]; `rule`: the `[[policy]]` rule's name.
    pub reason: Option<&'a str>,
    pub rule: Option<&'a str>,
    pub upstream_status: Option<u16>,
    pub duration_ms: u64,
}

/// One audit line for what a person did at the authorization server: a sign-in (with a
/// password or an OpenID provider) or a consent decision. Never a password, token, code or ID
/// token: the authorization server hands over only these fields.
///
/// ```json
/// {"time":"2026-12-03T16:20:01.120Z","event":"sign_in","via":"Corp","user":"ann@example.com","client_id":null,"outcome":"success","reason":null,"scopes":null,"resource":null,"client_ip":"127.0.0.1"}
/// ```
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AccountRecord<'a> {
    #[serde(rename = "time", serialize_with = "serialize_time")]
    pub(crate) time_ms: u64,
    /// `sign_in`, `consent`, `enterprise_grant` or `revoke`.
    pub(crate) event: &'a str,
    /// `password` or the OpenID provider's name.
    #[serde(serialize_with = "serialize_untrusted_opt")]
    pub(crate) via: Option<&'a str>,
    #[serde(serialize_with = "serialize_untrusted_opt")]
    pub(crate) user: Option<&'a str>,
    #[serde(serialize_with = "serialize_untrusted_opt")]
    pub(crate) client_id: Option<&'a str>,
    /// `success` / `refused` (sign-ins), `approved` / `denied` / `refused` (consents).
    pub(crate) outcome: &'a str,
    /// For refusals: a code, then the words shown to the person.
    #[serde(serialize_with = "serialize_untrusted_opt")]
    pub(crate) reason: Option<&'a str>,
    pub(crate) scopes: Option<&'a [String]>,
    #[serde(serialize_with = "serialize_untrusted_opt")]
    pub(crate) resource: Option<&'a str>,
    pub(crate) client_ip: Option<std::net::IpAddr>,
}

/// One audit line per action an admin takes in the operator console (`/admin`): a static token
/// created or revoked, an OAuth grant revoked. Never a token's value.
///
/// ```json
/// {"time":"2026-12-03T18:10:00.000Z","event":"console","action":"token_revoke","admin":"root","target":"ci","outcome":"done","client_ip":"127.0.0.1"}
/// ```
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConsoleRecord<'a> {
    #[serde(rename = "time", serialize_with = "serialize_time")]
    pub(crate) time_ms: u64,
    /// Always `console`.
    pub(crate) event: &'static str,
    /// `token_create`, `token_revoke`, `grant_revoke`, `tool_approve` or `tools_approve_all`.
    pub(crate) action: &'a str,
    /// The admin's user name.
    #[serde(serialize_with = "serialize_untrusted")]
    pub(crate) admin: &'a str,
    /// The token's name, the grant's id, `ROUTE/TOOL` or the route.
    #[serde(serialize_with = "serialize_untrusted")]
    pub(crate) target: &'a str,
    /// `done`, or why not (`not_found`, `name_taken`, `store_error`).
    pub(crate) outcome: &'a str,
    pub(crate) client_ip: Option<std::net::IpAddr>,
}

/// One audit line per session the gateway or a stdio bridge closed to make room for a new
/// one at a person's cap: their least recently used idle session (no call in flight, no open
/// stream). Its next use gets 404 and the client initializes again. The session is named by
/// the first 12 hex digits of its id's SHA-256 (the id itself is not written).
///
/// ```json
/// {"time":"2026-12-05T01:40:00.000Z","event":"session_evicted","route":"files","person":"static:ci","session":"3f2a9c1b0d4e","idle_ms":5120,"limit":"max_children_per_principal","max":4}
/// ```
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SessionRecord<'a> {
    #[serde(rename = "time", serialize_with = "serialize_time")]
    pub(crate) time_ms: u64,
    /// Always `session_evicted`.
    pub(crate) event: &'static str,
    /// The route whose bridge closed it (`None`: the gateway's own session records).
    pub(crate) route: Option<&'a str>,
    /// `auth::person_key`: whom the session counted against.
    #[serde(serialize_with = "serialize_untrusted")]
    pub(crate) person: &'a str,
    pub(crate) session: &'a str,
    pub(crate) idle_ms: Option<u64>,
    /// `limits.sessions_per_principal` or `max_children_per_principal`.
    pub(crate) limit: &'static str,
    pub(crate) max: usize,
}

/// One audit line per task (SEP-2663) an upstream created in answer to a `tools/call`
/// (`task_created`: the task is bound to this principal and route from now on, and
/// `tasks/get|update|cancel` of anyone else get 404), and per `tasks/cancel` of its creator
/// that the upstream answered (`task_cancelled`, with the answer's HTTP `status`; the request's
/// own line carries the task id as `name` too).
///
/// ```json
/// {"time":"2026-12-05T05:50:00.000Z","event":"task_created","request_id":"4bf9…","route":"files","principal":{"kind":"static","subject":"operator","client":"ci"},"tool":"slow","task":"786512e2-9e0d-44bd-8f29-789f320fe840"}
/// {"time":"2026-12-05T05:51:00.000Z","event":"task_cancelled","request_id":"77c0…","route":"files","principal":{"kind":"static","subject":"operator","client":"ci"},"tool":"slow","task":"786512e2-9e0d-44bd-8f29-789f320fe840","status":200}
/// ```
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TaskEvent<'a> {
    #[serde(rename = "time", serialize_with = "serialize_time")]
    pub(crate) time_ms: u64,
    /// `task_created` or `task_cancelled`.
    pub(crate) event: &'static str,
    pub(crate) request_id: &'a str,
    pub(crate) route: &'a str,
    pub(crate) principal: Option<AuditPrincipal<'a>>,
    #[serde(serialize_with = "serialize_untrusted")]
    pub(crate) tool: &'a str,
    #[serde(serialize_with = "serialize_untrusted")]
    pub(crate) task: &'a str,
    /// `task_cancelled`: the upstream's HTTP status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<u16>,
}

/// One audit line per change of a pinned tool definition the gateway saw (`tool_changed`:
/// `held` says whether it is held) and per approval (`tool_approved`, `by` who: `cli`).
///
/// ```json
/// {"time":"2026-12-05T09:30:00.000Z","event":"tool_changed","route":"files","tool":"echo","fields":["description"],"held":true}
/// {"time":"2026-12-05T09:31:00.000Z","event":"tool_approved","route":"files","tool":"echo","sha256":"5e1f…","by":"cli"}
/// ```
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PinRecord<'a> {
    #[serde(rename = "time", serialize_with = "serialize_time")]
    pub(crate) time_ms: u64,
    pub(crate) event: &'static str,
    pub(crate) route: &'a str,
    #[serde(serialize_with = "serialize_untrusted")]
    pub(crate) tool: &'a str,
    /// `tool_changed`: the fields that differ from the approved definition (empty: a new tool).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) fields: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) held: Option<bool>,
    /// `tool_approved`: the approved definition's SHA-256.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) by: Option<&'static str>,
}

/// How an audit line names a session: the first 12 hex digits of its id's SHA-256.
pub(crate) fn session_tag(hash: &[u8; 32]) -> String {
    hex::encode(&hash[..6])
}

pub(crate) fn serialize_untrusted<S: Serializer>(text: &&str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::logging::untrusted_name(text))
}

fn serialize_untrusted_opt<S: Serializer>(text: &Option<&str>, s: S) -> Result<S::Ok, S::Error> {
    match text {
        Some(text) => serialize_untrusted(text, s),
        None => s.serialize_none(),
    }
}

pub(crate) fn serialize_time<S: Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339_ms(*ms))
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for milliseconds since the Unix epoch.
pub(crate) fn rfc3339_ms(ms: u64) -> String {
    pforte_clock::UtcDateTime::from_unix_ms(ms).rfc3339_ms()
}

/// Where audit lines go (config `audit_log`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditSink {
    Off,
    Stdout,
    /// A file, appended to; created 0600. The caller resolves the default
    /// (`<data_dir>/audit.jsonl`) and relative paths.
    File(PathBuf),
}

impl std::str::FromStr for AuditSink {
    type Err = AuditError;

    /// `"off"`, `"stdout"`, or a path.
    fn from_str(s: &str) -> Result<Self, AuditError> {
        match s {
            "off" => Ok(Self::Off),
            "stdout" => Ok(Self::Stdout),
            "" => Err(AuditError::EmptyPath),
            path => Ok(Self::File(PathBuf::from(path))),
        }
    }
}

/// Rotation by size of a file sink: past `max_bytes` the file becomes `PATH.1` (and `PATH.1`
/// `PATH.2`, …, `PATH.keep` is dropped) and a new file is started. `max_bytes = 0`: never
/// (another program rotates and sends SIGHUP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rotation {
    pub(crate) max_bytes: u64,
    pub(crate) keep: u32,
}

/// `audit_max_bytes`'s default: 100 MiB.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 100 * 1024 * 1024;
/// `audit_keep`'s default.
pub(crate) const DEFAULT_KEEP: u32 = 5;

impl Default for Rotation {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_BYTES,
            keep: DEFAULT_KEEP,
        }
    }
}

impl Rotation {
    /// Whether a file holding `written` bytes is rotated before a line of `line` bytes is
    /// appended. A file never holds less than one line: an empty one takes any line.
    pub(crate) fn due(&self, written: u64, line: usize) -> bool {
        self.max_bytes > 0 && written > 0 && written.saturating_add(line as u64) > self.max_bytes
    }

    /// The renames of one rotation, oldest first: `PATH.{keep-1}` → `PATH.{keep}`, …,
    /// `PATH` → `PATH.1` (what was at `PATH.{keep}` is replaced, so dropped).
    pub(crate) fn renames(&self, path: &Path) -> Vec<(PathBuf, PathBuf)> {
        let numbered = |n: u32| {
            let mut name = path.as_os_str().to_owned();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        let mut plan = Vec::with_capacity(self.keep as usize);
        for n in (1..self.keep).rev() {
            plan.push((numbered(n), numbered(n + 1)));
        }
        if self.keep > 0 {
            plan.push((path.to_owned(), numbered(1)));
        }
        plan
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("audit_log: empty path (use \"off\", \"stdout\" or a file path)")]
    EmptyPath,
    #[error("cannot open the audit log {}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the audit log writer: {0}")]
    Thread(std::io::Error),
    #[error("cannot listen for SIGHUP: {0}")]
    Signal(std::io::Error),
}

enum Msg {
    Line(Vec<u8>),
    Reopen,
    Flush(mpsc::Sender<()>),
    #[cfg(test)]
    Hold(mpsc::Sender<()>, mpsc::Receiver<()>),
}

#[derive(Debug)]
struct Inner {
    tx: SyncSender<Msg>,
    dropped: AtomicU64,
    /// Seconds (monotonic, since `start`) of the last "dropped" warning, plus one.
    warned: AtomicU64,
    start: std::time::Instant,
}

/// The audit log. Cheap to clone; the writer thread ends when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct AuditLog {
    inner: Option<Arc<Inner>>,
}

impl AuditLog {
    /// Opens `sink` (creating the file 0600, appending) and starts its writer thread; a file
    /// rotates by the default [`Rotation`].
    pub fn open(sink: &AuditSink) -> Result<Self, AuditError> {
        Self::open_with(sink, DEFAULT_CAPACITY, Rotation::default())
    }

    /// [`AuditLog::open`] with a channel of `capacity` lines and a file rotated by `rotation`.
    pub(crate) fn open_with(
        sink: &AuditSink,
        capacity: usize,
        rotation: Rotation,
    ) -> Result<Self, AuditError> {
        let out = match sink {
            AuditSink::Off => return Ok(Self { inner: None }),
            AuditSink::Stdout => Output::Stdout(BufWriter::new(std::io::stdout())),
            AuditSink::File(path) => {
                let file = open_file(path)?;
                Output::File {
                    written: file_len(&file),
                    file: BufWriter::new(file),
                    path: path.clone(),
                    rotation,
                }
            }
        };
        let (tx, rx) = mpsc::sync_channel(capacity.max(1));
        std::thread::Builder::new()
            .name("pforte-audit".into())
            .spawn(move || writer(out, rx))
            .map_err(AuditError::Thread)?;
        Ok(Self {
            inner: Some(Arc::new(Inner {
                tx,
                dropped: AtomicU64::new(0),
                warned: AtomicU64::new(0),
                start: std::time::Instant::now(),
            })),
        })
    }

    /// Whether lines go anywhere.
    pub(crate) fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Formats `rec` (an [`AuditRecord`] or an [`AccountRecord`]) and queues it for the
    /// writer; never blocks (a full queue drops the line).
    pub fn record<T: Serialize>(&self, rec: &T) {
        let Some(inner) = &self.inner else {
            return;
        };
        let mut line = match serde_json::to_vec(rec) {
            Ok(line) => line,
            Err(e) => {
                tracing::warn!(error = %e, "audit record not serialisable");
                return;
            }
        };
        line.push(b'\n');
        match inner.tx.try_send(Msg::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                let total = inner.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                let now = inner.start.elapsed().as_secs() + 1;
                let last = inner.warned.load(Ordering::Relaxed);
                if now > last
                    && inner
                        .warned
                        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                {
                    tracing::warn!(dropped = total, "audit log queue full: lines dropped");
                }
            }
        }
    }

    /// Lines dropped so far because the writer could not keep up.
    pub fn dropped(&self) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |i| i.dropped.load(Ordering::Relaxed))
    }

    /// Makes the writer reopen its path after the lines queued so far (log rotation). Waits
    /// for room in the queue, so call it off the request path.
    pub fn reopen(&self) {
        if let Some(inner) = &self.inner {
            let _ = inner.tx.send(Msg::Reopen);
        }
    }

    /// Blocks until everything queued so far is written (tests, shutdown).
    pub fn flush(&self) {
        if let Some(inner) = &self.inner {
            let (ack, done) = mpsc::channel();
            if inner.tx.send(Msg::Flush(ack)).is_ok() {
                let _ = done.recv_timeout(Duration::from_secs(10));
            }
        }
    }

    /// Reopens on every SIGHUP, from a task on the current tokio runtime. The handler is
    /// installed when this returns `Ok` (a SIGHUP from then on does not kill the process).
    pub fn spawn_sighup_reopen(&self) -> Result<(), AuditError> {
        let hup = hangup()?;
        let log = self.clone();
        tokio::spawn(reopen_loop(log, hup, None));
        Ok(())
    }
}

fn hangup() -> Result<tokio::signal::unix::Signal, AuditError> {
    use tokio::signal::unix::{SignalKind, signal};
    signal(SignalKind::hangup()).map_err(AuditError::Signal)
}

async fn reopen_loop(
    log: AuditLog,
    mut hup: tokio::signal::unix::Signal,
    mut shutdown: Option<ShutdownWatch>,
) {
    loop {
        let got = match &mut shutdown {
            Some(stop) => tokio::select! {
                got = hup.recv() => got,
                _ = stop.changed() => return,
            },
            None => hup.recv().await,
        };
        if got.is_none() {
            return;
        }
        tracing::info!("SIGHUP: reopening the audit log");
        let log = log.clone();
        // `reopen` may wait for room in the queue: not on the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || log.reopen()).await;
    }
}

/// The SIGHUP reopen as a pingora background service (runs until shutdown).
#[derive(Debug, Clone)]
pub(crate) struct SighupReopen(pub AuditLog);

#[async_trait]
impl BackgroundService for SighupReopen {
    async fn start(&self, shutdown: ShutdownWatch) {
        if !self.0.is_enabled() {
            return;
        }
        match hangup() {
            Ok(hup) => reopen_loop(self.0.clone(), hup, Some(shutdown)).await,
            Err(e) => tracing::warn!(error = %e, "audit log: no reopen on SIGHUP"),
        }
    }
}

fn open_file(path: &Path) -> Result<File, AuditError> {
    let fail = |source| AuditError::Open {
        path: path.to_owned(),
        source,
    };
    // The data dir may not exist yet (with redis, no store file creates it): make it 0700.
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(fail)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(fail)
}

fn file_len(file: &File) -> u64 {
    file.metadata().map_or(0, |m| m.len())
}

enum Output {
    Stdout(BufWriter<std::io::Stdout>),
    File {
        file: BufWriter<File>,
        path: PathBuf,
        /// Bytes in the file (its length when opened, plus what was written since).
        written: u64,
        rotation: Rotation,
    },
}

impl Output {
    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            Self::Stdout(w) => w.write_all(line),
            Self::File {
                file,
                path,
                written,
                rotation,
            } => {
                if rotation.due(*written, line.len()) {
                    rotate(file, path, written, rotation);
                }
                file.write_all(line)?;
                *written += line.len() as u64;
                Ok(())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Stdout(w) => w.flush(),
            Self::File { file, .. } => file.flush(),
        }
    }

    fn reopen(&mut self) {
        if let Self::File {
            file,
            path,
            written,
            ..
        } = self
        {
            let _ = file.flush();
            match open_file(path) {
                Ok(new) => {
                    *written = file_len(&new);
                    *file = BufWriter::new(new);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "audit log: reopen failed, keeping the old file")
                }
            }
        }
    }
}

/// One rotation: the file is flushed, the numbered files shift by one, and a new file is
/// started at `path`. A failed rename keeps writing to the file at hand (it is logged).
fn rotate(file: &mut BufWriter<File>, path: &Path, written: &mut u64, rotation: &Rotation) {
    let _ = file.flush();
    for (from, to) in rotation.renames(path) {
        match std::fs::rename(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(error = %e, from = %from.display(), "audit log: rotation failed");
                return;
            }
        }
    }
    match open_file(path) {
        Ok(new) => {
            *written = file_len(&new);
            *file = BufWriter::new(new);
        }
        Err(e) => tracing::warn!(error = %e, "audit log: no new file after rotation"),
    }
}

/// The writer thread: writes what arrives, flushing whenever the queue runs empty.
fn writer(mut out: Output, rx: mpsc::Receiver<Msg>) {
    let mut failing = false;
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(msg) = next {
            match msg {
                Msg::Line(line) => {
                    let result = out.write(&line);
                    report(&mut failing, result);
                }
                Msg::Reopen => out.reopen(),
                Msg::Flush(ack) => {
                    report(&mut failing, out.flush());
                    let _ = ack.send(());
                }
                #[cfg(test)]
                Msg::Hold(entered, release) => {
                    let _ = entered.send(());
                    let _ = release.recv();
                }
            }
            next = rx.try_recv().ok();
        }
        report(&mut failing, out.flush());
    }
    let _ = out.flush();
}

/// Logs a write failure once per failing stretch.
fn report(failing: &mut bool, result: std::io::Result<()>) {
    match result {
        Ok(()) => *failing = false,
        Err(e) => {
            if !*failing {
                tracing::error!(error = %e, "audit log write failed");
            }
            *failing = true;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
