//! The upstream's tool catalog, learned by the gateway itself as an MCP client of its upstream
//! (streamable HTTP): which tools exist and which only read (`annotations.readOnlyHint`).
//!
//! The proxy asks [`Catalog::tool`] on every `tools/call` (a lock-free snapshot read) and
//! [`Catalog::tool_or_refresh`] on a miss; [`Catalog::run`] (or the pingora background service
//! [`CatalogService`]) keeps the snapshot fresh: at start (retrying until the upstream answers),
//! every `ttl`, and at once on `notifications/tools/list_changed` from the catalog's own GET
//! stream. [`filter_tools_list`] rewrites `tools/list` answers for a principal.
//!
//! A route whose upstream takes only each person's own credential has a [`Lender`]: the catalog
//! borrows a connected person's credential for its own requests (tool definitions only), keeps
//! it while the upstream takes it, and tries another person when the upstream refuses it; with
//! nobody connected it is empty and says so ([`Catalog::awaits_person`]) until someone connects
//! ([`Catalog::connected`]) or a `ttl` passes. It declares the client capabilities (roots,
//! sampling, elicitation) at `initialize`, so tools a server lists only for such clients are
//! known, and answers the server's requests minimally ([`answer::answer_server_request`]).
//!
//! Its HTTP is the one outbound client's (`pforte_outbound`): no redirects, no proxy, the
//! route's CA only (else the system roots), the upstream's own host only. Every answer is read
//! up to `max_answer_bytes` (a JSON answer, the whole event stream of a POST, and one line or
//! event of the GET stream); the GET stream is dropped after `stream_idle` without a byte, or
//! at a line or event past the cap, and `run` opens it again after a backoff.

mod answer;
mod changes;
mod filter;
mod follow;
mod lending;
mod member;
mod member_stream;
pub(crate) mod sse;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pforte_outbound::{AddressPolicy, OutboundError, Trust};
use pingora::{server::ShutdownWatch, services::background::BackgroundService};
use serde_json::{Value, json};
use tokio::sync::watch;

use answer::client_capabilities;
pub(crate) use changes::{Changes, Listed};
pub use filter::filter_tools_list;
pub(crate) use filter::{filter_discover, filter_listed};
pub(crate) use lending::Lender;
use lending::Lent;
pub(crate) use member::Extra;
use member::{answered, into_result, read_answer};
pub(crate) use member_stream::{MemberAnswer, MemberEvents};

use crate::{forward::header, param_headers::ParamHeader, pins::Pins};

/// The protocol revision the catalog client speaks.
pub(crate) const PROTOCOL_VERSION: &str = "2025-06-18";
/// The subject the catalog's own calls carry (`x-pforte-subject`, attribution only).
pub(crate) const SUBJECT: &str = "pforte-gateway";
const SESSION_HEADER: &str = "mcp-session-id";
const PROTOCOL_HEADER: &str = "mcp-protocol-version";
/// Upper bound on `tools/list` pages followed in one refresh (a loop guard).
const MAX_PAGES: usize = 100;
/// `max_answer_bytes`' default.
pub const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;
/// What the catalog knows about a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Annotated `readOnlyHint: true`.
    ReadOnly,
    /// Listed without `readOnlyHint: true` (absent counts as writing).
    Writes,
    /// Not in the catalog (or the catalog is not loaded yet).
    Unknown,
}

/// Timing of the catalog.
#[derive(Debug, Clone)]
pub struct CatalogOptions {
    /// Periodic refresh interval (default 60 s).
    pub ttl: Duration,
    /// After a miss-triggered refresh, further misses within this interval don't refresh
    /// again (default 5 s).
    pub miss_refresh: Duration,
    /// How long [`Catalog::tool_or_refresh`] waits for the refresh (default 2 s).
    pub miss_wait: Duration,
    /// Timeout of each HTTP request to the upstream (default 10 s; the GET stream has none
    /// but `stream_idle`).
    pub request_timeout: Duration,
    /// The GET stream is dropped (and opened again) after this long without a byte (default
    /// 5 min).
    pub stream_idle: Duration,
    /// Largest answer read (a JSON answer, a POST's whole event stream, one line or event of
    /// the GET stream; default 8 MiB): past it the answer or stream is dropped.
    pub max_answer_bytes: usize,
    /// Retry backoff while the upstream is unreachable: from `backoff_min`, doubling up to
    /// `backoff_max` (defaults 200 ms, 10 s).
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Connect to the upstream over this Unix domain socket (`upstream.url = "unix:PATH"`);
    /// the URL then only names the `Host` and path.
    pub unix_socket: Option<std::path::PathBuf>,
    /// Verify an https upstream against this PEM CA file only (default: the system roots).
    pub ca_file: Option<std::path::PathBuf>,
    /// A header every request to the upstream carries: a route's shared credential.
    pub header: Option<(http::HeaderName, http::HeaderValue)>,
    /// The upstream takes only each person's own credential: the catalog borrows a connected
    /// person's (tool definitions only); with nobody connected it stays empty.
    pub lender: Option<Arc<dyn Lender>>,
    /// Whether the catalog's requests carry the gateway's identity headers
    /// (`x-pforte-subject: pforte-gateway`), as the route's `identity_headers`.
    pub identity: bool,
}

impl Default for CatalogOptions {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(60),
            miss_refresh: Duration::from_secs(5),
            miss_wait: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            stream_idle: Duration::from_secs(300),
            max_answer_bytes: MAX_ANSWER_BYTES,
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(10),
            unix_socket: None,
            ca_file: None,
            header: None,
            lender: None,
            identity: true,
        }
    }
}

/// Why a refresh failed.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("catalog: upstream request failed: {}", pforte_outbound::chain(.0))]
    Http(#[from] reqwest::Error),
    #[error("catalog: {0}")]
    Outbound(#[from] OutboundError),
    #[error("catalog: {0}")]
    TooLong(#[from] sse::TooLong),
    #[error("catalog: upstream answered {0}")]
    Status(reqwest::StatusCode),
    #[error("catalog: the catalog's MCP session is gone")]
    SessionGone,
    #[error("catalog: upstream answer unusable: {0}")]
    Protocol(String),
    #[error("catalog: upstream error {code}: {message}")]
    JsonRpc { code: i64, message: String },
    #[error("catalog: ca_file {0}: {1}")]
    CaFile(String, String),
    #[error(
        "catalog: nobody has connected to the upstream yet (its tools are learned through a connected person's credential)"
    )]
    NoLender,
}

/// The current tool set.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// Tool name → read-only.
    tools: HashMap<Box<str>, bool>,
    /// Tool name → the parameters it mirrors into `Mcp-Param-*` headers (`x-mcp-header` in its
    /// `inputSchema`), for the tools that declare any.
    params: HashMap<Box<str>, Arc<[ParamHeader]>>,
    /// Tool name → its `annotations` object, for the tools that have one (`[[policy]]`).
    annotations: HashMap<Box<str>, Arc<Value>>,
    /// Each listed tool as listed, until the pins have seen it (taken by `refresh`).
    listed: Vec<(String, Value)>,
    /// Every listed definition, in the upstream's order (what a virtual server merges; shared,
    /// so a request borrows it instead of copying it).
    definitions: Arc<Vec<Value>>,
}

impl Snapshot {
    fn len(&self) -> usize {
        self.tools.len()
    }
}

/// The upstream's tool catalog. Share it as `Arc<Catalog>`.
#[derive(Debug)]
pub struct Catalog {
    url: String,
    /// `url` parsed (what requests go to).
    target: url::Url,
    opts: CatalogOptions,
    http: pforte_outbound::Client,
    snapshot: ArcSwap<Snapshot>,
    /// The catalog's MCP session with the upstream.
    session: Mutex<Option<String>>,
    /// The upstream answered `initialize` without a session: it keeps none.
    stateless: AtomicBool,
    /// Serialises refreshes (the periodic loop, a list_changed, a miss).
    refresh_lock: tokio::sync::Mutex<()>,
    /// A miss-triggered refresh is running.
    miss_in_flight: AtomicBool,
    /// Milliseconds since `epoch` of the last miss-triggered refresh (0: never).
    last_miss_ms: AtomicU64,
    epoch: Instant,
    /// Counts completed refreshes (successful or not); watchers wait on it.
    refreshed: watch::Sender<u64>,
    /// The last refresh succeeded: the member is up (a virtual server lists its tools).
    up: AtomicBool,
    /// How often each list changed as a virtual server's client sees it (`changes.rs`).
    changes: watch::Sender<Changes>,
    loaded: AtomicU64,
    /// The runtime the catalog's network work runs on (set by `run`).
    runtime: Mutex<Option<tokio::runtime::Handle>>,
    /// With a lender: the credential in use (the session was opened with it).
    lent: Mutex<Option<Lent>>,
    /// With a lender: the person who connected last in this process (tried before the others).
    newest: Mutex<Option<String>>,
    /// With a lender: the last refresh found nobody whose credential works.
    awaiting: AtomicBool,
    /// Someone connected: a waiting `run` refreshes now.
    wake: tokio::sync::Notify,
    /// The pinned tool definitions and this route's name: every listed definition is compared
    /// with its pin before the new snapshot is used.
    pins: Option<(Arc<Pins>, String)>,
}

/// Whether a miss at `now_ms` may start a refresh, given the last miss-triggered one.
pub(crate) fn miss_may_refresh(last_ms: Option<u64>, now_ms: u64, interval: Duration) -> bool {
    last_ms.is_none_or(|last| now_ms.saturating_sub(last) >= interval.as_millis() as u64)
}

/// Whether the snapshot answer for `name` is `read_only` (`None`: not listed).
fn lookup(read_only: Option<bool>) -> Lookup {
    match read_only {
        Some(true) => Lookup::ReadOnly,
        Some(false) => Lookup::Writes,
        None => Lookup::Unknown,
    }
}

impl Catalog {
    /// A catalog of the MCP endpoint at `upstream_url` (e.g. `http://127.0.0.1:8080/mcp`). It
    /// starts empty: every lookup is `Unknown` until the first refresh.
    pub fn new(upstream_url: String, opts: CatalogOptions) -> Result<Self, CatalogError> {
        // Straight to the upstream (its own host only): no redirects, no HTTP(S)_PROXY from the
        // environment, the route's CA alone when it has one.
        let target = url::Url::parse(&upstream_url)
            .map_err(|e| CatalogError::Protocol(format!("upstream URL {upstream_url}: {e}")))?;
        let trust = match &opts.ca_file {
            Some(path) => Trust::read(path, false)
                .map_err(|e| CatalogError::CaFile(path.display().to_string(), e.to_string()))?,
            None => Trust::System,
        };
        let http = pforte_outbound::Client::new(pforte_outbound::Options {
            policy: AddressPolicy::allowing(target.host_str()),
            trust,
            connect_timeout: opts.request_timeout,
            timeout: None,
            idle_timeout: Some(opts.stream_idle),
            unix_socket: opts.unix_socket.clone(),
        })
        .map_err(|e| match e {
            OutboundError::Ca { path, reason } => CatalogError::CaFile(path, reason),
            other => CatalogError::Outbound(other),
        })?;
        let lends = opts.lender.is_some();
        Ok(Self {
            url: upstream_url,
            target,
            opts,
            http,
            snapshot: ArcSwap::from_pointee(Snapshot::default()),
            session: Mutex::new(None),
            stateless: AtomicBool::new(false),
            refresh_lock: tokio::sync::Mutex::new(()),
            miss_in_flight: AtomicBool::new(false),
            last_miss_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            refreshed: watch::Sender::new(0),
            up: AtomicBool::new(false),
            changes: watch::Sender::new(Changes::default()),
            loaded: AtomicU64::new(0),
            runtime: Mutex::new(None),
            awaiting: AtomicBool::new(lends),
            lent: Mutex::new(None),
            newest: Mutex::new(None),
            wake: tokio::sync::Notify::new(),
            pins: None,
        })
    }

    /// The catalog of route `route`, its listed definitions compared with `pins`.
    pub(crate) fn with_pins(mut self, pins: Arc<Pins>, route: String) -> Self {
        self.pins = Some((pins, route));
        self
    }

    /// The tool `name` in the current snapshot. Lock-free; no I/O.
    pub fn tool(&self, name: &str) -> Lookup {
        lookup(self.snapshot.load().tools.get(name).copied())
    }

    /// Like [`Catalog::tool`], but a miss refreshes the catalog (one refresh at a time; not
    /// again within `miss_refresh` of the last miss-triggered one) and waits for it at most
    /// `miss_wait` before answering `Unknown`.
    pub async fn tool_or_refresh(self: &Arc<Self>, name: &str) -> Lookup {
        let found = self.tool(name);
        if found != Lookup::Unknown {
            return found;
        }
        let now = self.now_ms();
        let last = self.last_miss_ms.load(Ordering::Acquire);
        let may = miss_may_refresh((last != 0).then_some(last), now, self.opts.miss_refresh);
        let claimed = may
            && self
                .last_miss_ms
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        // Subscribed before the refresh starts, so that its end is seen.
        let mut rx = self.refreshed.subscribe();
        rx.borrow_and_update();
        if claimed {
            self.spawn_miss_refresh();
        } else if !may && !self.miss_in_flight.load(Ordering::Acquire) {
            // Throttled and nothing in flight: answer from the snapshot.
            return Lookup::Unknown;
        }
        // Our refresh, or the one another miss just started: wait for it, bounded.
        self.wait_refresh(rx).await;
        self.tool(name)
    }

    /// The parameters `tool` mirrors into `Mcp-Param-*` headers, as last listed (`None`: none,
    /// or not listed). Lock-free; no I/O.
    pub(crate) fn param_headers(&self, tool: &str) -> Option<Arc<[ParamHeader]>> {
        self.snapshot.load().params.get(tool).cloned()
    }

    /// The `annotations` object of `tool` as last listed. Lock-free; no I/O.
    pub(crate) fn annotations(&self, tool: &str) -> Option<Arc<Value>> {
        self.snapshot.load().annotations.get(tool).cloned()
    }

    /// Every tool in the catalog with whether it only reads, sorted by name.
    pub(crate) fn tools(&self) -> Vec<(String, bool)> {
        let mut tools: Vec<(String, bool)> = self
            .snapshot
            .load()
            .tools
            .iter()
            .map(|(name, read_only)| (name.to_string(), *read_only))
            .collect();
        tools.sort();
        tools
    }

    /// Every tool definition as the upstream last listed it, in its order; `None` before the
    /// first successful refresh and while the last one failed (the member is down).
    pub(crate) fn definitions(&self) -> Option<Arc<Vec<Value>>> {
        (self.generation() > 0 && self.up.load(Ordering::Acquire))
            .then(|| Arc::clone(&self.snapshot.load().definitions))
    }

    /// Number of tools in the current snapshot.
    pub fn len(&self) -> usize {
        self.snapshot.load().tools.len()
    }

    /// Whether the snapshot is empty (e.g. never loaded).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of successful refreshes so far.
    pub fn generation(&self) -> u64 {
        self.loaded.load(Ordering::Acquire)
    }

    /// Learns the tool list now: re-uses the catalog's session, initialises a new one when
    /// there is none or the upstream forgot it. Returns the number of tools.
    pub async fn refresh(&self) -> Result<usize, CatalogError> {
        let _one = self.refresh_lock.lock().await;
        let result = match &self.opts.lender {
            Some(lender) => self.list_borrowing(lender.as_ref()).await,
            None => self.list_once().await,
        };
        let result = match result {
            Ok(mut tools) => {
                self.pin(std::mem::take(&mut tools.listed)).await;
                Ok(tools)
            }
            Err(e) => Err(e),
        };
        let result = result.map(|tools| {
            let n = tools.len();
            let was_up = self.up.swap(true, Ordering::AcqRel);
            let before = &self.snapshot.load().definitions;
            let changed = changes::tools_changed(was_up, true, before, &tools.definitions);
            self.snapshot.store(Arc::new(tools));
            self.loaded.fetch_add(1, Ordering::AcqRel);
            if changed {
                self.note_change(Listed::Tools);
            }
            n
        });
        if let Err(e) = &result
            && !matches!(e, CatalogError::NoLender)
            && self.up.swap(false, Ordering::AcqRel)
        {
            // Down: its tools leave a virtual server's list.
            self.note_change(Listed::Tools);
        }
        self.refreshed.send_modify(|n| *n += 1);
        if let Err(CatalogError::NoLender) = &result {
            tracing::debug!(upstream = %self.url, "tool catalog: nobody to borrow a credential from yet");
        } else if let Err(e) = &result {
            tracing::warn!(error = %e, upstream = %self.url, "tool catalog refresh failed");
        } else {
            tracing::debug!(tools = self.len(), "tool catalog refreshed");
        }
        result
    }

    /// The listed definitions compared with their pins (recorded, held, reported) before the
    /// snapshot that lists them is used; a store failure is logged (the held tools stay as
    /// last read).
    async fn pin(&self, listed: Vec<(String, Value)>) {
        let Some((pins, route)) = self.pins.clone() else {
            return;
        };
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || pins.observe(&route, &listed)).await
        {
            tracing::warn!(error = %e, upstream = %self.url, "tool pins not updated");
        }
    }

    /// `tools/list` on the catalog's session, once more on a new session when the upstream
    /// forgot it.
    async fn list_once(&self) -> Result<Snapshot, CatalogError> {
        match self.list_on_session().await {
            Err(CatalogError::SessionGone) => {
                self.set_session(None);
                self.list_on_session().await
            }
            other => other,
        }
    }

    /// The headers every request of the catalog carries: the identity it claims (unless the
    /// route keeps identity from its upstream), and the route's or a lent credential.
    fn headers(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let mut request = request;
        if self.opts.identity {
            request = request
                .header(header::SUBJECT, SUBJECT)
                .header(header::AUTH_KIND, "gateway");
        }
        if let Some((name, value)) = &self.opts.header {
            request = request.header(name, value);
        }
        if let Some(lent) = self.lent() {
            for (name, value) in lent.headers {
                request = request.header(name, value);
            }
        }
        request
    }

    fn spawn_miss_refresh(self: &Arc<Self>) {
        if self.miss_in_flight.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = Arc::clone(self);
        let work = async move {
            let _ = this.refresh().await;
            this.miss_in_flight.store(false, Ordering::Release);
        };
        let handle = self
            .runtime
            .lock()
            .ok()
            .and_then(|rt| rt.clone())
            .or_else(|| tokio::runtime::Handle::try_current().ok());
        match handle {
            Some(rt) => {
                rt.spawn(work);
            }
            None => self.miss_in_flight.store(false, Ordering::Release),
        }
    }

    async fn wait_refresh(&self, mut rx: watch::Receiver<u64>) {
        let _ = tokio::time::timeout(self.opts.miss_wait, rx.changed()).await;
    }

    fn now_ms(&self) -> u64 {
        // Never 0, which means "never".
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    fn session(&self) -> Option<String> {
        self.session.lock().ok().and_then(|s| s.clone())
    }

    /// Forgets the catalog's session if it still is `session`.
    fn forget_session(&self, session: &str) {
        if let Ok(mut s) = self.session.lock()
            && s.as_deref() == Some(session)
        {
            *s = None;
        }
    }

    fn set_session(&self, session: Option<String>) {
        if let Ok(mut s) = self.session.lock() {
            *s = session;
        }
    }

    /// `tools/list` (all pages) on the current session, initialising one first if needed.
    async fn list_on_session(&self) -> Result<Snapshot, CatalogError> {
        let session = match self.session() {
            Some(s) => Some(s),
            None => {
                let s = self.initialize().await?;
                self.set_session(s.clone());
                s
            }
        };
        let mut tools = Snapshot::default();
        let mut cursor: Option<String> = None;
        for page in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let id = 2 + page as u64;
            let (result, _) = self
                .call(session.as_deref(), id, "tools/list", params)
                .await?;
            cursor = read_tools_page(&result, &mut tools)?;
            if cursor.is_none() {
                return Ok(tools);
            }
        }
        Err(CatalogError::Protocol(format!(
            "tools/list has more than {MAX_PAGES} pages"
        )))
    }

    /// `initialize` (declaring the client capabilities, so that tools a server lists only for
    /// capable clients are known) + `notifications/initialized`; the new session id (`None`:
    /// a stateless upstream).
    async fn initialize(&self) -> Result<Option<String>, CatalogError> {
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": client_capabilities(),
            "clientInfo": { "name": SUBJECT, "version": env!("CARGO_PKG_VERSION") },
        });
        let (_, session) = self.call(None, 1, "initialize", params).await?;
        self.stateless.store(session.is_none(), Ordering::Release);
        let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        let response = self.post(session.as_deref(), &note)?.send().await?;
        if !response.status().is_success() {
            return Err(CatalogError::Status(response.status()));
        }
        Ok(session)
    }

    fn post(
        &self,
        session: Option<&str>,
        body: &Value,
    ) -> Result<reqwest::RequestBuilder, CatalogError> {
        let mut request = self.headers(
            self.http
                .request(http::Method::POST, &self.target)?
                .timeout(self.opts.request_timeout)
                .header(
                    reqwest::header::ACCEPT,
                    "application/json, text/event-stream",
                )
                .json(body),
        );
        if let Some(s) = session {
            request = request
                .header(SESSION_HEADER, s)
                .header(PROTOCOL_HEADER, PROTOCOL_VERSION);
        }
        Ok(request)
    }

    /// One JSON-RPC request; its `result` and the session id the answer carried.
    async fn call(
        &self,
        session: Option<&str>,
        id: u64,
        method: &str,
        params: Value,
    ) -> Result<(Value, Option<String>), CatalogError> {
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let response = self.post(session, &body)?.send().await?;
        let new_session = answered(&response, session)?;
        let message = read_answer(response, &json!(id), self.opts.max_answer_bytes).await?;
        Ok((into_result(message)?, new_session))
    }
}

/// Adds one `tools/list` result page to `tools`; its `nextCursor`.
fn read_tools_page(result: &Value, tools: &mut Snapshot) -> Result<Option<String>, CatalogError> {
    let list = result
        .get("tools")
        .and_then(Value::as_array)
        .ok_or_else(|| CatalogError::Protocol("tools/list result without tools".into()))?;
    for tool in list {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            continue;
        };
        let read_only = tool
            .pointer("/annotations/readOnlyHint")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        tools.tools.insert(name.into(), read_only);
        if let Some(a) = tool.get("annotations").filter(|a| a.is_object()) {
            tools.annotations.insert(name.into(), Arc::new(a.clone()));
        }
        tools.listed.push((name.to_owned(), tool.clone()));
        Arc::make_mut(&mut tools.definitions).push(tool.clone());
        let params = tool
            .get("inputSchema")
            .map(crate::param_headers::declared)
            .unwrap_or_default();
        if params.is_empty() {
            tools.params.remove(name);
        } else {
            tools.params.insert(name.into(), params.into());
        }
    }
    Ok(result
        .get("nextCursor")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_owned))
}

/// The catalog as a pingora background service: runs [`Catalog::run`] until shutdown.
#[derive(Debug)]
pub(crate) struct CatalogService(pub Arc<Catalog>);

#[async_trait]
impl BackgroundService for CatalogService {
    async fn start(&self, shutdown: ShutdownWatch) {
        Arc::clone(&self.0).run(Some(shutdown)).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
