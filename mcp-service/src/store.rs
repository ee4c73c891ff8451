//! Durable Werkbaum documents: the record types, the `Store` trait with its atomic
//! compare-and-set write, and the embedded (SQLite) and shared (redis) backends.
//!
//! A store never computes anything about a plan: it keeps the text, the version, the checksum
//! and the history rows it is given. Every write is a single trait call that lands whole —
//! document row and history row together — or not at all.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub(crate) mod redis;
pub(crate) mod sqlite;
#[cfg(test)]
mod suite;

pub(crate) use self::redis::RedisStore;
pub use self::sqlite::SqliteStore;

/// A stored document at one version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Document {
    pub uuid: String,
    pub title: String,
    pub text: String,
    /// 1 for a new document, +1 per write.
    pub version: u64,
    /// SHA-256 hex of the UTF-8 text.
    pub checksum: String,
    /// Unix milliseconds of the last write.
    pub updated_at: u64,
}

/// A document without its text, for listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentSummary {
    pub uuid: String,
    pub title: String,
    pub version: u64,
    pub checksum: String,
    pub updated_at: u64,
}

impl From<&Document> for DocumentSummary {
    fn from(d: &Document) -> Self {
        Self {
            uuid: d.uuid.clone(),
            title: d.title.clone(),
            version: d.version,
            checksum: d.checksum.clone(),
            updated_at: d.updated_at,
        }
    }
}

/// One version in a document's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub version: u64,
    /// Unix milliseconds.
    pub time: u64,
    /// Display name: `<host> · <user>` (e.g. `Claude Code · alice`).
    pub author: String,
    /// The MCP host from the handshake's `clientInfo.name` (`Agent` when absent).
    pub host: String,
    /// The gateway's subject (the person or the operator), when known.
    pub user: Option<String>,
    /// The gateway's client id (OAuth client or static token name), when known.
    pub client_id: Option<String>,
    /// What the write did, one line (`set_status #login [x]`).
    pub subject: String,
    /// The line operations from the previous version's text to this version's text
    /// (the core's `computeOps` format).
    pub ops: serde_json::Value,
    /// SHA-256 hex of this version's text.
    pub checksum: String,
}

/// A document at its new version with the history entry that records the change: what
/// `create` and `write` store together.
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    pub doc: &'a Document,
    pub entry: &'a HistoryEntry,
}

/// Which history entries to read: of document `uuid`, at most `limit`, with a version greater
/// than `since` (from the first when `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryPage<'a> {
    pub uuid: &'a str,
    pub since: Option<u64>,
    pub limit: usize,
}

/// The outcome of a compare-and-set write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written; the document as it now is.
    Written(Document),
    /// The stored version was not the base; nothing was written. The current document.
    Conflict(Document),
    /// No such document.
    NotFound,
}

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("document store unavailable: {0}")]
    Unavailable(String),
    #[error("document store holds unreadable data: {0}")]
    Corrupt(String),
    #[error("a document with uuid {0} exists already")]
    Exists(String),
    /// The store holds its configured maximum of documents; nothing was created.
    #[error(
        "this server holds its limit of {0} documents; delete or reuse one before creating another"
    )]
    Full(u64),
}

pub(crate) type StoreResult<T> = Result<T, StoreError>;

/// Durable documents. Implementations are shared between sessions (and, for redis, between
/// replicas); `write` must be atomic with respect to every other `write` on the same document.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Stores a new document (version 1) with its first history entry, unless the store holds
    /// `max_documents` already (`Full`); the count and the insert are one atomic step.
    async fn create(&self, change: Change<'_>, max_documents: u64) -> StoreResult<()>;
    async fn get(&self, uuid: &str) -> StoreResult<Option<Document>>;
    /// All documents, ordered by title then uuid.
    async fn list(&self) -> StoreResult<Vec<DocumentSummary>>;
    /// Replaces the document with `next.doc` (whose version must be `base_version + 1`) and
    /// appends `next.entry`, only if the stored version is still `base_version`.
    async fn write(&self, base_version: u64, next: Change<'_>) -> StoreResult<WriteOutcome>;
    /// The page's history entries, oldest first; `None` when the document does not exist.
    async fn history(&self, page: HistoryPage<'_>) -> StoreResult<Option<Vec<HistoryEntry>>>;
}
