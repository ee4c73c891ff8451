//! The shared document store on redis, for several mcp-service replicas: compare-and-set and
//! create are Lua scripts, so the version check, the document update and the history append
//! happen atomically on the server.
//!
//! Layout under a key prefix (default `pforte:werkbaum:`): `doc:<uuid>` is a hash (`title`,
//! `text`, `version`, `checksum`, `updated_at`), `history:<uuid>` a list of JSON history
//! entries (oldest first, index = version - 1), `docs` the set of uuids. Durability is redis'
//! own (configure `appendonly yes` / `appendfsync always` for the "nothing is lost" promise).

use std::collections::HashMap;

use async_trait::async_trait;
use redis::{AsyncCommands, Script};

use super::{
    Change, Document, DocumentSummary, HistoryEntry, HistoryPage, Store, StoreError, StoreResult,
    WriteOutcome,
};

/// The key prefix unless configured otherwise.
pub(crate) const DEFAULT_PREFIX: &str = "pforte:werkbaum:";

// KEYS: doc, history, docs. ARGV: uuid, title, text, version, checksum, updated_at, entry,
// max documents.
const CREATE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('SCARD', KEYS[3]) >= tonumber(ARGV[8]) then return -1 end
redis.call('HSET', KEYS[1], 'title', ARGV[2], 'text', ARGV[3], 'version', ARGV[4],
  'checksum', ARGV[5], 'updated_at', ARGV[6])
redis.call('DEL', KEYS[2])
redis.call('RPUSH', KEYS[2], ARGV[7])
redis.call('SADD', KEYS[3], ARGV[1])
return 1";

// KEYS: doc, history. ARGV: base version, title, text, version, checksum, updated_at, entry.
const WRITE: &str = r"
local v = redis.call('HGET', KEYS[1], 'version')
if not v then return 'missing' end
if v ~= ARGV[1] then return 'conflict' end
redis.call('HSET', KEYS[1], 'title', ARGV[2], 'text', ARGV[3], 'version', ARGV[4],
  'checksum', ARGV[5], 'updated_at', ARGV[6])
redis.call('RPUSH', KEYS[2], ARGV[7])
return 'ok'";

/// redis-backed [`Store`].
#[derive(Clone)]
pub(crate) struct RedisStore {
    conn: pforte_redis::Redis,
    prefix: String,
    create: Script,
    write: Script,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis: {e}"))
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(format!("redis: {what}"))
}

impl RedisStore {
    /// A store on the redis at `url` (e.g. `redis://127.0.0.1:6379/0`), keys under `prefix`.
    /// Connects lazily; every call fails fast with `Unavailable` while redis is down.
    pub(crate) fn connect(url: &str, prefix: &str) -> StoreResult<Self> {
        let conn = pforte_redis::Redis::open(url).map_err(unavailable)?;
        Ok(Self {
            conn,
            prefix: prefix.to_owned(),
            create: Script::new(CREATE),
            write: Script::new(WRITE),
        })
    }

    fn doc_key(&self, uuid: &str) -> String {
        format!("{}doc:{uuid}", self.prefix)
    }

    fn history_key(&self, uuid: &str) -> String {
        format!("{}history:{uuid}", self.prefix)
    }

    fn docs_key(&self) -> String {
        format!("{}docs", self.prefix)
    }

    fn c(&self) -> pforte_redis::Redis {
        self.conn.clone()
    }
}

fn field(map: &mut HashMap<String, String>, name: &str) -> StoreResult<String> {
    map.remove(name)
        .ok_or_else(|| corrupt(&format!("document hash lacks {name}")))
}

fn number(map: &mut HashMap<String, String>, name: &str) -> StoreResult<u64> {
    field(map, name)?
        .parse()
        .map_err(|_| corrupt(&format!("{name} is not a number")))
}

fn to_doc(uuid: &str, mut map: HashMap<String, String>) -> StoreResult<Option<Document>> {
    if map.is_empty() {
        return Ok(None);
    }
    Ok(Some(Document {
        uuid: uuid.to_owned(),
        title: field(&mut map, "title")?,
        text: field(&mut map, "text")?,
        version: number(&mut map, "version")?,
        checksum: field(&mut map, "checksum")?,
        updated_at: number(&mut map, "updated_at")?,
    }))
}

fn entry_json(entry: &HistoryEntry) -> StoreResult<String> {
    serde_json::to_string(entry).map_err(|e| StoreError::Corrupt(e.to_string()))
}

#[async_trait]
impl Store for RedisStore {
    async fn create(&self, change: Change<'_>, max_documents: u64) -> StoreResult<()> {
        let (doc, entry) = (change.doc, change.entry);
        let created: i64 = self
            .create
            .key(self.doc_key(&doc.uuid))
            .key(self.history_key(&doc.uuid))
            .key(self.docs_key())
            .arg(&doc.uuid)
            .arg(&doc.title)
            .arg(&doc.text)
            .arg(doc.version)
            .arg(&doc.checksum)
            .arg(doc.updated_at)
            .arg(entry_json(entry)?)
            .arg(max_documents)
            .invoke_async(&mut self.c())
            .await
            .map_err(unavailable)?;
        match created {
            1 => Ok(()),
            -1 => Err(StoreError::Full(max_documents)),
            _ => Err(StoreError::Exists(doc.uuid.clone())),
        }
    }

    async fn get(&self, uuid: &str) -> StoreResult<Option<Document>> {
        let map: HashMap<String, String> = self
            .c()
            .hgetall(self.doc_key(uuid))
            .await
            .map_err(unavailable)?;
        to_doc(uuid, map)
    }

    async fn list(&self) -> StoreResult<Vec<DocumentSummary>> {
        let uuids: Vec<String> = self
            .c()
            .smembers(self.docs_key())
            .await
            .map_err(unavailable)?;
        let mut out = Vec::with_capacity(uuids.len());
        for uuid in uuids {
            let fields: (Option<String>, Option<u64>, Option<String>, Option<u64>) =
                redis::cmd("HMGET")
                    .arg(self.doc_key(&uuid))
                    .arg(&["title", "version", "checksum", "updated_at"])
                    .query_async(&mut self.c())
                    .await
                    .map_err(unavailable)?;
            if let (Some(title), Some(version), Some(checksum), Some(updated_at)) = fields {
                out.push(DocumentSummary {
                    uuid,
                    title,
                    version,
                    checksum,
                    updated_at,
                });
            }
        }
        out.sort_by(|a, b| a.title.cmp(&b.title).then_with(|| a.uuid.cmp(&b.uuid)));
        Ok(out)
    }

    async fn write(&self, base_version: u64, change: Change<'_>) -> StoreResult<WriteOutcome> {
        let (next, entry) = (change.doc, change.entry);
        let outcome: String = self
            .write
            .key(self.doc_key(&next.uuid))
            .key(self.history_key(&next.uuid))
            .arg(base_version)
            .arg(&next.title)
            .arg(&next.text)
            .arg(next.version)
            .arg(&next.checksum)
            .arg(next.updated_at)
            .arg(entry_json(entry)?)
            .invoke_async(&mut self.c())
            .await
            .map_err(unavailable)?;
        match outcome.as_str() {
            "ok" => Ok(WriteOutcome::Written(next.clone())),
            "conflict" => Ok(self
                .get(&next.uuid)
                .await?
                .map_or(WriteOutcome::NotFound, WriteOutcome::Conflict)),
            _ => Ok(WriteOutcome::NotFound),
        }
    }

    async fn history(&self, page: HistoryPage<'_>) -> StoreResult<Option<Vec<HistoryEntry>>> {
        let HistoryPage { uuid, since, limit } = page;
        let mut c = self.c();
        if limit == 0 {
            return Ok(Some(Vec::new()));
        }
        let exists: bool = c.exists(self.doc_key(uuid)).await.map_err(unavailable)?;
        if !exists {
            return Ok(None);
        }
        let start = isize::try_from(since.unwrap_or(0)).unwrap_or(isize::MAX);
        let stop = start.saturating_add(isize::try_from(limit).unwrap_or(isize::MAX) - 1);
        let rows: Vec<String> = c
            .lrange(self.history_key(uuid), start, stop)
            .await
            .map_err(unavailable)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let entry: HistoryEntry =
                serde_json::from_str(&row).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            // The list index is version - 1; filter anyway so a gap can never mislead.
            if entry.version > since.unwrap_or(0) {
                out.push(entry);
            }
        }
        Ok(Some(out))
    }
}
