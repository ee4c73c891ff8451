//! Who created each task (SEP-2663), so that a task id presented by another principal, or on
//! another route, can be refused: a `tools/call` answered with a task (`resultType: "task"`)
//! records `task id → (principal, route, tool, instance)`; `tasks/get|update|cancel` are
//! admitted only for that principal on that route, with the scopes of that tool, and go to the
//! upstream instance that answered the call (a route with several `urls`). Kept where sessions
//! are: in redis when the gateway has one (every gateway then knows every task), else in the
//! data dir's `sessions.db` (`disk`), so that a restart keeps them; 24 h each. Task ids are
//! stored as their SHA-256 only.

mod disk;

use std::{sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use pforte_clock::Clock;

/// What the gateway remembers of one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TaskRecord {
    /// `kind:subject:client` of the principal whose call created it.
    pub(crate) owner: String,
    /// The route's name.
    pub(crate) route: String,
    /// The tool whose call created it.
    pub(crate) tool: String,
    /// The upstream instance (its URL, as configured) that answered the call, on a route with
    /// several; `None` otherwise (and in records written before instances were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) instance: Option<String>,
}

/// A caller's standing on a task id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Created by this principal on this route: its record.
    Owner(TaskRecord),
    /// Created by another principal, or on another route.
    Foreign,
    /// Never recorded (or expired).
    Unknown,
}

/// The standing of `owner` on `route` for a task whose record is `record`.
pub(crate) fn standing(record: Option<&TaskRecord>, owner: &str, route: &str) -> Standing {
    match record {
        None => Standing::Unknown,
        Some(r) if r.owner == owner && r.route == route => Standing::Owner(r.clone()),
        Some(_) => Standing::Foreign,
    }
}

/// Which instance of a route with several a task request goes to: the one that answered the
/// task's `tools/call` (`task`: the record's instance as `balance::route_session` found it, or
/// why it is gone), never another; in a session (`session`: the session's instance) only when
/// that is the same one. `None`: the task cannot be reached, and is answered as not found.
pub(crate) fn instance_for(
    task: Result<usize, crate::balance::Gone>,
    session: Option<usize>,
) -> Option<usize> {
    let held = task.ok()?;
    match session {
        Some(s) if s != held => None,
        _ => Some(held),
    }
}

/// The store could not answer; the gateway fails closed (503).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TaskError {
    #[error("task store unavailable: {0}")]
    Unavailable(String),
}

/// The largest body the gateway reads for a task id (a `CreateTaskResult` is small; a larger
/// answer is a plain result, passed on without being read).
pub(crate) const MAX_WATCHED: usize = 64 * 1024;

/// The task id a `tools/call` answer creates, if it is a `CreateTaskResult`: a JSON-RPC result
/// with `resultType: "task"` and `taskId` (SEP-2663), or the 2025-11-25 shape
/// `result.task.taskId`. `sse`: the answer is an event stream; its events' `data` are read.
pub(crate) fn created(body: &[u8], sse: bool) -> Option<String> {
    if !may_name_a_task(body) {
        return None;
    }
    if !sse {
        return created_in(body);
    }
    // The catalog's event-stream reader (the one SSE parser): each event's data, in order.
    let mut reader = crate::catalog::sse::EventReader::new(MAX_WATCHED);
    let events = reader.push(body).ok()?;
    let last = reader.finish().ok()?;
    events
        .iter()
        .chain(last.iter())
        .find_map(|data| created_in(data))
}

/// Whether `body` can hold a `taskId` member at all: the key spelled out, or written with
/// `\u` escapes (the only other way JSON spells letters; no key is split across an event's
/// `data:` lines, as a JSON string holds no raw line break). Most answers are plain results,
/// and this scan is what they cost instead of a parse.
fn may_name_a_task(body: &[u8]) -> bool {
    memchr::memmem::find(body, b"taskId").is_some() || memchr::memmem::find(body, b"\\u").is_some()
}

fn created_in(json: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Answer {
        result: Option<Created>,
    }
    #[derive(Deserialize)]
    struct Created {
        #[serde(rename = "resultType")]
        result_type: Option<String>,
        #[serde(rename = "taskId")]
        task_id: Option<String>,
        task: Option<Legacy>,
    }
    #[derive(Deserialize)]
    struct Legacy {
        #[serde(rename = "taskId")]
        task_id: String,
    }
    let result = serde_json::from_slice::<Answer>(json).ok()?.result?;
    match result {
        Created {
            result_type: Some(t),
            task_id: Some(id),
            ..
        } if t == "task" => Some(id),
        Created {
            result_type: None,
            task: Some(legacy),
            ..
        } => Some(legacy.task_id),
        _ => None,
    }
}

type Key = [u8; 32];

fn key(task_id: &str) -> Key {
    Sha256::digest(task_id.as_bytes()).into()
}

/// The task records. Share it as `Arc<Tasks>`.
#[derive(Debug)]
pub(crate) struct Tasks {
    backend: Backend,
    ttl: Duration,
}

enum Backend {
    /// In the `tasks` table of `sessions.db`.
    Embedded {
        disk: disk::Disk,
        clock: Arc<dyn Clock>,
        max_entries: usize,
    },
    Redis {
        conn: pforte_redis::Redis,
        prefix: String,
    },
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Embedded { .. } => f.write_str("Embedded"),
            Self::Redis { prefix, .. } => write!(f, "Redis({prefix})"),
        }
    }
}

fn unavailable(e: impl std::fmt::Display) -> TaskError {
    TaskError::Unavailable(e.to_string())
}

impl Tasks {
    /// In the SQLite database at `path` (the data dir's `sessions.db`, created owner-only) on
    /// `clock`: at most `max_entries` records, each for `ttl`; the expired ones are swept now
    /// and on every write. Blocking.
    pub(crate) fn embedded(
        path: &std::path::Path,
        clock: Arc<dyn Clock>,
        ttl: Duration,
        max_entries: usize,
    ) -> Result<Self, TaskError> {
        Ok(Self {
            backend: Backend::Embedded {
                disk: disk::Disk::open(path, clock.now_ms())?,
                clock,
                max_entries,
            },
            ttl,
        })
    }

    /// In redis under `<prefix>task:<sha256 hex>` (`EX` ttl, redis's clock). Connects lazily;
    /// call inside the runtime that drives the connection.
    pub(crate) fn redis(url: &str, prefix: &str, ttl: Duration) -> Result<Self, TaskError> {
        Ok(Self {
            backend: Backend::Redis {
                conn: pforte_redis::Redis::open(url).map_err(unavailable)?,
                prefix: prefix.to_owned(),
            },
            ttl,
        })
    }

    /// Records `task_id` as created by `record` (the first record wins: a task id the upstream
    /// gave twice stays with its first owner).
    pub(crate) async fn record(&self, task_id: &str, record: &TaskRecord) -> Result<(), TaskError> {
        match &self.backend {
            Backend::Embedded {
                disk,
                clock,
                max_entries,
            } => {
                let (disk, key, record, max) =
                    (disk.clone(), key(task_id), record.clone(), *max_entries);
                let now = clock.now_ms();
                let until = now.saturating_add(self.ttl.as_millis() as u64);
                tokio::task::spawn_blocking(move || disk.insert(&key, &record, until, now, max))
                    .await
                    .map_err(unavailable)?
            }
            Backend::Redis { conn, prefix } => {
                let value = serde_json::to_string(record).map_err(unavailable)?;
                let mut c = conn.clone();
                let _: Option<String> = redis::cmd("SET")
                    .arg(redis_key(prefix, task_id))
                    .arg(value)
                    .arg("NX")
                    .arg("EX")
                    .arg(self.ttl.as_secs().max(1))
                    .query_async(&mut c)
                    .await
                    .map_err(unavailable)?;
                Ok(())
            }
        }
    }

    /// The record of `task_id`, if the gateway saw its creation (and it has not expired).
    pub(crate) async fn get(&self, task_id: &str) -> Result<Option<TaskRecord>, TaskError> {
        match &self.backend {
            Backend::Embedded { disk, clock, .. } => {
                let (disk, key, now) = (disk.clone(), key(task_id), clock.now_ms());
                tokio::task::spawn_blocking(move || disk.get(&key, now))
                    .await
                    .map_err(unavailable)?
            }
            Backend::Redis { conn, prefix } => {
                let mut c = conn.clone();
                let value: Option<String> = redis::cmd("GET")
                    .arg(redis_key(prefix, task_id))
                    .query_async(&mut c)
                    .await
                    .map_err(unavailable)?;
                value
                    .map(|v| serde_json::from_str(&v).map_err(unavailable))
                    .transpose()
            }
        }
    }
}

fn redis_key(prefix: &str, task_id: &str) -> String {
    format!("{prefix}task:{}", hex::encode(key(task_id)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_task_answer_names_its_task() {
        let json = br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"t-1","status":"working"}}"#;
        assert_eq!(created(json, false).as_deref(), Some("t-1"));
        let legacy =
            br#"{"jsonrpc":"2.0","id":1,"result":{"task":{"taskId":"t-2","status":"working"}}}"#;
        assert_eq!(created(legacy, false).as_deref(), Some("t-2"));
        let plain = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"taskId":"x"}}"#;
        assert_eq!(created(plain, false), None);
        let complete =
            br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[]}}"#;
        assert_eq!(created(complete, false), None);
        let sse = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":\"task\",\"taskId\":\"t-3\"}}\n\n";
        assert_eq!(created(sse, true).as_deref(), Some("t-3"));
        assert_eq!(created(b"not json", false), None);
        // The key written with escapes is still read.
        let escaped =
            br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","task\u0049d":"t-4"}}"#;
        assert_eq!(created(escaped, false).as_deref(), Some("t-4"));
    }

    #[test]
    fn a_task_belongs_to_its_creator_on_its_route() {
        let r = TaskRecord {
            owner: "token:a:".into(),
            route: "svc".into(),
            tool: "slow".into(),
            instance: None,
        };
        assert_eq!(
            standing(Some(&r), "token:a:", "svc"),
            Standing::Owner(r.clone())
        );
        assert_eq!(standing(Some(&r), "token:b:", "svc"), Standing::Foreign);
        assert_eq!(standing(Some(&r), "token:a:", "other"), Standing::Foreign);
        assert_eq!(standing(None, "token:a:", "svc"), Standing::Unknown);
    }

    #[test]
    fn a_task_request_goes_to_the_instance_that_holds_the_task_or_nowhere() {
        use crate::balance::Gone;
        assert_eq!(instance_for(Ok(1), None), Some(1));
        assert_eq!(instance_for(Ok(1), Some(1)), Some(1));
        // In a session on another instance: that one does not hold the task.
        assert_eq!(instance_for(Ok(1), Some(0)), None);
        for gone in [Gone::Down, Gone::Removed, Gone::Unrecorded] {
            assert_eq!(instance_for(Err(gone), None), None);
            assert_eq!(instance_for(Err(gone), Some(0)), None);
        }
    }

    #[tokio::test]
    async fn embedded_records_outlive_their_process_expire_and_keep_their_first_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let clock = Arc::new(pforte_clock::ManualClock::at(Duration::from_secs(1)));
        let ttl = Duration::from_secs(10);
        let a = TaskRecord {
            owner: "a".into(),
            route: "r".into(),
            tool: "t".into(),
            instance: Some("http://127.0.0.1:9002/mcp".into()),
        };
        let b = TaskRecord {
            owner: "b".into(),
            instance: None,
            ..a.clone()
        };
        {
            let tasks = Tasks::embedded(&path, clock.clone(), ttl, 2).unwrap();
            tasks.record("t-1", &a).await.unwrap();
            tasks.record("t-1", &b).await.unwrap();
        }
        // Another process on the same file.
        let tasks = Tasks::embedded(&path, clock.clone(), ttl, 2).unwrap();
        assert_eq!(tasks.get("t-1").await.unwrap(), Some(a.clone()));
        assert_eq!(tasks.get("t-2").await.unwrap(), None);
        // At the cap the record expiring first goes.
        clock.advance(Duration::from_secs(1));
        tasks.record("t-2", &b).await.unwrap();
        clock.advance(Duration::from_secs(1));
        tasks.record("t-3", &b).await.unwrap();
        assert_eq!(tasks.get("t-1").await.unwrap(), None);
        assert_eq!(tasks.get("t-2").await.unwrap(), Some(b.clone()));
        clock.advance(Duration::from_secs(10));
        assert_eq!(tasks.get("t-3").await.unwrap(), None);
        // Expired rows are swept: a new record under an expired id is the new creator's.
        tasks.record("t-2", &a).await.unwrap();
        assert_eq!(tasks.get("t-2").await.unwrap(), Some(a));
    }

    #[tokio::test]
    async fn every_gateway_on_one_redis_knows_the_creator() {
        let Some(redis) = pforte_test_support::RedisServer::start() else {
            return;
        };
        let one = Tasks::redis(&redis.url(), "t:", Duration::from_secs(100)).unwrap();
        let two = Tasks::redis(&redis.url(), "t:", Duration::from_secs(100)).unwrap();
        let a = TaskRecord {
            owner: "static:operator:a".into(),
            route: "svc".into(),
            tool: "slow".into(),
            instance: Some("http://127.0.0.1:9001/mcp".into()),
        };
        assert_eq!(two.get("t-1").await.unwrap(), None);
        one.record("t-1", &a).await.unwrap();
        let other = TaskRecord {
            owner: "static:operator:b".into(),
            ..a.clone()
        };
        two.record("t-1", &other).await.unwrap();
        assert_eq!(two.get("t-1").await.unwrap(), Some(a));
    }
}
