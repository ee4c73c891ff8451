//! One supervised stdio child and the MCP connection to it: requests written to its stdin with
//! bridge ids, its stdout read line by line and sent where each message belongs (see
//! [`decide::route_server_message`]), its stderr logged (escaped, cut at [`LOG_LINE_MAX`]), its
//! restarts with backoff and the replay of the session's `initialize` after each one.
//!
//! Messages pass as the text their author wrote: only the `id` (and a cancellation's
//! `requestId`) is spliced where it lies, never a message parsed and written again. A line of
//! the child is held once (read into its buffer, the id spliced in place, handed on as
//! [`Bytes`]). A line over `max_line_bytes` is not held: its top-level `id` is found as it
//! streams past ([`IdFinder`]) and that one call fails; the child and its other calls go on.

mod oversized;
mod process_group;
mod stderr;

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use serde_json::Value;
use tokio::{
    io::{AsyncWriteExt as _, BufReader},
    sync::{mpsc, oneshot, watch},
};

use super::{
    decide::{self, Dest, Kind},
    exec::{ChildCommand, Spawner},
    lines::{self, Line},
};
use crate::raw_json::{self, IdFinder};
pub(crate) use process_group::{has_exited, signal_group};
use process_group::{kill_group, terminate};
use stderr::{log_stderr, loggable};

/// Messages buffered per client stream.
const STREAM_BUFFER: usize = 256;
/// Server messages kept for a standalone stream that is not open (oldest dropped first).
const BACKLOG: usize = 100;
/// Lines queued for a child's stdin.
const STDIN_BUFFER: usize = 256;
/// How long a child has between SIGTERM and SIGKILL (its supervisor, `__stdio-exec`, gives
/// the command [`super::exec::TREE_GRACE`] and then kills its tree).
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(2);
/// How long the gateway waits for a supervisor that was told to stop before it kills it (a
/// supervisor that is killed cannot clean up its tree, so it gets the tree's grace and more).
pub(crate) const SUPERVISOR_GRACE: Duration = Duration::from_secs(5);
/// The most of one stderr line (or of a stdout line that is not JSON) that is logged; the
/// rest of the line is skipped.
pub(crate) const LOG_LINE_MAX: usize = 8 * 1024;

/// The first `initialize` answer of a connection: the child's whole response (a `result` or an
/// `error`; nothing for a pool child), or why there is none.
pub(crate) type Ready = oneshot::Receiver<Result<Initialized, String>>;

/// A child's answer to `initialize` (its id the bridge's).
#[derive(Debug)]
pub(crate) struct Initialized {
    pub(crate) text: Vec<u8>,
    /// It has a `result`.
    pub(crate) ok: bool,
}

/// A message of the child on its way to a client: its text (a response's id the client's
/// again) and whether it is a response.
#[derive(Debug, Clone)]
pub(crate) struct ServerMessage {
    pub(crate) text: Bytes,
    pub(crate) response: bool,
}

impl ServerMessage {
    /// A message the bridge made (an error answer).
    pub(crate) fn response(text: Vec<u8>) -> Self {
        Self {
            text: Bytes::from(text),
            response: true,
        }
    }
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Spawned, `initialize` written, no answer yet.
    Starting,
    Up,
    /// Crashed; restarts at `until`.
    Backoff {
        until: Instant,
    },
    Stopped,
}

/// A client request waiting for its response.
struct Pending {
    /// The client's id as it wrote it.
    client_id: Vec<u8>,
    token: Option<Value>,
    tx: mpsc::Sender<ServerMessage>,
    /// The bridge's own `initialize`.
    internal: bool,
    /// The client reads an event stream (else only the response reaches it: server requests
    /// go to the standalone stream).
    stream: bool,
}

struct State {
    stdin: Option<mpsc::Sender<Vec<u8>>>,
    phase: Phase,
    pending: HashMap<u64, Pending>,
    standalone: Option<mpsc::Sender<ServerMessage>>,
    backlog: VecDeque<ServerMessage>,
    pid: Option<u32>,
    last_activity: Instant,
}

/// One child and the MCP connection over its stdin/stdout.
pub(crate) struct Conn {
    route: String,
    cmd: ChildCommand,
    spawner: Spawner,
    ids: Arc<AtomicU64>,
    /// The client's `initialize` request (as it wrote it, the identity stamped) to send, with a
    /// bridge id, after every start; None for a pool child, which gets the clients' stateless
    /// (2026-07-28) requests as they are.
    init: Option<Vec<u8>>,
    /// Replay `notifications/initialized` after a restart (the client sent it, or the bridge
    /// initialized this child itself).
    initialized: AtomicBool,
    state: Mutex<State>,
    stop: watch::Sender<bool>,
    done: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("route", &self.route)
            .finish_non_exhaustive()
    }
}

/// How one run of a child ended.
enum RunEnd {
    Stopped,
    Exited { status: String, up_for: Duration },
}

impl Conn {
    /// Starts a child and its supervisor. `init` is the `initialize` to send (and replay)
    /// after every start, None for none (the child is ready once it runs); `initialized`
    /// whether `notifications/initialized` follows it without the client.
    pub(crate) fn start(
        route: &str,
        cmd: ChildCommand,
        spawner: Spawner,
        ids: Arc<AtomicU64>,
        init: Option<Vec<u8>>,
        initialized: bool,
    ) -> (Arc<Self>, Ready) {
        let (stop, stop_rx) = watch::channel(false);
        let conn = Arc::new(Self {
            route: route.to_owned(),
            cmd,
            spawner,
            ids,
            init,
            initialized: AtomicBool::new(initialized),
            state: Mutex::new(State {
                stdin: None,
                phase: Phase::Starting,
                pending: HashMap::new(),
                standalone: None,
                backlog: VecDeque::new(),
                pid: None,
                last_activity: Instant::now(),
            }),
            stop,
            done: Mutex::new(None),
        });
        let (ready_tx, ready_rx) = oneshot::channel();
        let task = tokio::spawn(conn.clone().supervise(ready_tx, stop_rx));
        if let Ok(mut done) = conn.done.lock() {
            *done = Some(task);
        }
        (conn, ready_rx)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The child's pid while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.lock().pid
    }

    /// Requests in flight (the bridge's own not counted).
    pub(crate) fn in_flight(&self) -> usize {
        self.lock().pending.values().filter(|p| !p.internal).count()
    }

    pub(crate) fn is_up(&self) -> bool {
        self.lock().phase == Phase::Up
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.lock().phase == Phase::Stopped
    }

    /// Notes client activity (idle expiry counts from the last one).
    pub(crate) fn touch(&self, now: Instant) {
        self.lock().last_activity = now;
    }

    /// Whether the connection has been idle for `timeout` at `now`.
    pub(crate) fn idle_expired(&self, now: Instant, timeout: Duration) -> bool {
        let st = self.lock();
        let busy = st.phase == Phase::Starting
            || st.pending.values().any(|p| !p.internal)
            || st.standalone.as_ref().is_some_and(|tx| !tx.is_closed());
        decide::idle_expired(st.last_activity, now, busy, timeout)
    }

    /// Sends a client request (valid JSON text, its id remapped where it lies); the receiver
    /// yields every server message tied to it and then its response (`stream`: the client reads
    /// an event stream). Err is the message of the JSON-RPC error to answer with.
    pub(crate) fn request(
        &self,
        mut msg: Vec<u8>,
        stream: bool,
    ) -> Result<mpsc::Receiver<ServerMessage>, String> {
        let mut st = self.lock();
        match st.phase {
            Phase::Up => {}
            Phase::Starting => {
                return Err(format!(
                    "the stdio server `{}` is starting; retry in a moment",
                    self.route
                ));
            }
            Phase::Backoff { until } => {
                let wait = until.saturating_duration_since(Instant::now());
                return Err(format!(
                    "the stdio server `{}` is restarting; retry in {:.1} s",
                    self.route,
                    wait.as_secs_f64()
                ));
            }
            Phase::Stopped => {
                return Err(format!("the stdio server `{}` has stopped", self.route));
            }
        }
        let Some(stdin) = st.stdin.clone() else {
            return Err(format!("the stdio server `{}` is not running", self.route));
        };
        let bridge_id = self.ids.fetch_add(1, Ordering::Relaxed);
        let token = decide::progress_token(&msg);
        let client_id =
            decide::remap_id(&mut msg, bridge_id).unwrap_or_else(|| decide::NULL_ID.to_vec());
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        if stdin.try_send(line(msg)).is_err() {
            return Err(format!(
                "the stdio server `{}` is not reading its input",
                self.route
            ));
        }
        st.pending.insert(
            bridge_id,
            Pending {
                client_id,
                token,
                tx,
                internal: false,
                stream,
            },
        );
        Ok(rx)
    }

    /// Passes a client notification or response to the child (a `notifications/cancelled`
    /// with the request's bridge id). Dropped while the child is down.
    pub(crate) fn send(&self, mut msg: Vec<u8>) {
        let st = self.lock();
        if let Kind::Notification { method } = decide::classify(&msg) {
            match method.as_str() {
                "notifications/initialized" => self.initialized.store(true, Ordering::Relaxed),
                "notifications/cancelled" => {
                    let path = ["params", "requestId"];
                    let parse = |raw: &[u8]| serde_json::from_slice::<Value>(raw).ok();
                    let client_id = decide::value_at(&msg, &path)
                        .and_then(|span| msg.get(span))
                        .and_then(parse);
                    let bridge = st
                        .pending
                        .iter()
                        .find(|(_, p)| {
                            !p.internal && client_id.is_some() && parse(&p.client_id) == client_id
                        })
                        .map(|(id, _)| *id);
                    if let Some(bridge) = bridge {
                        let _ = decide::replace_at(&mut msg, &path, bridge.to_string().as_bytes());
                    }
                }
                _ => {}
            }
        }
        if st.phase == Phase::Up
            && let Some(stdin) = &st.stdin
            && stdin.try_send(line(msg)).is_err()
        {
            tracing::warn!(route = %self.route, "stdio server input is full; message dropped");
        }
    }

    /// Opens the standalone stream (a previous one ends); buffered messages come first.
    pub(crate) fn open_standalone(&self) -> mpsc::Receiver<ServerMessage> {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let mut st = self.lock();
        while let Some(msg) = st.backlog.pop_front() {
            if tx.try_send(msg).is_err() {
                break;
            }
        }
        st.standalone = Some(tx);
        rx
    }

    /// Closes the child's stdin (stdio servers stop at end of input).
    pub(crate) fn close_stdin(&self) {
        self.lock().stdin = None;
    }

    /// Asks the supervisor to stop the child (SIGTERM, SIGKILL after [`STOP_GRACE`]).
    pub(crate) fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Stops the child and waits until it is gone.
    pub(crate) async fn stop_and_wait(&self) {
        self.stop();
        let task = self.done.lock().ok().and_then(|mut d| d.take());
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    async fn supervise(
        self: Arc<Self>,
        ready: oneshot::Sender<Result<Initialized, String>>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut ready = Some(ready);
        let mut failures = 0u32;
        loop {
            if *stop.borrow() {
                break;
            }
            match self.run_once(&mut ready, &mut stop).await {
                RunEnd::Stopped => break,
                RunEnd::Exited { status, up_for } => {
                    if let Some(ready) = ready.take() {
                        // Never initialized: the client's initialize fails instead.
                        let _ = ready.send(Err(format!(
                            "the stdio server `{}` exited before it answered initialize \
                             (status {status})",
                            self.route
                        )));
                        break;
                    }
                    failures = decide::failures_after_exit(failures, up_for);
                    let delay = decide::backoff_delay(failures.saturating_sub(1));
                    {
                        // In one step: no request slips in between the exit and the backoff.
                        let mut st = self.lock();
                        st.phase = Phase::Backoff {
                            until: Instant::now() + delay,
                        };
                        let message = format!(
                            "the stdio server `{}` exited ({status}); it is being restarted",
                            self.route
                        );
                        fail_pending(&mut st, &message);
                    }
                    tracing::warn!(
                        route = %self.route,
                        %status,
                        retry_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        "stdio server exited; restarting it"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        _ = stop.changed() => break,
                    }
                }
            }
        }
        let mut st = self.lock();
        st.phase = Phase::Stopped;
        st.stdin = None;
        st.standalone = None;
        st.pid = None;
        let message = format!("the stdio server `{}` has stopped", self.route);
        fail_pending(&mut st, &message);
    }

    /// Runs the child once: spawn, initialize, relay until it exits or a stop is asked for.
    async fn run_once(
        &self,
        ready: &mut Option<oneshot::Sender<Result<Initialized, String>>>,
        stop: &mut watch::Receiver<bool>,
    ) -> RunEnd {
        let started = Instant::now();
        let mut child = match self.spawner.spawn(self.cmd.clone()).await {
            Ok(child) => child,
            Err(e) => {
                return RunEnd::Exited {
                    status: format!("could not start: {e}"),
                    up_for: Duration::ZERO,
                };
            }
        };
        let pid = child.id();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            terminate(pid, &mut child).await;
            return RunEnd::Exited {
                status: "no pipes".to_owned(),
                up_for: Duration::ZERO,
            };
        };
        tracing::info!(route = %self.route, pid, "stdio server started");
        let (stdin_tx, stdin_rx) = mpsc::channel(STDIN_BUFFER);
        tokio::spawn(write_stdin(stdin, stdin_rx));
        tokio::spawn(log_stderr(self.route.clone(), pid, stderr));

        // The (replayed) initialize.
        let (init_tx, mut init_rx) = mpsc::channel(4);
        let mut initializing = self.init.is_some();
        {
            let mut st = self.lock();
            st.pid = pid;
            st.stdin = Some(stdin_tx.clone());
            if !initializing {
                st.phase = Phase::Up;
                st.last_activity = Instant::now();
                drop(st);
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Ok(Initialized {
                        text: Vec::new(),
                        ok: true,
                    }));
                }
            } else {
                st.phase = Phase::Starting;
                let bridge_id = self.ids.fetch_add(1, Ordering::Relaxed);
                st.pending.insert(
                    bridge_id,
                    Pending {
                        client_id: decide::NULL_ID.to_vec(),
                        token: None,
                        tx: init_tx,
                        internal: true,
                        stream: true,
                    },
                );
                let mut init = self.init.clone().unwrap_or_default();
                let _ = decide::remap_id(&mut init, bridge_id);
                let _ = stdin_tx.try_send(line(init));
            }
        }
        drop(stdin_tx);

        let mut stdout = BufReader::new(stdout);
        let mut text = Vec::new();
        let max = self.cmd.max_line_bytes;
        loop {
            tokio::select! {
                _ = stop.changed() => {
                    self.lock().stdin = None; // EOF on its stdin
                    terminate(pid, &mut child).await;
                    return RunEnd::Stopped;
                }
                answer = init_rx.recv(), if initializing => {
                    initializing = false;
                    let Some(answer) = answer else { continue };
                    self.initialized_answer(answer, ready);
                }
                next = lines::read_line(&mut stdout, &mut text, max) => match next {
                    // The line is handed on as it lies; the next one gets a new buffer.
                    Ok(Line::Whole) => self.on_line(std::mem::take(&mut text)),
                    Ok(Line::TooLong) => {
                        let mut finder = IdFinder::default();
                        finder.push(&text);
                        text = Vec::new();
                        let skipped = tokio::select! {
                            r = lines::skip_rest(&mut stdout, |rest| finder.push(rest)) => r,
                            _ = stop.changed() => {
                                self.lock().stdin = None;
                                terminate(pid, &mut child).await;
                                return RunEnd::Stopped;
                            }
                        };
                        self.oversized(pid, finder);
                        if skipped.is_err() {
                            break;
                        }
                    }
                    Ok(Line::End) | Err(_) => break,
                },
            }
        }
        // Its stdout closed: it exited (or is about to; it gets the grace period).
        let status = match tokio::time::timeout(STOP_GRACE, child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => {
                terminate(pid, &mut child).await;
                "closed its output".to_owned()
            }
        };
        kill_group(pid);
        let mut st = self.lock();
        st.stdin = None;
        st.pid = None;
        RunEnd::Exited {
            status,
            up_for: started.elapsed(),
        }
    }

    /// The child answered the bridge's `initialize`.
    fn initialized_answer(
        &self,
        answer: ServerMessage,
        ready: &mut Option<oneshot::Sender<Result<Initialized, String>>>,
    ) {
        let text = answer.text.to_vec();
        let ok = decide::value_at(&text, &["result"]).is_some();
        let mut st = self.lock();
        st.last_activity = Instant::now();
        if ok {
            st.phase = Phase::Up;
            if self.initialized.load(Ordering::Relaxed)
                && let Some(stdin) = &st.stdin
            {
                let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
                let _ = stdin.try_send(line(note.to_vec()));
            }
        } else {
            tracing::warn!(route = %self.route, answer = %loggable(&text), "stdio server refused initialize");
        }
        drop(st);
        if let Some(ready) = ready.take() {
            let _ = ready.send(Ok(Initialized { text, ok }));
        }
    }

    /// One line of the child's stdout.
    fn on_line(&self, mut text: Vec<u8>) {
        if !raw_json::is_valid(&text) {
            tracing::warn!(
                route = %self.route,
                line = %loggable(&text),
                "stdio server wrote a line that is not JSON"
            );
            return;
        }
        // A CR outside strings is whitespace to JSON but ends a line of an event stream.
        for b in &mut text {
            if *b == b'\r' {
                *b = b' ';
            }
        }
        let kind = decide::classify(&text);
        let mut st = self.lock();
        if let Kind::Response { id } = &kind {
            let pending = decide::parse_bridge_id(id).and_then(|id| st.pending.remove(&id));
            match pending {
                Some(p) => {
                    if !p.internal {
                        decide::restore_id(&mut text, &p.client_id);
                    }
                    let _ = p.tx.try_send(ServerMessage::response(text));
                }
                None => tracing::debug!(route = %self.route, "response to no request in flight"),
            }
            return;
        }
        let in_flight: Vec<(u64, Option<&Value>)> = st
            .pending
            .iter()
            .filter(|(_, p)| !p.internal)
            .map(|(id, p)| (*id, p.token.as_ref()))
            .collect();
        let dest = decide::route_server_message(&text, &kind, &in_flight);
        let is_request = matches!(kind, Kind::Request { .. });
        let msg = ServerMessage {
            text: Bytes::from(text),
            response: false,
        };
        let msg = match dest {
            // A JSON answer carries only the response: a server request goes where it is read.
            Dest::Request(id) if is_request && st.pending.get(&id).is_some_and(|p| !p.stream) => {
                msg
            }
            Dest::Request(id) => match st.pending.get(&id).map(|p| p.tx.try_send(msg)) {
                Some(Err(e)) => e.into_inner(),
                Some(Ok(())) => return,
                None => return,
            },
            Dest::Standalone => msg,
        };
        let msg = match &st.standalone {
            Some(tx) => match tx.try_send(msg) {
                Ok(()) => return,
                Err(e) => e.into_inner(),
            },
            None => msg,
        };
        if st.backlog.len() >= BACKLOG {
            st.backlog.pop_front();
        }
        st.backlog.push_back(msg);
    }
}

/// Answers every request in flight with a JSON-RPC error (their streams then end).
fn fail_pending(st: &mut State, message: &str) {
    for (_, p) in st.pending.drain() {
        if !p.internal {
            let error = decide::error_response(&p.client_id, decide::INTERNAL_ERROR, message);
            let _ = p.tx.try_send(ServerMessage::response(error));
        }
    }
}

/// A message as one line of a child's input: a line break in it (whitespace to JSON, which
/// allows none inside strings) becomes a space, and the line ends with `\n`.
fn line(mut msg: Vec<u8>) -> Vec<u8> {
    for b in &mut msg {
        if *b == b'\n' || *b == b'\r' {
            *b = b' ';
        }
    }
    msg.push(b'\n');
    msg
}

async fn write_stdin(mut stdin: tokio::process::ChildStdin, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(bytes) = rx.recv().await {
        if stdin.write_all(&bytes).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
    // Dropping stdin closes it: stdio servers stop at end of input.
}
