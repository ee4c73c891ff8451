//! The live children of one stdio route: a child per MCP session (by session id, with the
//! person who opened it) and the pool for stateless requests; starting them, picking a pool
//! child, making room at a person's cap (their least recently used idle session closed,
//! audited), reaping idle ones and stopping them all.

use std::{
    collections::HashMap,
    ffi::OsString,
    path::PathBuf,
    sync::{Arc, Mutex, MutexGuard, OnceLock, atomic::AtomicU64},
    time::{Duration, Instant},
};

use axum::http::StatusCode;

use crate::audit::AuditLog;

use super::{
    INIT_TIMEOUT, StdioSpec,
    conn::{self, Conn},
    decide::{self, CapRefusal},
    exec::{ChildCommand, Spawner},
    reply,
    session_env::{EnvRefusal, SessionEnv},
};

/// One session: who opened it and its child.
pub(super) struct Session {
    /// The person who opened it ([`person`](super::handlers::person)); None for the gateway's
    /// own session.
    pub(super) principal: Option<String>,
    pub(super) conn: Arc<Conn>,
    /// When a request last looked it up (the least recently used idle one makes room).
    pub(super) last_used: Instant,
}

impl Session {
    pub(super) fn new(principal: Option<String>, conn: Arc<Conn>) -> Self {
        Self {
            principal,
            conn,
            last_used: Instant::now(),
        }
    }
}

/// Every live child of the route.
#[derive(Default)]
pub(super) struct Children {
    pub(super) sessions: HashMap<String, Session>,
    pub(super) pool: Vec<Arc<Conn>>,
}

impl Children {
    /// The children the caps count: every client session's and the pool's.
    pub(super) fn live(&self) -> usize {
        self.sessions
            .values()
            .filter(|s| s.principal.is_some())
            .count()
            + self.pool.len()
    }
}

pub(super) struct Shared {
    pub(super) spec: StdioSpec,
    pub(super) launcher: PathBuf,
    pub(super) ids: Arc<AtomicU64>,
    pub(super) children: Mutex<Children>,
    pub(super) spawner: OnceLock<Spawner>,
    /// Where session children's per-user variables come from; unset: none.
    pub(super) session_env: OnceLock<Arc<dyn SessionEnv>>,
    /// Where sessions closed to make room are written; unset: nowhere.
    pub(super) audit: OnceLock<AuditLog>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, Children> {
        self.children
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How a child starts: with `PATH`, `HOME` (and the caches under a route's own home, which
    /// is also its working directory unless `cwd` says), the route's `env`, and `env` (a
    /// session's own variables, see [`identity::session_env`](super::identity::session_env))
    /// over them.
    fn command(
        &self,
        env: impl FnOnce(Vec<(String, OsString)>) -> Vec<(String, OsString)>,
    ) -> ChildCommand {
        let own_home = self.spec.run_as.as_ref().filter(|w| w.own_home);
        ChildCommand {
            launcher: self.launcher.clone(),
            command: self.spec.command.clone(),
            env: env(ChildCommand::clean_env(
                &self.spec.env,
                std::env::var_os("PATH"),
                match &self.spec.run_as {
                    Some(who) => Some(who.home.clone().into_os_string()),
                    None => std::env::var_os("HOME"),
                },
                own_home.map(|who| who.home.as_path()),
            )),
            cwd: self
                .spec
                .cwd
                .clone()
                .or_else(|| own_home.map(|who| who.home.clone())),
            run_as: self.spec.run_as.clone(),
            max_line_bytes: self.spec.max_line_bytes,
        }
    }

    /// Starts a child: a session's (`init`, the client's `initialize` request; its environment
    /// from `env`) or a pool child (`None`, `std::convert::identity`).
    pub(super) fn start_conn(
        &self,
        init: Option<Vec<u8>>,
        initialized: bool,
        env: impl FnOnce(Vec<(String, OsString)>) -> Vec<(String, OsString)>,
    ) -> Option<(Arc<Conn>, conn::Ready)> {
        let spawner = self.spawner.get()?.clone();
        Some(Conn::start(
            &self.spec.route,
            self.command(env),
            spawner,
            self.ids.clone(),
            init,
            initialized,
        ))
    }

    /// The per-user variables of `person` on this route (none without a source or a person:
    /// the gateway's own session).
    pub(super) async fn per_user_env(
        &self,
        person: Option<&str>,
    ) -> Result<Vec<(String, String)>, EnvRefusal> {
        match (self.session_env.get(), person) {
            (Some(source), Some(person)) => source.env_for(&self.spec.route, person).await,
            _ => Ok(Vec::new()),
        }
    }

    /// The child of session `id`, noting its use.
    pub(super) fn session(&self, id: &str) -> Option<Arc<Conn>> {
        let mut children = self.lock();
        let session = children.sessions.get_mut(id)?;
        session.last_used = Instant::now();
        Some(session.conn.clone())
    }

    /// Whether one more session of `principal` may start (the gateway's own, `None`, is
    /// outside the caps). At the person's cap their least recently used idle session (no
    /// request in flight, no open stream) is closed to make room, with an audit line; its next
    /// request gets 404 and its client initializes again. The route's cap is a refusal.
    pub(super) fn make_room(
        &self,
        children: &mut Children,
        principal: Option<&str>,
    ) -> Result<(), CapRefusal> {
        let Some(principal) = principal else {
            return Ok(());
        };
        let max = self.spec.max_children_per_principal;
        let now = Instant::now();
        let mine = || {
            children
                .sessions
                .iter()
                .filter(|(_, s)| s.principal.as_deref() == Some(principal))
        };
        let needed = (mine().count() + 1).saturating_sub(max);
        let mut closing = Vec::with_capacity(needed);
        for _ in 0..needed {
            let candidates = mine()
                .filter(|(id, _)| !closing.contains(*id))
                .map(|(id, s)| {
                    // With no timeout, "idle expired" is "idle": no call in flight, no stream.
                    let idle = s.conn.idle_expired(now, Duration::ZERO);
                    (id.as_str(), idle, s.last_used)
                });
            match decide::least_recently_used_idle(candidates) {
                Some(id) => closing.push(id.to_owned()),
                None => return Err(CapRefusal::Principal { max }),
            }
        }
        for id in closing {
            if let Some(evicted) = children.sessions.remove(&id) {
                let idle = now.saturating_duration_since(evicted.last_used);
                self.note_eviction(principal, &id, idle, max);
                tokio::spawn(async move { evicted.conn.stop_and_wait().await });
            }
        }
        decide::admit(children.live(), self.spec.max_children, 0, max)
    }

    fn note_eviction(&self, person: &str, id: &str, idle: Duration, max: usize) {
        use sha2::Digest as _;
        let session = crate::audit::session_tag(&sha2::Sha256::digest(id.as_bytes()).into());
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        tracing::info!(
            route = %self.spec.route,
            session = %short(id),
            idle_ms,
            "stdio session closed to make room at max_children_per_principal: its next use gets 404"
        );
        if let Some(audit) = self.audit.get() {
            audit.record(&crate::audit::SessionRecord {
                time_ms: pforte_clock::Clock::now_ms(&pforte_clock::SystemClock),
                event: "session_evicted",
                route: Some(&self.spec.route),
                person,
                session: &session,
                idle_ms: Some(idle_ms),
                limit: "max_children_per_principal",
                max,
            });
        }
    }

    /// Stops sessions and pool children that were idle too long (or stopped for good).
    pub(super) fn reap_idle(&self, now: Instant) {
        let timeout = self.spec.idle_timeout;
        let mut gone = Vec::new();
        {
            let mut children = self.lock();
            children.sessions.retain(|id, s| {
                let keep = !s.conn.is_stopped() && !s.conn.idle_expired(now, timeout);
                if !keep {
                    tracing::info!(route = %self.spec.route, session = %short(id), "stdio session ended (idle or stopped)");
                    gone.push(s.conn.clone());
                }
                keep
            });
            children.pool.retain(|c| {
                let keep = !c.is_stopped() && !c.idle_expired(now, timeout);
                if !keep {
                    gone.push(c.clone());
                }
                keep
            });
        }
        for conn in gone {
            tokio::spawn(async move { conn.stop_and_wait().await });
        }
    }

    /// Stops every child without the runtime (pingora shuts the runtimes down right after the
    /// shutdown signal, cancelling async work, and a dropped bridge must not wait for one):
    /// stdin closed, SIGTERM to each process group, SIGKILL after [`conn::SUPERVISOR_GRACE`]
    /// (each supervisor ends its command's tree itself before that).
    pub(super) fn stop_all_blocking(&self) {
        let all: Vec<Arc<Conn>> = {
            let mut children = self.lock();
            let sessions = children.sessions.drain().map(|(_, s)| s.conn);
            let mut all: Vec<_> = sessions.collect();
            all.append(&mut children.pool);
            all
        };
        let pids: Vec<u32> = all.iter().filter_map(|c| c.pid()).collect();
        for conn in &all {
            conn.stop();
            conn.close_stdin();
        }
        for pid in &pids {
            conn::signal_group(*pid, nix::sys::signal::Signal::SIGTERM);
        }
        let deadline = Instant::now() + conn::SUPERVISOR_GRACE;
        while Instant::now() < deadline && !pids.iter().all(|p| conn::has_exited(*p)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        for pid in pids {
            // Also whatever the child started in its group.
            conn::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
        }
        if !all.is_empty() {
            tracing::info!(route = %self.spec.route, children = all.len(), "stdio servers stopped");
        }
    }

    pub(super) fn forget(&self, session_id: &str, conn: &Arc<Conn>) {
        self.lock().sessions.remove(session_id);
        let conn = conn.clone();
        tokio::spawn(async move { conn.stop_and_wait().await });
    }

    /// A pool child for a stateless request: the least busy one, or a new one while the pool
    /// is not full and every child is busy.
    pub(super) async fn pool_conn(&self) -> Result<Arc<Conn>, (StatusCode, String)> {
        let route = &self.spec.route;
        if self.spec.pool == 0 {
            return Err((StatusCode::BAD_REQUEST, reply::sessions_only(route)));
        }
        let (conn, ready) = {
            let mut children = self.lock();
            let least_busy = |up_only: bool| {
                children
                    .pool
                    .iter()
                    .filter(|c| !up_only || c.is_up())
                    .min_by_key(|c| c.in_flight())
                    .cloned()
            };
            let best = least_busy(true);
            let can_grow = children.pool.len() < self.spec.pool
                && decide::admit(children.live(), self.spec.max_children, 0, 1).is_ok();
            let want_grow = best.as_ref().is_none_or(|c| c.in_flight() > 0);
            if let Some(c) = best
                && !(want_grow && can_grow)
            {
                return Ok(c);
            }
            if !can_grow {
                // A child that is (re)starting answers with an error naming the wait.
                if let Some(c) = least_busy(false) {
                    return Ok(c);
                }
                let refusal = decide::admit(children.live(), self.spec.max_children, 0, 1)
                    .err()
                    .unwrap_or(CapRefusal::Route {
                        max: self.spec.max_children,
                    });
                return Err((
                    StatusCode::SERVICE_UNAVAILABLE,
                    reply::cap_message(route, refusal),
                ));
            }
            let Some((conn, ready)) = self.start_conn(None, true, std::convert::identity) else {
                return Err((
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the stdio bridge is not running".to_owned(),
                ));
            };
            children.pool.push(conn.clone());
            (conn, ready)
        };
        match tokio::time::timeout(INIT_TIMEOUT, ready).await {
            Ok(Ok(Ok(_))) => Ok(conn),
            _ => {
                self.lock().pool.retain(|c| !Arc::ptr_eq(c, &conn));
                conn.stop();
                Err((
                    StatusCode::BAD_GATEWAY,
                    format!("the stdio server `{route}` did not start"),
                ))
            }
        }
    }
}

/// The first characters of a session id, for logs.
pub(super) fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}
