//! Keeping the catalog fresh: the refresh loop with backoff, and the GET stream held open on
//! the catalog's session (a refresh on `notifications/tools/list_changed` and every `ttl`;
//! dropped after `stream_idle` without a byte or at a line or event past `max_answer_bytes`).

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use serde_json::Value;
use tokio::sync::watch;

use super::{
    Catalog, CatalogError, PROTOCOL_HEADER, PROTOCOL_VERSION, SESSION_HEADER, changes, sse,
};

/// Whether an SSE event's data is `notifications/tools/list_changed`.
pub(super) fn is_list_changed(data: &[u8]) -> bool {
    serde_json::from_slice::<Value>(data).is_ok_and(|v| {
        v.get("method").and_then(Value::as_str) == Some("notifications/tools/list_changed")
    })
}

/// How following the GET stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Follow {
    Dropped { lasted: Duration },
}

/// Resolves once `shutdown` is true; never without a watch.
async fn stopped(shutdown: &mut Option<watch::Receiver<bool>>) {
    match shutdown {
        Some(rx) => {
            let _ = rx.wait_for(|stop| *stop).await;
        }
        None => std::future::pending().await,
    }
}

impl Catalog {
    /// Keeps the catalog fresh until `shutdown` turns true (or forever without one): refresh at
    /// start with backoff until the upstream answers, then every `ttl`; a GET stream held open
    /// on the catalog's session triggers a refresh on `notifications/tools/list_changed`; when
    /// the stream drops (or the session is gone) the session is initialised again.
    pub async fn run(self: Arc<Self>, mut shutdown: Option<watch::Receiver<bool>>) {
        if let Ok(mut rt) = self.runtime.lock() {
            *rt = tokio::runtime::Handle::try_current().ok();
        }
        let mut backoff = self.opts.backoff_min;
        loop {
            let refreshed = self.refresh().await;
            if let Err(CatalogError::NoLender) = refreshed {
                // Nobody to borrow from: again when someone connects here, or after a ttl
                // (someone may connect through another gateway).
                tokio::select! {
                    () = self.wake.notified() => {}
                    () = tokio::time::sleep(self.opts.ttl) => {}
                    () = stopped(&mut shutdown) => return,
                }
                backoff = self.opts.backoff_min;
                continue;
            }
            if refreshed.is_ok() {
                let follow = tokio::select! {
                    follow = self.follow() => follow,
                    () = stopped(&mut shutdown) => return,
                };
                match follow {
                    // The stream ran for a while: the upstream is healthy.
                    Follow::Dropped { lasted } if lasted >= self.opts.backoff_max => {
                        backoff = self.opts.backoff_min;
                    }
                    Follow::Dropped { .. } => {}
                }
            }
            if !self.pause(backoff, &mut shutdown).await {
                return;
            }
            backoff = (backoff * 2).min(self.opts.backoff_max);
        }
    }

    /// Sleeps `d` unless shutdown comes first (then `false`).
    async fn pause(&self, d: Duration, shutdown: &mut Option<watch::Receiver<bool>>) -> bool {
        tokio::select! {
            () = tokio::time::sleep(d) => true,
            () = stopped(shutdown) => false,
        }
    }

    /// Holds the GET stream of the catalog's session open, refreshing on `list_changed` and
    /// every `ttl`, until the stream drops (then the session is forgotten, so that the next
    /// refresh initialises a new one) or a refresh had to open a new session. Without a stream
    /// on this upstream (GET answered 405), it refreshes every `ttl` for ever; another refusal
    /// is retried after a `ttl`.
    async fn follow(&self) -> Follow {
        let started = tokio::time::Instant::now();
        let mut tick = tokio::time::interval_at(started + self.opts.ttl, self.opts.ttl);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let Some(session) = self.session() else {
            if self.stateless.load(Ordering::Acquire) {
                // A stateless upstream (no session, so no stream): a refresh every ttl.
                loop {
                    tick.tick().await;
                    if self.refresh().await.is_err() {
                        return Follow::Dropped {
                            lasted: started.elapsed(),
                        };
                    }
                }
            }
            return Follow::Dropped {
                lasted: Duration::ZERO,
            };
        };
        let dropped = |this: &Self| {
            this.forget_session(&session);
            Follow::Dropped {
                lasted: started.elapsed(),
            }
        };
        let Ok(get) = self.http.request(http::Method::GET, &self.target) else {
            return dropped(self);
        };
        let request = self.headers(
            get.header(reqwest::header::ACCEPT, "text/event-stream")
                .header(SESSION_HEADER, &session)
                .header(PROTOCOL_HEADER, PROTOCOL_VERSION),
        );
        let mut response = match request.send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) if r.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED => {
                // No server-initiated stream on this upstream: the periodic refresh remains.
                tracing::debug!("catalog: the upstream offers no GET stream");
                loop {
                    tick.tick().await;
                    let _ = self.refresh().await;
                }
            }
            Ok(r) if r.status() != reqwest::StatusCode::NOT_FOUND => {
                // Some other refusal: try the stream again after a ttl (`run` refreshes then).
                tracing::debug!(status = %r.status(), "catalog: GET stream refused");
                tick.tick().await;
                return Follow::Dropped {
                    lasted: started.elapsed(),
                };
            }
            _ => return dropped(self),
        };
        let mut reader = sse::EventReader::new(self.opts.max_answer_bytes);
        loop {
            tokio::select! {
                chunk = tokio::time::timeout(self.opts.stream_idle, response.chunk()) => match chunk {
                    Ok(Ok(Some(chunk))) => {
                        let events = match reader.push(&chunk) {
                            Ok(events) => events,
                            Err(e) => {
                                tracing::warn!(upstream = %self.url, error = %e, "catalog: GET stream dropped");
                                return dropped(self);
                            }
                        };
                        for data in &events {
                            self.answer(&session, data).await;
                            if let Some(list) = changes::announced(data) {
                                self.note_change(list);
                            }
                        }
                        if events.iter().any(|d| is_list_changed(d)) {
                            let _ = self.refresh().await;
                        }
                    }
                    Ok(Ok(None) | Err(_)) => return dropped(self),
                    Err(_) => {
                        tracing::debug!(upstream = %self.url, "catalog: GET stream idle, dropped");
                        return dropped(self);
                    }
                },
                _ = tick.tick() => {
                    let _ = self.refresh().await;
                    if self.session().as_deref() != Some(session.as_str()) {
                        // The refresh needed a new session: this stream belongs to the old one.
                        return Follow::Dropped { lasted: started.elapsed() };
                    }
                }
            }
        }
    }
}
