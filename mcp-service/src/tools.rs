//! What the Werkbaum tools do, as plain async functions on a [`Planner`]: resolve the plan
//! (`text` or `document`), call the core through the engine, apply the guard rails from the
//! core's `check`, compare-and-set into the store, and stamp every answer with the revision it
//! was computed from. The MCP handlers in `server` only parse arguments and call these.
//!
//! Plan semantics come from the core only: this module never looks inside a plan's text except
//! to hash it, measure it and compare it for equality.
//!
//! By concern: `input` (arguments and their schemas), `schema` (the published input schemas,
//! closed and compact), `answer` (typed answers, which derive each tool's `outputSchema`),
//! `edit` (the edits, computed by the core), `render` (the text renderings) and `error` (the
//! one place failures become tool errors).

pub(crate) mod answer;
mod edit;
pub(crate) mod error;
pub(crate) mod input;
pub(crate) mod render;
pub(crate) mod schema;

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use pforte_clock::{Clock, UtcDateTime};

use crate::engine::Engine;
use crate::ids::Ids;
use crate::store::{
    Change, Document, DocumentSummary, HistoryEntry, HistoryPage, Store, WriteOutcome,
};
use answer::{
    CheckAnswer, CreateAnswer, EditAnswer, Finding, HistoryAnswer, HistoryItem, InspectAnswer,
    Notice, PathInfo, ReadAnswer, Revision, Summary, Warning, to_value,
};
pub use edit::Edit;
use edit::compute_ops;
pub use error::ToolError;
use input::{
    Allow, Base, CheckInput, CreateInput, HistoryInput, InspectInput, Source, WriteCommon,
};
use render::{
    blocking_summary, render_findings, render_inspect, render_notices, revision_line, summary_line,
};

/// The URI of a document resource.
pub(crate) fn doc_uri(uuid: &str) -> String {
    format!("werkbaum://doc/{uuid}")
}

/// The URI template of document resources.
pub(crate) const DOC_URI_TEMPLATE: &str = "werkbaum://doc/{uuid}";

/// SHA-256 hex of the UTF-8 text.
pub(crate) fn checksum(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Who is writing: the MCP host from the handshake and the gateway's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// `clientInfo.name`, or `Agent` when the host sent none.
    pub host: String,
    pub user: Option<String>,
    pub client_id: Option<String>,
}

impl Caller {
    pub fn new(host: Option<&str>, user: Option<&str>, client_id: Option<&str>) -> Self {
        let host = host
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .unwrap_or("Agent");
        Self {
            host: host.to_owned(),
            user: user.map(str::to_owned),
            client_id: client_id.map(str::to_owned),
        }
    }

    /// `Claude Code · alice`, or just the host when the user is unknown.
    pub fn author(&self) -> String {
        match &self.user {
            Some(user) => format!("{} · {user}", self.host),
            None => self.host.clone(),
        }
    }
}

/// A tool's answer: `structuredContent` (a typed answer from `answer`, serialized) plus a text
/// rendering.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub structured: Value,
    pub text: String,
}

impl Answer {
    fn new<T: serde::Serialize>(answer: &T, text: String) -> Self {
        Self {
            structured: to_value(answer),
            text,
        }
    }
}

/// A part of the core's answer as a typed value; a mismatch is an engine failure.
fn typed<T: serde::de::DeserializeOwned>(v: &Value, key: &str) -> Result<T, ToolError> {
    serde_json::from_value(v.get(key).cloned().unwrap_or(Value::Null)).map_err(|e| {
        ToolError::Engine(crate::engine::EngineError::Engine(format!(
            "the core's {key} does not have the documented shape: {e}"
        )))
    })
}

/// A resolved plan: a text the agent sent or a stored document.
#[derive(Debug, Clone)]
enum Loaded {
    Text { text: String, checksum: String },
    Doc(Document),
}

impl Loaded {
    fn text(&self) -> &str {
        match self {
            Loaded::Text { text, .. } => text,
            Loaded::Doc(d) => &d.text,
        }
    }

    /// The stamp: `{checksum}` for a text, `{document, version, checksum}` for a document.
    fn revision(&self) -> Revision {
        match self {
            Loaded::Text { checksum, .. } => Revision {
                document: None,
                version: None,
                checksum: checksum.clone(),
            },
            Loaded::Doc(d) => revision_of(d),
        }
    }
}

fn revision_of(d: &Document) -> Revision {
    Revision {
        document: Some(d.uuid.clone()),
        version: Some(d.version),
        checksum: d.checksum.clone(),
    }
}

/// The guard rails' verdict on an edited text.
struct Verdict {
    findings: Vec<Finding>,
    blocking: bool,
}

/// The bounds a planner keeps (from the service's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Most documents the store may hold; `werkbaum_create` refuses one more.
    pub max_documents: u64,
    /// `werkbaum_history` entries per page when the call names no `limit`.
    pub history_page: usize,
    /// The largest `limit` a `werkbaum_history` call may name.
    pub history_page_max: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_documents: 10_000,
            history_page: 20,
            history_page_max: crate::config::HISTORY_PAGE_CEILING,
        }
    }
}

impl Bounds {
    /// The bounds of a configured service.
    pub fn of(cfg: &crate::config::ServiceConfig) -> Self {
        Self {
            max_documents: cfg.max_documents,
            history_page: cfg.history_page,
            history_page_max: cfg.history_page_max,
        }
    }

    /// The page size for a history call's `limit`: the default when absent, refused outside
    /// `1..=history_page_max`.
    pub fn history_limit(&self, requested: Option<u64>) -> Result<usize, ToolError> {
        let Some(requested) = requested else {
            return Ok(self.history_page);
        };
        usize::try_from(requested)
            .ok()
            .filter(|n| (1..=self.history_page_max).contains(n))
            .ok_or_else(|| {
                ToolError::InvalidInput(format!(
                    "`limit` must be 1..={} (got {requested}); page through longer histories \
                     with `since` = the answer's `next`",
                    self.history_page_max
                ))
            })
    }
}

/// The service's plan operations over an engine and a store.
pub struct Planner {
    engine: Engine,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn Ids>,
    max_text_bytes: usize,
    bounds: Bounds,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("max_text_bytes", &self.max_text_bytes)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

impl Planner {
    pub fn new(
        engine: Engine,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn Ids>,
        max_text_bytes: usize,
    ) -> Self {
        Self {
            engine,
            store,
            clock,
            ids,
            max_text_bytes,
            bounds: Bounds::default(),
        }
    }

    /// The same planner with other bounds.
    pub fn with_bounds(mut self, bounds: Bounds) -> Self {
        self.bounds = bounds;
        self
    }

    fn cap(&self, what: &'static str, text: &str) -> Result<(), ToolError> {
        if text.len() > self.max_text_bytes {
            return Err(ToolError::TooLarge {
                what,
                bytes: text.len(),
                limit: self.max_text_bytes,
            });
        }
        Ok(())
    }

    /// A stored document, or `UnknownDocument`.
    pub async fn document(&self, uuid: &str) -> Result<Document, ToolError> {
        self.store
            .get(uuid)
            .await?
            .ok_or_else(|| ToolError::UnknownDocument(uuid.to_owned()))
    }

    pub async fn list_documents(&self) -> Result<Vec<DocumentSummary>, ToolError> {
        Ok(self.store.list().await?)
    }

    async fn load(&self, source: Source) -> Result<Loaded, ToolError> {
        match (source.text, source.document) {
            (Some(_), Some(_)) => Err(ToolError::InvalidInput(
                "give either `text` (a plan you read yourself) or `document` (a uuid of this \
                 server), not both"
                    .to_owned(),
            )),
            (None, None) => Err(ToolError::InvalidInput(
                "give `text` (a plan you read yourself) or `document` (a uuid of this server); \
                 neither was given"
                    .to_owned(),
            )),
            (Some(text), None) => {
                self.cap("text", &text)?;
                let checksum = checksum(&text);
                Ok(Loaded::Text { text, checksum })
            }
            (None, Some(uuid)) => Ok(Loaded::Doc(self.document(&uuid).await?)),
        }
    }

    async fn summary(&self, text: &str) -> Result<Summary, ToolError> {
        let r = self
            .engine
            .call("inspect", json!({"text": text, "include": []}))
            .await?;
        typed(&r, "summary")
    }

    /// `werkbaum_read`: the text with its revision and the core's summary figures.
    pub async fn read(&self, source: Source) -> Result<Answer, ToolError> {
        let loaded = self.load(source).await?;
        let summary = self.summary(loaded.text()).await?;
        let revision = loaded.revision();
        let mut text = String::new();
        let (title, uri) = match &loaded {
            Loaded::Doc(d) => {
                let _ = writeln!(text, "\"{}\"", d.title);
                (Some(d.title.clone()), Some(doc_uri(&d.uuid)))
            }
            Loaded::Text { .. } => (None, None),
        };
        let answer = ReadAnswer {
            revision,
            summary,
            text: loaded.text().to_owned(),
            title,
            uri,
        };
        let _ = writeln!(
            text,
            "{}\nsummary: {}\n-----\n{}",
            revision_line(&answer.revision),
            summary_line(&to_value(&answer.summary)),
            loaded.text()
        );
        Ok(Answer::new(&answer, text))
    }

    /// `werkbaum_inspect`: the core's tree, warnings and cheapest path, and its notices.
    pub async fn inspect(&self, input: InspectInput) -> Result<Answer, ToolError> {
        let loaded = self.load(input.source).await?;
        let mut params = json!({ "text": loaded.text() });
        if let Some(id) = &input.id {
            params["id"] = id.to_json();
        }
        if let Some(include) = &input.include {
            params["include"] = json!(include);
        }
        let mut result = self.engine.call("inspect", params).await?;
        let revision = loaded.revision();
        let text = render_inspect(&result, &revision);
        let answer = InspectAnswer {
            revision,
            summary: typed(&result, "summary")?,
            tree: result.get_mut("tree").map(Value::take),
            warnings: typed::<Option<Vec<Warning>>>(&result, "warnings")?,
            path: typed::<Option<PathInfo>>(&result, "path")?,
            notices: typed::<Option<Vec<Notice>>>(&result, "notices")?.unwrap_or_default(),
        };
        Ok(Answer::new(&answer, text))
    }

    /// `werkbaum_check`: the text's findings with blocking verdicts — on its own (every
    /// warning; no node is newly `[^]`), or with `against` only what it newly introduces.
    /// Writes nothing.
    pub async fn check(&self, input: CheckInput) -> Result<Answer, ToolError> {
        let loaded = self.load(input.source).await?;
        let mut params = json!({ "text": loaded.text() });
        if let Some(against) = &input.against {
            self.cap("against", against)?;
            params["against"] = json!(against);
        }
        let result = self.engine.call("check", params).await?;
        let revision = loaded.revision();
        let mut text = format!("{}\n", revision_line(&revision));
        text.push_str(&render_findings(
            &result["findings"],
            result["blocking"].as_bool(),
        ));
        text.push_str(&render_notices(&result["notices"]));
        let answer = CheckAnswer {
            revision,
            findings: typed(&result, "findings")?,
            blocking: typed(&result, "blocking")?,
            warnings: typed(&result, "warnings")?,
            notices: typed::<Option<Vec<Notice>>>(&result, "notices")?.unwrap_or_default(),
        };
        Ok(Answer::new(&answer, text))
    }

    /// Every write tool: edit through the core, guard rails from `check`, then (document form)
    /// compare-and-set into the store with the caller's attribution.
    pub async fn edit(
        &self,
        common: WriteCommon,
        edit: Edit,
        caller: &Caller,
    ) -> Result<Answer, ToolError> {
        let WriteCommon {
            source,
            base,
            allow,
        } = common;
        if let Edit::Write(new_text) = &edit {
            self.cap("newText", new_text)?;
        }
        let loaded = self.load(source).await?;
        match (&loaded, &base) {
            (Loaded::Text { .. }, Some(_)) => {
                return Err(ToolError::InvalidInput(
                    "`base` belongs to the document form; with `text` leave it out".to_owned(),
                ));
            }
            (Loaded::Doc(d), None) => {
                return Err(ToolError::InvalidInput(format!(
                    "missing `base`: writing document {} requires {{version, checksum}} from your \
                     last read (it is at version {} now; read it first)",
                    d.uuid, d.version
                )));
            }
            (Loaded::Doc(d), Some(b)) => stale_check(d, b)?,
            (Loaded::Text { .. }, None) => {}
        }
        let before = loaded.text();
        let (after, ops) = edit.apply(&self.engine, before).await?;
        self.cap("the edited text", &after)?;
        let Verdict { findings, blocking } = self.guard(&after, before, allow).await?;
        let findings_json = to_value(&findings);
        let revision = loaded.revision();
        let doc = match loaded {
            Loaded::Text { .. } => {
                let new_checksum = checksum(&after);
                let mut text = format!(
                    "{}\nnew checksum {new_checksum}{}\n",
                    revision_line(&revision),
                    if blocking {
                        " — BLOCKED: do not save this text as is"
                    } else {
                        ""
                    }
                );
                text.push_str(&render_findings(&findings_json, Some(blocking)));
                let _ = write!(text, "-----\n{after}");
                let answer = EditAnswer {
                    revision,
                    written: None,
                    text: Some(after),
                    document: None,
                    version: None,
                    checksum: new_checksum,
                    author: None,
                    ops,
                    findings,
                    blocking,
                };
                return Ok(Answer::new(&answer, text));
            }
            Loaded::Doc(doc) => doc,
        };
        if blocking {
            return Err(ToolError::Blocked {
                summary: blocking_summary(&findings_json),
                findings: findings_json,
                revision: to_value(&revision),
            });
        }
        if after == doc.text {
            let text = format!(
                "{}\nunchanged: the edit leaves the text as it is; nothing was written\n",
                revision_line(&revision)
            );
            let answer = EditAnswer {
                revision,
                written: Some(false),
                text: None,
                document: Some(doc.uuid),
                version: Some(doc.version),
                checksum: doc.checksum,
                author: None,
                ops,
                findings,
                blocking: false,
            };
            return Ok(Answer::new(&answer, text));
        }
        let now = self.clock.now_ms();
        let next = Document {
            version: doc.version + 1,
            checksum: checksum(&after),
            text: after,
            updated_at: now,
            ..doc.clone()
        };
        let entry = self.entry(&next, caller, edit.subject(), ops.clone(), now);
        match self
            .store
            .write(
                doc.version,
                Change {
                    doc: &next,
                    entry: &entry,
                },
            )
            .await?
        {
            WriteOutcome::Written(d) => {
                let mut text = format!(
                    "written: document {} version {} checksum {} (by {}; {})\n",
                    d.uuid, d.version, d.checksum, entry.author, entry.subject
                );
                text.push_str(&render_findings(&findings_json, Some(false)));
                let answer = EditAnswer {
                    revision,
                    written: Some(true),
                    text: None,
                    document: Some(d.uuid),
                    version: Some(d.version),
                    checksum: d.checksum,
                    author: Some(entry.author),
                    ops,
                    findings,
                    blocking: false,
                };
                Ok(Answer::new(&answer, text))
            }
            WriteOutcome::Conflict(current) => Err(ToolError::Conflict {
                base_version: doc.version,
                current: Box::new(current),
            }),
            WriteOutcome::NotFound => Err(ToolError::UnknownDocument(doc.uuid)),
        }
    }

    /// The core's `check` of `after` against `before` (`""` for a new document: every `[^]`
    /// node is then newly set).
    async fn guard(&self, after: &str, before: &str, allow: Allow) -> Result<Verdict, ToolError> {
        let params = json!({
            "text": after,
            "against": before,
            "allowWarnings": allow.allow_warnings,
            "allowProd": allow.allow_prod,
        });
        let r = self.engine.call("check", params).await?;
        Ok(Verdict {
            findings: typed(&r, "findings")?,
            blocking: r.get("blocking").and_then(Value::as_bool).unwrap_or(true),
        })
    }

    fn entry(
        &self,
        doc: &Document,
        caller: &Caller,
        subject: String,
        ops: Value,
        now: u64,
    ) -> HistoryEntry {
        HistoryEntry {
            version: doc.version,
            time: now,
            author: caller.author(),
            host: caller.host.clone(),
            user: caller.user.clone(),
            client_id: caller.client_id.clone(),
            subject,
            ops,
            checksum: doc.checksum.clone(),
        }
    }

    /// `werkbaum_create` (and `doc import`): a new document at version 1, behind the same
    /// guard rails as every write (against an empty plan).
    pub async fn create(&self, input: CreateInput, caller: &Caller) -> Result<Answer, ToolError> {
        let title = input.title.trim();
        if title.is_empty() || title.contains('\n') || title.chars().count() > 200 {
            return Err(ToolError::InvalidInput(
                "`title` must be one non-empty line of at most 200 characters".to_owned(),
            ));
        }
        self.cap("text", &input.text)?;
        let Verdict { findings, blocking } = self.guard(&input.text, "", input.allow).await?;
        let findings_json = to_value(&findings);
        if blocking {
            return Err(ToolError::Blocked {
                summary: blocking_summary(&findings_json),
                findings: findings_json,
                revision: json!({ "checksum": checksum(&input.text) }),
            });
        }
        let now = self.clock.now_ms();
        let doc = Document {
            uuid: self.ids.new_uuid(),
            title: title.to_owned(),
            checksum: checksum(&input.text),
            text: input.text,
            version: 1,
            updated_at: now,
        };
        let ops = compute_ops(&self.engine, "", &doc.text).await?;
        let entry = self.entry(&doc, caller, format!("create \"{}\"", doc.title), ops, now);
        self.store
            .create(
                Change {
                    doc: &doc,
                    entry: &entry,
                },
                self.bounds.max_documents,
            )
            .await?;
        let mut text = format!(
            "created: document {} \"{}\" version 1 checksum {} ({})\n",
            doc.uuid,
            doc.title,
            doc.checksum,
            doc_uri(&doc.uuid)
        );
        text.push_str(&render_findings(&findings_json, Some(false)));
        let answer = CreateAnswer {
            revision: revision_of(&doc),
            written: true,
            uri: doc_uri(&doc.uuid),
            document: doc.uuid,
            title: doc.title,
            version: 1,
            checksum: doc.checksum,
            author: entry.author,
            findings,
            blocking: false,
        };
        Ok(Answer::new(&answer, text))
    }

    /// `werkbaum_history`: one page of versions with authors, oldest first; `next` names the
    /// `since` of the following page when there is one.
    pub async fn history(&self, input: HistoryInput) -> Result<Answer, ToolError> {
        let limit = self.bounds.history_limit(input.limit)?;
        let doc = self.document(&input.document).await?;
        let mut entries = self
            .store
            .history(HistoryPage {
                uuid: &input.document,
                since: input.since,
                limit: limit.saturating_add(1),
            })
            .await?
            .ok_or_else(|| ToolError::UnknownDocument(input.document.clone()))?;
        let more = entries.len() > limit;
        entries.truncate(limit);
        let next = more.then(|| entries.last().map(|e| e.version)).flatten();
        let revision = revision_of(&doc);
        let mut text = format!("{}\n", revision_line(&revision));
        let list: Vec<HistoryItem> = entries
            .into_iter()
            .map(|e| {
                let _ = writeln!(
                    text,
                    "v{} {} {} — {}",
                    e.version,
                    UtcDateTime::from_unix_ms(e.time).rfc3339(),
                    e.author,
                    e.subject
                );
                HistoryItem {
                    version: e.version,
                    time: UtcDateTime::from_unix_ms(e.time).rfc3339(),
                    author: e.author,
                    host: e.host,
                    user: e.user,
                    client_id: e.client_id,
                    subject: e.subject,
                    checksum: e.checksum,
                    ops: e.ops,
                }
            })
            .collect();
        if list.is_empty() {
            text.push_str("no versions after that one\n");
        }
        if let Some(next) = next {
            let _ = writeln!(text, "more: call again with since = {next}");
        }
        let answer = HistoryAnswer {
            revision,
            title: doc.title,
            entries: list,
            next,
        };
        Ok(Answer::new(&answer, text))
    }
}

fn stale_check(doc: &Document, base: &Base) -> Result<(), ToolError> {
    if base.version == doc.version && base.checksum == doc.checksum {
        return Ok(());
    }
    Err(ToolError::Conflict {
        base_version: base.version,
        current: Box::new(doc.clone()),
    })
}
