//! Pinned tool definitions (issue 43 point 1): the first definition the gateway learns of a
//! route's tool (name, title, description, inputSchema, outputSchema, annotations) is recorded
//! in the store as its *pin*; a later catalog whose definition differs is a *change*, held
//! (`[pinning] mode = "hold"`: absent from `tools/list`, a call refused before the upstream)
//! or logged (`"log"`) until an admin approves it (`pforte tools approve`).
//!
//! A definition is compared as canonical JSON ([`canonical`]: compact, object keys sorted by
//! their UTF-8 bytes, arrays in order, strings and numbers as serde_json writes them) and
//! recorded with its SHA-256 ([`digest`]). The decisions are plain functions ([`verdict`],
//! [`record`]); [`Pins`] applies them to the store ([`store::PinStore`], opened by
//! `Stores::open`) and keeps the held tools per route for the request path (lock-free), read
//! again from the store every [`RELOAD`] so an approval made beside a running gateway (or on
//! another gateway sharing redis) is picked up.

pub(crate) mod diff;
pub(crate) mod store;

use std::{collections::HashMap, sync::Arc, time::Duration};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::{server::ShutdownWatch, services::background::BackgroundService};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

pub(crate) use store::{PinStore, PinStoreError};

/// How often a gateway reads the pins again (approvals made elsewhere).
pub(crate) const RELOAD: Duration = Duration::from_secs(2);

/// The fields of a tool that make its definition, in the order a change names them.
pub(crate) const FIELDS: [&str; 6] = [
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
];

/// `[pinning] mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// A changed tool is held until approved.
    #[default]
    Hold,
    /// A changed tool is served; each change is an audit line and a metric.
    Log,
    /// Nothing recorded, nothing held.
    Off,
}

/// `[pinning] new_tools`: what a tool the route never listed before gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum NewTools {
    /// Pinned as first seen and served.
    #[default]
    Allow,
    /// Recorded unapproved and treated as a change (held in mode `hold`).
    Hold,
}

/// The `[pinning]` table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Pinning {
    pub(crate) mode: Mode,
    pub(crate) new_tools: NewTools,
}

/// One route's tool as the store keeps it: the approved definition and the last one seen,
/// each as canonical JSON text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Pin {
    pub(crate) route: String,
    pub(crate) tool: String,
    /// The approved definition; `None`: a new tool held, never approved.
    pub(crate) approved: Option<String>,
    /// When it was approved (first seen, or `pforte tools approve`), ms since the epoch.
    pub(crate) approved_ms: Option<u64>,
    /// The definition the route's catalog listed last.
    pub(crate) seen: String,
    /// When that definition was first seen.
    pub(crate) seen_ms: u64,
}

impl Pin {
    /// Whether the last seen definition is not the approved one.
    pub(crate) fn pending(&self) -> bool {
        self.approved.as_deref() != Some(self.seen.as_str())
    }
}

/// What changed in a held or logged tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    /// Never approved (a new tool under `new_tools = "hold"`).
    pub(crate) new: bool,
    /// The fields that differ from the approved definition ([`FIELDS`] order).
    pub(crate) fields: Vec<&'static str>,
}

impl Change {
    /// Between the approved and the seen definition (canonical texts).
    pub(crate) fn between(approved: &str, seen: &str) -> Self {
        let old: Value = serde_json::from_str(approved).unwrap_or(Value::Null);
        let new: Value = serde_json::from_str(seen).unwrap_or(Value::Null);
        let fields = FIELDS
            .into_iter()
            .filter(|f| old.get(f) != new.get(f))
            .collect();
        Self { new: false, fields }
    }

    fn new_tool() -> Self {
        Self {
            new: true,
            fields: Vec::new(),
        }
    }

    /// What a refused call and the audit line say.
    pub(crate) fn message(&self, route: &str, tool: &str) -> String {
        let approve = format!("an admin approves it with `pforte tools approve {route} {tool}`");
        if self.new {
            format!("tool {tool} of route {route} is new and not approved yet; {approve}")
        } else {
            format!(
                "tool {tool} of route {route} changed since it was approved ({}); {approve}",
                self.fields.join(", ")
            )
        }
    }
}

/// What the gateway does with a tool whose definition it has seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Serve,
    /// Absent from `tools/list`, its calls refused.
    Hold(Change),
    /// Served, the change logged.
    Log(Change),
}

/// The decision for the definition `seen` (canonical) of a tool whose pin is `pin`.
pub(crate) fn verdict(pin: Option<&Pin>, seen: &str, pinning: Pinning) -> Verdict {
    if pinning.mode == Mode::Off {
        return Verdict::Serve;
    }
    let change = match pin.and_then(|p| p.approved.as_deref()) {
        Some(approved) if approved == seen => return Verdict::Serve,
        Some(approved) => Change::between(approved, seen),
        None if pinning.new_tools == NewTools::Allow => return Verdict::Serve,
        None => Change::new_tool(),
    };
    match pinning.mode {
        Mode::Hold => Verdict::Hold(change),
        _ => Verdict::Log(change),
    }
}

/// The pin to write for the definition `seen` of `route`'s `tool` at `now` (`None`: nothing
/// changes): a first sight is pinned (approved as seen unless `new_tools = "hold"`), another
/// definition than the last seen recorded as seen (the approved one stays).
pub(crate) fn record(
    pin: Option<&Pin>,
    route: &str,
    tool: &str,
    seen: &str,
    pinning: Pinning,
    now: u64,
) -> Option<Pin> {
    if pinning.mode == Mode::Off {
        return None;
    }
    let allow_new = pinning.new_tools == NewTools::Allow;
    match pin {
        None => Some(Pin {
            route: route.to_owned(),
            tool: tool.to_owned(),
            approved: allow_new.then(|| seen.to_owned()),
            approved_ms: allow_new.then_some(now),
            seen: seen.to_owned(),
            seen_ms: now,
        }),
        Some(pin) if pin.approved.is_none() && allow_new => Some(Pin {
            approved: Some(seen.to_owned()),
            approved_ms: Some(now),
            seen: seen.to_owned(),
            seen_ms: now,
            ..pin.clone()
        }),
        Some(pin) if pin.seen != seen => Some(Pin {
            seen: seen.to_owned(),
            seen_ms: now,
            ..pin.clone()
        }),
        Some(_) => None,
    }
}

/// Which pending tools of a route an approval takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which<'a> {
    Tool(&'a str),
    /// Every pending tool of the route.
    All,
}

/// Approves `route`'s pending `which` as last seen, at `now` (ms): the one approval the CLI
/// (`pforte tools approve`) and the console share. Each tool is approved in one store step
/// (a definition recorded meanwhile is never approved unseen). The pins as approved (empty:
/// nothing was pending). Blocking (the store).
pub(crate) fn approve(
    store: &dyn PinStore,
    route: &str,
    which: Which<'_>,
    now: u64,
) -> Result<Vec<Pin>, PinStoreError> {
    let names: Vec<String> = match which {
        Which::Tool(tool) => vec![tool.to_owned()],
        Which::All => store
            .list()?
            .into_iter()
            .filter(|p| p.route == route && p.pending())
            .map(|p| p.tool)
            .collect(),
    };
    let mut approved = Vec::new();
    for name in &names {
        if let Some(pin) = store.approve(route, name, now)? {
            approved.push(pin);
        }
    }
    Ok(approved)
}

impl<'a> crate::audit::PinRecord<'a> {
    /// `tool_approved`: `pin` approved at `time_ms` by `by` (`cli`, `console`).
    pub(crate) fn approved(pin: &'a Pin, time_ms: u64, by: &'static str) -> Self {
        Self {
            time_ms,
            event: "tool_approved",
            route: &pin.route,
            tool: &pin.tool,
            fields: Vec::new(),
            held: None,
            sha256: pin.approved.as_deref().map(digest),
            by: Some(by),
        }
    }
}

/// The definition of a listed tool: the fields of [`FIELDS`] it has.
pub(crate) fn definition(tool: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for field in FIELDS {
        if let Some(v) = tool.get(field) {
            out.insert(field.to_owned(), v.clone());
        }
    }
    Value::Object(out)
}

/// `value` as canonical JSON text: compact, object keys sorted by their UTF-8 bytes, arrays in
/// order, strings and numbers as serde_json writes them.
pub(crate) fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The SHA-256 of a canonical text, lower-case hex.
pub(crate) fn digest(canonical: &str) -> String {
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

/// A change the gateway saw, for the audit log and the metrics.
#[derive(Debug, Clone)]
pub(crate) struct PinEvent {
    pub(crate) route: String,
    pub(crate) tool: String,
    pub(crate) change: Change,
    /// Held (mode `hold`) or only logged.
    pub(crate) held: bool,
}

impl PinEvent {
    /// What the log line says (the tool's name escaped: the upstream wrote it).
    pub(crate) fn message(&self) -> String {
        self.change
            .message(&self.route, &crate::logging::untrusted_name(&self.tool))
    }
}

/// Where [`Pins`] reports the changes it sees (the audit log and the metrics, wired at start).
pub(crate) type Report = Arc<dyn Fn(&PinEvent) + Send + Sync>;

/// Held tools: route name → tool name → what changed.
type Held = HashMap<String, HashMap<String, Change>>;

/// A pin's definitions by their SHA-256, for comparing what a client is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Digests {
    /// `None`: never approved (a new tool held).
    pub(crate) approved: Option<String>,
    pub(crate) seen: String,
}

/// What the request path knows of the store: the held tools and every pin's digests
/// (route name → tool name → digests).
#[derive(Debug, Default)]
struct Known {
    held: Held,
    digests: HashMap<String, HashMap<String, Digests>>,
}

/// What a `tools/list` answer a client is about to get may say of one tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listing {
    Serve,
    /// Cut: its definition is not the approved one (or it is new and new tools are held).
    Cut,
    /// Cut, and a definition the store has not seen: record it (a change the gateway's own
    /// catalog has not listed — the upstream may answer it differently, or has not yet).
    CutUnseen,
}

/// The decision for a definition (its SHA-256 `served`) a client is about to be listed, given
/// the tool's pin (`None`: never seen). Only mode `hold` cuts; a tool never seen is a first
/// sight (served unless `new_tools = "hold"`).
pub(crate) fn listing(pin: Option<&Digests>, served: &str, pinning: Pinning) -> Listing {
    if pinning.mode != Mode::Hold {
        return Listing::Serve;
    }
    match pin {
        Some(d) if d.approved.as_deref() == Some(served) => Listing::Serve,
        Some(d) if d.seen == served => Listing::Cut,
        Some(_) => Listing::CutUnseen,
        None if pinning.new_tools == NewTools::Allow => Listing::Serve,
        None => Listing::CutUnseen,
    }
}

/// The pins of this gateway: the store, the `[pinning]` settings, and the held tools.
pub(crate) struct Pins {
    store: Option<Arc<dyn PinStore>>,
    pinning: Pinning,
    clock: Arc<dyn pforte_clock::Clock>,
    known: ArcSwap<Known>,
    report: Report,
    /// A client's list is being recorded ([`Pins::record_served`]): one at a time.
    recording: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Pins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pins")
            .field("pinning", &self.pinning)
            .finish_non_exhaustive()
    }
}

impl Pins {
    /// Pins kept in `store` (`None`, or mode `off`: nothing recorded or held).
    pub(crate) fn new(
        store: Option<Arc<dyn PinStore>>,
        pinning: Pinning,
        clock: Arc<dyn pforte_clock::Clock>,
        report: Report,
    ) -> Self {
        let store = store.filter(|_| pinning.mode != Mode::Off);
        Self {
            store,
            pinning,
            clock,
            known: ArcSwap::from_pointee(Known::default()),
            recording: std::sync::atomic::AtomicBool::new(false),
            report,
        }
    }

    /// Whether anything is recorded at all.
    pub(crate) fn enabled(&self) -> bool {
        self.store.is_some()
    }

    /// What changed in `route`'s `tool` if it is held. Lock-free; no I/O.
    pub(crate) fn held(&self, route: &str, tool: &str) -> Option<Change> {
        self.known.load().held.get(route)?.get(tool).cloned()
    }

    /// Whether `route` has a held tool (its `tools/list` answers are then filtered).
    pub(crate) fn holds_any(&self, route: &str) -> bool {
        self.known
            .load()
            .held
            .get(route)
            .is_some_and(|t| !t.is_empty())
    }

    /// Whether every `tools/list` answer is compared with the pins (mode `hold`): a definition
    /// a client is served is the approved one, whoever the upstream told what.
    pub(crate) fn screens(&self) -> bool {
        self.enabled() && self.pinning.mode == Mode::Hold
    }

    /// [`listing`] for `route`'s `tool` as a client is about to be listed it (its JSON text).
    /// Lock-free; no I/O. A tool that is not an object is cut.
    pub(crate) fn listing(&self, route: &str, name: &str, tool: &[u8]) -> Listing {
        if !self.screens() {
            return Listing::Serve;
        }
        let Ok(tool @ Value::Object(_)) = serde_json::from_slice::<Value>(tool) else {
            return Listing::Cut;
        };
        let served = digest(&canonical(&definition(&tool)));
        let known = self.known.load();
        let pin = known.digests.get(route).and_then(|t| t.get(name));
        listing(pin, &served, self.pinning)
    }

    /// Records the definitions `route`'s catalog just listed (name, whole tool object), reports
    /// each new change and reads the held tools again. Blocking (the store).
    pub(crate) fn observe(
        &self,
        route: &str,
        tools: &[(String, Value)],
    ) -> Result<(), PinStoreError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let known: HashMap<String, Pin> = store
            .list()?
            .into_iter()
            .filter(|p| p.route == route)
            .map(|p| (p.tool.clone(), p))
            .collect();
        let now = self.clock.now_ms();
        for (name, tool) in tools {
            let seen = canonical(&definition(tool));
            let pin = known.get(name);
            let Some(new) = record(pin, route, name, &seen, self.pinning, now) else {
                continue;
            };
            store.put(&new)?;
            let event = match verdict(Some(&new), &seen, self.pinning) {
                Verdict::Serve => None,
                Verdict::Hold(change) => Some((change, true)),
                Verdict::Log(change) => Some((change, false)),
            };
            if let Some((change, held)) = event {
                (self.report)(&PinEvent {
                    route: route.to_owned(),
                    tool: name.clone(),
                    change,
                    held,
                });
            }
        }
        self.reload()
    }

    /// Every pin (`None`: nothing is recorded, pinning is off). Blocking (the store).
    pub(crate) fn list(&self) -> Option<Result<Vec<Pin>, PinStoreError>> {
        self.store.as_ref().map(|s| s.list())
    }

    /// Approves `route`'s `which` ([`approve`], the CLI's code path) and reads the held tools
    /// again, so this gateway serves what was approved at once (others within [`RELOAD`]).
    /// Blocking (the store).
    pub(crate) fn approve(&self, route: &str, which: Which<'_>) -> Result<Vec<Pin>, PinStoreError> {
        let Some(store) = &self.store else {
            return Ok(Vec::new());
        };
        let approved = approve(store.as_ref(), route, which, self.clock.now_ms())?;
        self.reload()?;
        Ok(approved)
    }

    /// The `[pinning]` settings.
    pub(crate) fn pinning(&self) -> Pinning {
        self.pinning
    }

    /// Records, off the request path, definitions a client's list had that the store has not
    /// seen ([`Listing::CutUnseen`]: name, tool as listed), as the catalog's would be: held,
    /// reported, shown by `pforte tools pending` and the console. One recording at a time (a
    /// list while one runs is cut all the same and records on a later list).
    pub(crate) fn record_served(self: &Arc<Self>, route: &str, tools: Vec<(String, Vec<u8>)>) {
        use std::sync::atomic::Ordering;
        if tools.is_empty() || self.recording.swap(true, Ordering::AcqRel) {
            return;
        }
        let listed: Vec<(String, Value)> = tools
            .into_iter()
            .filter_map(|(name, tool)| Some((name, serde_json::from_slice(&tool).ok()?)))
            .collect();
        /// Ends the recording however the task ends (a panic included).
        struct Done(Arc<Pins>);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.recording.store(false, Ordering::Release);
            }
        }
        let (done, route) = (Done(self.clone()), route.to_owned());
        tokio::task::spawn_blocking(move || {
            if let Err(e) = done.0.observe(&route, &listed) {
                tracing::warn!(error = %e, route, "tool pins: recording a served definition failed");
            }
        });
    }

    /// Reads the held tools from the store. Blocking.
    pub(crate) fn reload(&self) -> Result<(), PinStoreError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let known = known_of(&store.list()?, self.pinning);
        self.known.store(Arc::new(known));
        Ok(())
    }
}

/// The held tools and the digests of `pins`.
fn known_of(pins: &[Pin], pinning: Pinning) -> Known {
    let mut held = Held::new();
    let mut digests: HashMap<String, HashMap<String, Digests>> = HashMap::new();
    for pin in pins {
        digests.entry(pin.route.clone()).or_default().insert(
            pin.tool.clone(),
            Digests {
                approved: pin.approved.as_deref().map(digest),
                seen: digest(&pin.seen),
            },
        );
        if let Verdict::Hold(change) = verdict(Some(pin), &pin.seen, pinning) {
            held.entry(pin.route.clone())
                .or_default()
                .insert(pin.tool.clone(), change);
        }
    }
    Known { held, digests }
}

/// Reads the pins again every [`RELOAD`] until shutdown (approvals made elsewhere).
#[derive(Debug)]
pub(crate) struct PinsService(pub(crate) Arc<Pins>);

#[async_trait]
impl BackgroundService for PinsService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        if !self.0.enabled() {
            return;
        }
        loop {
            let pins = self.0.clone();
            if let Ok(Err(e)) = tokio::task::spawn_blocking(move || pins.reload()).await {
                tracing::warn!(error = %e, "tool pins: reading the store failed");
            }
            tokio::select! {
                _ = tokio::time::sleep(RELOAD) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
