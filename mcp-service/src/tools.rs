//! What the Werkbaum tools do, as plain async functions on a [`Planner`]: resolve the plan
//! (`text` or `document`), call the core through the engine, apply the guard rails from the
//! core's `check`, compare-and-set into the store, and stamp every answer with the revision it
//! was computed from. The MCP handlers in `server` only parse arguments and call these.
//!
//! Plan semantics come from the core only: this module never looks inside a plan's text except
//! to hash it, measure it and compare it for equality.

pub mod error;
pub mod input;

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::clock::{Clock, Ids, rfc3339};
use crate::engine::Engine;
use crate::store::{Document, DocumentSummary, HistoryEntry, Store, WriteOutcome};
pub use error::ToolError;
use input::{
    Allow, Base, CheckInput, CreateInput, HistoryInput, InspectInput, LineOp, NodeRef, Size,
    Source, Status, WriteCommon,
};

/// The URI of a document resource.
pub fn doc_uri(uuid: &str) -> String {
    format!("werkbaum://doc/{uuid}")
}

/// The URI template of document resources.
pub const DOC_URI_TEMPLATE: &str = "werkbaum://doc/{uuid}";

/// SHA-256 hex of the UTF-8 text.
pub fn checksum(text: &str) -> String {
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

/// A tool's answer: `structuredContent` plus a text rendering.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub structured: Value,
    pub text: String,
}

/// A change to a plan, one per write tool.
#[derive(Debug, Clone)]
pub enum Edit {
    SetStatus {
        id: NodeRef,
        status: Status,
    },
    ApplyOps(Vec<LineOp>),
    Write(String),
    AddNode {
        parent: Option<NodeRef>,
        line: String,
        after: Option<NodeRef>,
    },
    MoveNode {
        id: NodeRef,
        parent: Option<NodeRef>,
        after: Option<NodeRef>,
    },
    SetSize {
        id: NodeRef,
        size: Option<Size>,
    },
    RemoveNode {
        id: NodeRef,
        discard: bool,
    },
}

fn opt_ref(r: Option<&NodeRef>) -> Value {
    r.map_or(Value::Null, NodeRef::to_json)
}

impl Edit {
    /// One line saying what the edit does, for the history.
    pub fn subject(&self) -> String {
        match self {
            Edit::SetStatus { id, status } => {
                format!("set_status {} [{}]", id.display(), status.code())
            }
            Edit::ApplyOps(ops) => format!("apply_ops ({} ops)", ops.len()),
            Edit::Write(_) => "write (whole text)".to_owned(),
            Edit::AddNode { parent, line, .. } => format!(
                "add_node under {}: {}",
                parent
                    .as_ref()
                    .map_or("the root".to_owned(), NodeRef::display),
                line.trim()
            ),
            Edit::MoveNode { id, parent, .. } => format!(
                "move_node {} under {}",
                id.display(),
                parent
                    .as_ref()
                    .map_or("the root".to_owned(), NodeRef::display)
            ),
            Edit::SetSize { id, size } => format!(
                "set_size {} {}",
                id.display(),
                size.map_or("none", Size::code)
            ),
            Edit::RemoveNode { id, discard } => format!(
                "remove_node {}{}",
                id.display(),
                if *discard { " (discard)" } else { " (delete)" }
            ),
        }
    }

    /// The text after the edit and the line ops from `before` to it, all computed by the core.
    async fn apply(&self, engine: &Engine, before: &str) -> Result<(String, Value), ToolError> {
        let (method, params) = match self {
            Edit::SetStatus { id, status } => (
                "setStatus",
                json!({"text": before, "id": id.to_json(), "status": status.code()}),
            ),
            Edit::SetSize { id, size } => (
                "setSize",
                json!({"text": before, "id": id.to_json(), "size": size.map(Size::code)}),
            ),
            Edit::AddNode {
                parent,
                line,
                after,
            } => {
                let mut p =
                    json!({"text": before, "parent": opt_ref(parent.as_ref()), "line": line});
                if let Some(after) = after {
                    p["after"] = after.to_json();
                }
                ("addNode", p)
            }
            Edit::MoveNode { id, parent, after } => {
                let mut p =
                    json!({"text": before, "id": id.to_json(), "parent": opt_ref(parent.as_ref())});
                if let Some(after) = after {
                    p["after"] = after.to_json();
                }
                ("moveNode", p)
            }
            Edit::RemoveNode { id, discard } => (
                "removeNode",
                json!({"text": before, "id": id.to_json(), "discard": discard}),
            ),
            Edit::ApplyOps(ops) => {
                let r = engine
                    .call("applyOps", json!({"text": before, "ops": ops}))
                    .await?;
                let after = text_field(&r, "text")?;
                let ops = compute_ops(engine, before, &after).await?;
                return Ok((after, ops));
            }
            Edit::Write(new_text) => {
                let ops = compute_ops(engine, before, new_text).await?;
                return Ok((new_text.clone(), ops));
            }
        };
        let r = engine.call(method, params).await?;
        Ok((
            text_field(&r, "text")?,
            r.get("ops").cloned().unwrap_or(json!([])),
        ))
    }
}

fn text_field(v: &Value, key: &str) -> Result<String, ToolError> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            ToolError::Engine(crate::engine::EngineError::Engine(format!(
                "the core's answer lacks {key}"
            )))
        })
}

async fn compute_ops(engine: &Engine, before: &str, after: &str) -> Result<Value, ToolError> {
    let r = engine
        .call("computeOps", json!({"before": before, "after": after}))
        .await?;
    Ok(r.get("ops").cloned().unwrap_or(json!([])))
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
    fn revision(&self) -> Value {
        match self {
            Loaded::Text { checksum, .. } => json!({ "checksum": checksum }),
            Loaded::Doc(d) => revision_of(d),
        }
    }
}

fn revision_of(d: &Document) -> Value {
    json!({ "document": d.uuid, "version": d.version, "checksum": d.checksum })
}

fn revision_line(rev: &Value) -> String {
    match rev.get("document").and_then(Value::as_str) {
        Some(doc) => format!(
            "revision: document {doc} version {} checksum {}",
            rev["version"],
            rev["checksum"].as_str().unwrap_or("")
        ),
        None => format!(
            "revision: text checksum {}",
            rev["checksum"].as_str().unwrap_or("")
        ),
    }
}

/// The service's plan operations over an engine and a store.
pub struct Planner {
    engine: Engine,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn Ids>,
    max_text_bytes: usize,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("max_text_bytes", &self.max_text_bytes)
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
        }
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

    async fn summary(&self, text: &str) -> Result<Value, ToolError> {
        let r = self
            .engine
            .call("inspect", json!({"text": text, "include": []}))
            .await?;
        Ok(r.get("summary").cloned().unwrap_or(Value::Null))
    }

    /// `werkbaum_read`: the text with its revision and the core's summary figures.
    pub async fn read(&self, source: Source) -> Result<Answer, ToolError> {
        let loaded = self.load(source).await?;
        let summary = self.summary(loaded.text()).await?;
        let revision = loaded.revision();
        let mut structured = json!({
            "revision": revision,
            "summary": summary,
            "text": loaded.text(),
        });
        let mut text = String::new();
        if let Loaded::Doc(d) = &loaded {
            structured["title"] = json!(d.title);
            structured["uri"] = json!(doc_uri(&d.uuid));
            let _ = writeln!(text, "\"{}\"", d.title);
        }
        let _ = writeln!(
            text,
            "{}\nsummary: {}\n-----\n{}",
            revision_line(&revision),
            summary_line(&summary),
            loaded.text()
        );
        Ok(Answer { structured, text })
    }

    /// `werkbaum_inspect`: the core's tree, warnings and cheapest path.
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
        result["revision"] = revision;
        Ok(Answer {
            structured: result,
            text,
        })
    }

    /// `werkbaum_check`: the warning delta against `against` with blocking verdicts.
    pub async fn check(&self, input: CheckInput) -> Result<Answer, ToolError> {
        let loaded = self.load(input.source).await?;
        let mut params = json!({
            "text": loaded.text(),
            "allowWarnings": input.allow.allow_warnings,
            "allowProd": input.allow.allow_prod,
        });
        if let Some(against) = &input.against {
            self.cap("against", against)?;
            params["against"] = json!(against);
        }
        let mut result = self.engine.call("check", params).await?;
        let revision = loaded.revision();
        let mut text = format!("{}\n", revision_line(&revision));
        text.push_str(&render_findings(
            &result["findings"],
            result["blocking"].as_bool(),
        ));
        result["revision"] = revision;
        Ok(Answer {
            structured: result,
            text,
        })
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
        let (findings, blocking) = self.guard(&after, Some(before), allow).await?;
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
                text.push_str(&render_findings(&findings, Some(blocking)));
                let _ = write!(text, "-----\n{after}");
                return Ok(Answer {
                    structured: json!({
                        "revision": revision,
                        "text": after,
                        "checksum": new_checksum,
                        "ops": ops,
                        "findings": findings,
                        "blocking": blocking,
                    }),
                    text,
                });
            }
            Loaded::Doc(doc) => doc,
        };
        if blocking {
            return Err(ToolError::Blocked {
                summary: blocking_summary(&findings),
                findings,
                revision,
            });
        }
        if after == doc.text {
            let text = format!(
                "{}\nunchanged: the edit leaves the text as it is; nothing was written\n",
                revision_line(&revision)
            );
            return Ok(Answer {
                structured: json!({
                    "revision": revision,
                    "written": false,
                    "document": doc.uuid,
                    "version": doc.version,
                    "checksum": doc.checksum,
                    "ops": ops,
                    "findings": findings,
                    "blocking": false,
                }),
                text,
            });
        }
        let now = self.clock.now_millis();
        let next = Document {
            version: doc.version + 1,
            checksum: checksum(&after),
            text: after,
            updated_at: now,
            ..doc.clone()
        };
        let entry = self.entry(&next, caller, edit.subject(), ops.clone(), now);
        match self.store.write(doc.version, &next, &entry).await? {
            WriteOutcome::Written(d) => {
                let mut text = format!(
                    "written: document {} version {} checksum {} (by {}; {})\n",
                    d.uuid, d.version, d.checksum, entry.author, entry.subject
                );
                text.push_str(&render_findings(&findings, Some(false)));
                Ok(Answer {
                    structured: json!({
                        "revision": revision,
                        "written": true,
                        "document": d.uuid,
                        "version": d.version,
                        "checksum": d.checksum,
                        "author": entry.author,
                        "ops": ops,
                        "findings": findings,
                        "blocking": false,
                    }),
                    text,
                })
            }
            WriteOutcome::Conflict(current) => Err(ToolError::Conflict {
                base_version: doc.version,
                current: Box::new(current),
            }),
            WriteOutcome::NotFound => Err(ToolError::UnknownDocument(doc.uuid)),
        }
    }

    /// The core's `check` of `after` against `before`: (findings, blocking).
    async fn guard(
        &self,
        after: &str,
        before: Option<&str>,
        allow: Allow,
    ) -> Result<(Value, bool), ToolError> {
        let mut params = json!({
            "text": after,
            "allowWarnings": allow.allow_warnings,
            "allowProd": allow.allow_prod,
        });
        if let Some(before) = before {
            params["against"] = json!(before);
        }
        let r = self.engine.call("check", params).await?;
        let blocking = r.get("blocking").and_then(Value::as_bool).unwrap_or(true);
        Ok((r.get("findings").cloned().unwrap_or(json!([])), blocking))
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
        let (findings, blocking) = self.guard(&input.text, None, input.allow).await?;
        if blocking {
            return Err(ToolError::Blocked {
                summary: blocking_summary(&findings),
                findings,
                revision: json!({ "checksum": checksum(&input.text) }),
            });
        }
        let now = self.clock.now_millis();
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
        self.store.create(&doc, &entry).await?;
        let mut text = format!(
            "created: document {} \"{}\" version 1 checksum {} ({})\n",
            doc.uuid,
            doc.title,
            doc.checksum,
            doc_uri(&doc.uuid)
        );
        text.push_str(&render_findings(&findings, Some(false)));
        Ok(Answer {
            structured: json!({
                "revision": revision_of(&doc),
                "written": true,
                "document": doc.uuid,
                "title": doc.title,
                "uri": doc_uri(&doc.uuid),
                "version": 1,
                "checksum": doc.checksum,
                "author": entry.author,
                "findings": findings,
                "blocking": false,
            }),
            text,
        })
    }

    /// `werkbaum_history`: versions with authors, oldest first.
    pub async fn history(&self, input: HistoryInput) -> Result<Answer, ToolError> {
        let doc = self.document(&input.document).await?;
        let entries = self
            .store
            .history(&input.document, input.since)
            .await?
            .ok_or_else(|| ToolError::UnknownDocument(input.document.clone()))?;
        let revision = revision_of(&doc);
        let mut text = format!("{}\n", revision_line(&revision));
        let list: Vec<Value> = entries
            .iter()
            .map(|e| {
                let _ = writeln!(
                    text,
                    "v{} {} {} — {}",
                    e.version,
                    rfc3339(e.time),
                    e.author,
                    e.subject
                );
                json!({
                    "version": e.version,
                    "time": rfc3339(e.time),
                    "author": e.author,
                    "host": e.host,
                    "user": e.user,
                    "clientId": e.client_id,
                    "subject": e.subject,
                    "checksum": e.checksum,
                    "ops": e.ops,
                })
            })
            .collect();
        if list.is_empty() {
            text.push_str("no versions after that one\n");
        }
        Ok(Answer {
            structured: json!({
                "revision": revision,
                "title": doc.title,
                "entries": list,
            }),
            text,
        })
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

fn summary_line(s: &Value) -> String {
    format!(
        "{} nodes, {} warnings, {} needed, {} stations, exact {}",
        s["nodes"], s["warnings"], s["needed"], s["stations"], s["exact"]
    )
}

fn blocking_summary(findings: &Value) -> String {
    let parts: Vec<String> = findings
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["blocking"].as_bool() == Some(true))
        .map(|f| {
            format!(
                "{} at line {}: {}",
                f["type"].as_str().unwrap_or("?"),
                f["line"],
                f["text"].as_str().unwrap_or("")
            )
        })
        .collect();
    parts.join("; ")
}

fn render_findings(findings: &Value, blocking: Option<bool>) -> String {
    let list = findings.as_array().map(Vec::as_slice).unwrap_or_default();
    let mut out = String::new();
    if list.is_empty() {
        out.push_str("findings: none (no new warnings)\n");
        return out;
    }
    let _ = writeln!(
        out,
        "findings ({}{}):",
        list.len(),
        if blocking == Some(true) {
            ", blocking"
        } else {
            ""
        }
    );
    for f in list {
        let line = f
            .get("line")
            .filter(|l| !l.is_null())
            .map_or(String::new(), |l| format!(" line {l}"));
        let _ = writeln!(
            out,
            "- {}{}{}: {}{}",
            if f["blocking"].as_bool() == Some(true) {
                "BLOCKING "
            } else {
                ""
            },
            f["type"].as_str().unwrap_or("?"),
            line,
            f["text"].as_str().unwrap_or(""),
            f.get("reason")
                .and_then(Value::as_str)
                .map_or(String::new(), |r| format!(" ({r})"))
        );
    }
    out
}

fn render_inspect(result: &Value, revision: &Value) -> String {
    let mut out = format!("{}\n", revision_line(revision));
    let _ = writeln!(out, "summary: {}", summary_line(&result["summary"]));
    if let Some(tree) = result.get("tree").and_then(Value::as_array) {
        out.push_str("tree (line: [status→effective] label (size|assumed) #id flags):\n");
        // Iterative walk: trees can be very deep.
        let mut stack: Vec<(&Value, usize)> = tree.iter().rev().map(|n| (n, 0)).collect();
        while let Some((node, depth)) = stack.pop() {
            render_node(&mut out, node, depth);
            if let Some(children) = node.get("children").and_then(Value::as_array) {
                stack.extend(children.iter().rev().map(|c| (c, depth + 1)));
            }
        }
    }
    if let Some(warnings) = result.get("warnings").and_then(Value::as_array) {
        let _ = writeln!(out, "warnings ({}):", warnings.len());
        for w in warnings {
            let line = w
                .get("line")
                .filter(|l| !l.is_null())
                .map_or(String::new(), |l| format!(" line {l}"));
            let _ = writeln!(
                out,
                "- {}{}: {}",
                w["type"].as_str().unwrap_or("?"),
                line,
                w["text"].as_str().unwrap_or("")
            );
        }
    }
    if let Some(path) = result.get("path").filter(|p| p.is_object()) {
        let _ = writeln!(
            out,
            "cheapest path: needed lines {}, stations {}, cost {}, exact {}",
            path["needed"], path["stations"], path["cost"], path["exact"]
        );
        if let Some(o) = path.get("overloadedAssignee").filter(|o| !o.is_null()) {
            let _ = writeln!(out, "overloaded assignee: {o}");
        }
    }
    out
}

fn render_node(out: &mut String, n: &Value, depth: usize) {
    let status = n["statusCode"].as_str().unwrap_or("");
    let eff = match (n["status"].as_str(), n["effectiveStatus"].as_str()) {
        (Some(s), Some(e)) if s != e => format!("→{e}"),
        (None, Some(e)) => format!("→{e}"),
        _ => String::new(),
    };
    let size = match n["size"].as_str() {
        Some(s) => s.to_owned(),
        None => format!("{}?", n["assumedSize"].as_str().unwrap_or("")),
    };
    let mut flags = Vec::new();
    for (key, flag) in [
        ("needed", "needed"),
        ("station", "station"),
        ("needsBreakdown", "needs-breakdown"),
        ("sizeConflict", "size-conflict"),
        ("optional", "optional"),
    ] {
        if n[key].as_bool() == Some(true) {
            flags.push(flag);
        }
    }
    let tags: Vec<&str> = n["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let _ = writeln!(
        out,
        "{}{}: [{status}{eff}] {} ({size}){}{}{}",
        "  ".repeat(depth),
        n["line"],
        n["label"].as_str().unwrap_or(""),
        n["id"]
            .as_str()
            .map_or(String::new(), |id| format!(" #{id}")),
        if tags.is_empty() {
            String::new()
        } else {
            format!(" @{}", tags.join(" @"))
        },
        if flags.is_empty() {
            String::new()
        } else {
            format!(" {{{}}}", flags.join(","))
        }
    );
}
