//! The session stream gate: a session's first requests wait, briefly, until its event stream
//! (the `GET` the client opens right after `notifications/initialized`) is open upstream.
//!
//! Why (issue 36 point 9, docs/notes/elicitation-through-proxies.md): an SDK client sends its
//! `GET` and its next request back to back, on two connections. Straight to a server they
//! arrive in that order; through a gateway (and more so behind a keep-alive reverse proxy)
//! either may overtake the other. A server that sends a request of its own on the session's
//! stream rather than on the call's (the conformance suite's reference `test_elicitation`)
//! finds no stream open when the call overtook the `GET`, drops its `elicitation/create`, and
//! the call hangs until the client gives up. So: once `notifications/initialized` has gone
//! upstream, a request of that session waits until the session's `GET` has its answer's head
//! from the upstream (the server has registered the stream by then), at most [`EXPECT`] for a
//! `GET` to come and [`OPENING`] for one that came to be answered. A client that opens no
//! stream pays [`EXPECT`] at most, once, on a request sent within it of `initialized`.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use tokio::sync::watch;

use crate::mcp::{Kind, Message};

/// How long after `notifications/initialized` a request waits for the session's `GET` to come.
pub(super) const EXPECT: Duration = Duration::from_millis(250);

/// How long a request waits for a `GET` that came to have its answer from the upstream.
pub(super) const OPENING: Duration = Duration::from_secs(2);

/// Sessions expecting their stream at once, at most (past it, no new session is gated).
const MAX_ENTRIES: usize = 10_000;

/// One session whose stream is expected: until when requests wait, and the signal that ends
/// the wait (dropped when the stream is open upstream).
#[derive(Debug)]
struct Entry {
    until: Instant,
    open: watch::Sender<()>,
}

/// The sessions (`route:session id`) whose event stream is expected or opening.
#[derive(Debug, Default)]
pub(super) struct StreamGate {
    table: Mutex<HashMap<String, Entry>>,
}

/// Until when a request of a session whose stream is expected until `until` waits, when it
/// comes at `now` — pure.
pub(super) fn hold_until(until: Option<Instant>, now: Instant) -> Option<Instant> {
    until.filter(|until| *until > now)
}

/// The new deadline of an expected session whose `GET` came at `now` — pure: a `GET` extends
/// the wait to [`OPENING`] from its arrival, never shortens it.
pub(super) fn opening_until(until: Instant, now: Instant) -> Instant {
    until.max(now + OPENING)
}

/// What a request of a session does at the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// `notifications/initialized`: the session's stream is expected from now on.
    Expect,
    /// The session's event-stream `GET`: requests wait for its answer.
    Open,
    /// A request: waits while the stream is expected.
    Wait,
    /// Anything else (notifications, the client's answers, `DELETE`) passes.
    Pass,
}

/// The step of a request with `method` carrying `message` — pure.
pub(super) fn step(method: &http::Method, message: Option<&Message>) -> Step {
    match (method, message) {
        (&http::Method::GET, _) => Step::Open,
        (&http::Method::POST, Some(m)) if m.kind == Kind::Request => Step::Wait,
        (&http::Method::POST, Some(m)) if m.method == "notifications/initialized" => Step::Expect,
        _ => Step::Pass,
    }
}

impl StreamGate {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `notifications/initialized` of `session` goes upstream at `now`: its stream is expected.
    pub(super) fn expect(&self, session: String, now: Instant) {
        let mut table = self.lock();
        table.retain(|_, e| e.until > now);
        if table.len() < MAX_ENTRIES {
            let (open, _) = watch::channel(());
            table.insert(
                session,
                Entry {
                    until: now + EXPECT,
                    open,
                },
            );
        }
    }

    /// The `GET` of `session` came at `now` and goes upstream: requests wait for its answer.
    pub(super) fn opening(&self, session: &str, now: Instant) {
        if let Some(e) = self.lock().get_mut(session) {
            e.until = opening_until(e.until, now);
        }
    }

    /// The `GET` of `session` has its answer's head (or failed): requests go on.
    pub(super) fn opened(&self, session: &str) {
        // Dropping the sender wakes every waiter.
        drop(self.lock().remove(session));
    }

    /// Waits (bounded) until `session`'s stream is open upstream, if it is expected.
    pub(super) async fn wait(&self, session: &str) {
        // Each round ends at a deadline or the signal; a `GET` arriving meanwhile moves the
        // deadline once (to OPENING), so three rounds are plenty.
        for _ in 0..3 {
            let (until, mut open) = {
                let table = self.lock();
                let Some(e) = table.get(session) else { return };
                let Some(until) = hold_until(Some(e.until), Instant::now()) else {
                    return;
                };
                (until, e.open.subscribe())
            };
            let deadline = tokio::time::Instant::from_std(until);
            if tokio::time::timeout_at(deadline, open.changed())
                .await
                .is_ok()
            {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_request_waits_only_before_the_deadline() {
        let now = Instant::now();
        assert_eq!(hold_until(None, now), None);
        assert_eq!(hold_until(Some(now), now), None);
        let later = now + EXPECT;
        assert_eq!(hold_until(Some(later), now), Some(later));
    }

    #[test]
    fn a_get_extends_the_wait_and_never_shortens_it() {
        let now = Instant::now();
        assert_eq!(opening_until(now + EXPECT, now), now + OPENING);
        let far = now + OPENING * 3;
        assert_eq!(opening_until(far, now), far);
    }

    #[test]
    fn requests_wait_notifications_and_answers_pass() {
        let msg = |body: &str| crate::mcp::inspect(body.as_bytes()).unwrap();
        let call = msg(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}"#);
        let init = msg(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        let note = msg(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#);
        let answer = msg(r#"{"jsonrpc":"2.0","id":0,"result":{}}"#);
        let post = http::Method::POST;
        assert_eq!(step(&post, Some(&call)), Step::Wait);
        assert_eq!(step(&post, Some(&init)), Step::Expect);
        assert_eq!(step(&post, Some(&note)), Step::Pass);
        assert_eq!(step(&post, Some(&answer)), Step::Pass);
        assert_eq!(step(&post, None), Step::Pass);
        assert_eq!(step(&http::Method::GET, None), Step::Open);
        assert_eq!(step(&http::Method::DELETE, None), Step::Pass);
    }

    #[tokio::test]
    async fn the_open_stream_releases_waiters_and_unknown_sessions_never_wait() {
        let gate = std::sync::Arc::new(StreamGate::default());
        let started = Instant::now();
        gate.wait("mcp:none").await;
        gate.expect("mcp:s".to_owned(), Instant::now());
        gate.opening("mcp:s", Instant::now());
        let waiter = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.wait("mcp:s").await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        gate.opened("mcp:s");
        waiter.await.unwrap();
        assert!(started.elapsed() < OPENING, "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn without_a_get_the_wait_ends_at_the_expect_deadline() {
        let gate = StreamGate::default();
        gate.expect("mcp:s".to_owned(), Instant::now());
        let started = Instant::now();
        gate.wait("mcp:s").await;
        let took = started.elapsed();
        assert!(
            took >= EXPECT - Duration::from_millis(5) && took < OPENING,
            "{took:?}"
        );
    }
}
