//! Asking the person (MCP 2026-07-28 input-required results, SEP-2322): where Werkbaum needs a
//! decision only the person can make — which side of a conflicting edit wins, and whether a
//! node's subtree really is to be deleted — a `tools/call` of a 2026-07-28 client that can
//! elicit answers `resultType: "input_required"` with one form elicitation; the client retries
//! the same call with `inputResponses` and the echoed `requestState`.
//!
//! The decisions are plain functions over the call's arguments, its first result and the
//! client's answers ([`before_call`], [`after_call`]); `surface.rs` applies them. The
//! `requestState` carries only the base (`{version, checksum}`) the person chose to write over;
//! it is plain base64url JSON, not sealed, because tampering with it can do nothing worse than a
//! failed or re-asked call: it counts only beside the answer `mine`, and the write is still
//! compare-and-set against the stored version — a base the caller could send itself. Whether a
//! removal is confirmed is never kept in the state: it is the answer in the same retry (a
//! conflict during a removal asks both questions again). A state that does not parse is
//! refused as invalid params.

use base64::Engine as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, InputRequest, InputRequests,
    InputRequiredResult, JsonObject, ProtocolVersion,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The key of the conflict question in `inputRequests` / `inputResponses`.
pub(super) const CONFLICT: &str = "werkbaum_conflict";
/// The key of the removal question.
pub(super) const REMOVAL: &str = "werkbaum_removal";

/// The tool whose `discard: false` deletes a subtree.
const REMOVE_TOOL: &str = "werkbaum_remove_node";

/// What the server remembers between rounds, echoed by the client as `requestState`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct State {
    /// The version the person chose to write over (`mine` wins), with its checksum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<(u64, String)>,
}

impl State {
    pub(super) fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    pub(super) fn decode(s: &str) -> Option<Self> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// Whether the calling client may be asked: it speaks 2026-07-28 or newer and declared
/// elicitation (form) among its capabilities.
pub(super) fn can_ask(version: Option<&ProtocolVersion>, elicitation: bool) -> bool {
    elicitation && version.is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// What to do before running the tool.
#[derive(Debug, Clone)]
pub(super) enum Before {
    /// Run it with these arguments (a base replaced by the one the person chose to write over).
    Run(Option<JsonObject>),
    /// Ask this first.
    Ask(InputRequiredResult),
    /// The person declined: this is the answer, nothing ran.
    Answer(CallToolResult),
}

/// Decides, from the call and the client's answers, whether to run the tool, ask, or answer.
/// `Err` is an invalid `requestState`.
pub(super) fn before_call(request: &CallToolRequestParams) -> Result<Before, String> {
    let mut state = match &request.request_state {
        Some(s) => State::decode(s).ok_or("requestState is not one this server issued")?,
        None => State::default(),
    };
    let responses = request.input_responses.as_ref();
    let answer = |key: &str| responses.and_then(|r| r.get(key));
    let mut args = request.arguments.clone();

    if let Some(reply) = answer(CONFLICT) {
        match chosen(reply, "winner").as_deref() {
            Some("mine") => {}
            Some("theirs") => return Ok(Before::Answer(kept(&state))),
            _ => return Ok(Before::Answer(declined("the conflicting edit"))),
        }
    } else if state.over.is_some() {
        // A state that says "mine wins" without the answer that said so: ask again.
        state.over = None;
    }
    if let (Some((version, checksum)), Some(args)) = (&state.over, args.as_mut()) {
        args.insert(
            "base".to_owned(),
            json!({"version": version, "checksum": checksum}),
        );
    }

    if removes_subtree(request) {
        match answer(REMOVAL) {
            None => return Ok(Before::Ask(removal_question(request))),
            Some(reply) if chosen(reply, "confirm").as_deref() == Some("true") => {}
            Some(_) => return Ok(Before::Answer(declined("the removal"))),
        }
    }
    Ok(Before::Run(args))
}

/// After the tool ran: a conflict in the document form becomes the question which side wins
/// (the state remembers the current version to write over; a removal's confirmation is asked
/// again beside it); anything else is the answer.
pub(super) fn after_call(
    result: CallToolResult,
    request: &CallToolRequestParams,
) -> Result<CallToolResult, InputRequiredResult> {
    let Some(current) = conflict_of(&result) else {
        return Ok(result);
    };
    let (Some(version), Some(checksum), Some(doc)) = (
        current.get("version").and_then(Value::as_u64),
        current.get("checksum").and_then(Value::as_str),
        current.get("document").and_then(Value::as_str),
    ) else {
        return Ok(result);
    };
    let next = State {
        over: Some((version, checksum.to_owned())),
    };
    let message = format!(
        "Document {doc} changed since this edit was prepared: it is at version {version} now. \
         Which side wins? `mine`: apply this edit on top of version {version}; `theirs`: keep \
         version {version} and write nothing."
    );
    let schema = json!({
        "type": "object",
        "properties": {"winner": {
            "type": "string", "title": "Which side wins",
            "enum": ["mine", "theirs"], "default": "theirs"
        }},
        "required": ["winner"]
    });
    let mut asked = question(CONFLICT, &message, schema, &next);
    if removes_subtree(request)
        && let (Some(all), Some(more)) = (
            asked.input_requests.as_mut(),
            removal_question(request).input_requests,
        )
    {
        all.extend(more);
    }
    Err(asked)
}

/// The `current` of a tool error `conflict`, if the result is one.
fn conflict_of(result: &CallToolResult) -> Option<&Value> {
    if result.is_error != Some(true) {
        return None;
    }
    let error = result.structured_content.as_ref()?.get("error")?;
    (error.get("code")? == "conflict").then(|| error.get("current"))?
}

/// `werkbaum_remove_node` with `discard: false` on a stored document.
fn removes_subtree(request: &CallToolRequestParams) -> bool {
    let Some(args) = request.arguments.as_ref() else {
        return false;
    };
    request.name == REMOVE_TOOL
        && args.get("discard") == Some(&Value::Bool(false))
        && args.contains_key("document")
}

fn removal_question(request: &CallToolRequestParams) -> InputRequiredResult {
    let args = request.arguments.as_ref();
    let field = |k: &str| {
        args.and_then(|a| a.get(k))
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .unwrap_or_default()
    };
    let message = format!(
        "Delete node {} of document {} with its whole subtree and description blocks? \
         (`discard: true` would only mark it [-].)",
        field("id"),
        field("document")
    );
    let schema = json!({
        "type": "object",
        "properties": {"confirm": {
            "type": "boolean", "title": "Delete the subtree", "default": false
        }},
        "required": ["confirm"]
    });
    question(REMOVAL, &message, schema, &State::default())
}

/// One form elicitation under `key`, with the state to echo.
fn question(key: &str, message: &str, schema: Value, state: &State) -> InputRequiredResult {
    let request = json!({
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": schema}
    });
    let mut requests = InputRequests::new();
    if let Ok(r) = serde_json::from_value::<InputRequest>(request) {
        requests.insert(key.to_owned(), r);
    }
    InputRequiredResult::new(Some(requests), Some(state.encode()))
}

/// The value of `field` in an accepted elicitation answer (`action: "accept"`), as a string.
fn chosen(reply: &Value, field: &str) -> Option<String> {
    if reply.get("action")? != "accept" {
        return None;
    }
    let v = reply.get("content")?.get(field)?;
    Some(v.as_str().map_or_else(|| v.to_string(), str::to_owned))
}

fn declined(what: &str) -> CallToolResult {
    let mut r = CallToolResult::structured_error(json!({"error": {
        "code": "declined",
        "message": format!("the person declined {what}; nothing was written"),
    }}));
    r.content = vec![ContentBlock::text(format!(
        "error declined: the person declined {what}; nothing was written"
    ))];
    r
}

fn kept(state: &State) -> CallToolResult {
    let version = state.over.as_ref().map(|(v, _)| *v);
    let mut r = CallToolResult::structured_error(json!({"error": {
        "code": "keptTheirs",
        "message": "the person kept the current version; nothing was written",
        "version": version,
    }}));
    r.content = vec![ContentBlock::text(
        "error keptTheirs: the person kept the current version; nothing was written; read it \
         again before another edit"
            .to_owned(),
    )];
    r
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn call(name: &str, args: Value) -> CallToolRequestParams {
        CallToolRequestParams::new(name.to_owned())
            .with_arguments(args.as_object().unwrap().clone())
    }

    fn reply(key: &str, content: Value) -> rmcp::model::InputResponses {
        [(
            key.to_owned(),
            json!({"action": "accept", "content": content}),
        )]
        .into()
    }

    #[test]
    fn only_a_2026_client_that_elicits_is_asked() {
        let new = ProtocolVersion::V_2026_07_28;
        let old = ProtocolVersion::V_2025_11_25;
        assert!(can_ask(Some(&new), true));
        assert!(!can_ask(Some(&new), false));
        assert!(!can_ask(Some(&old), true));
        assert!(!can_ask(None, true));
    }

    #[test]
    fn deleting_a_subtree_asks_first_and_runs_once_confirmed() {
        let req = call(
            REMOVE_TOOL,
            json!({"document": "d1", "base": {"version": 1, "checksum": "c"}, "id": "a", "discard": false}),
        );
        let Before::Ask(q) = before_call(&req).unwrap() else {
            panic!("asks");
        };
        assert!(q.input_requests.unwrap().contains_key(REMOVAL));
        let state = q.request_state.unwrap();
        let retry = req
            .clone()
            .with_input_responses(reply(REMOVAL, json!({"confirm": true})))
            .with_request_state(state.clone());
        let Before::Run(args) = before_call(&retry).unwrap() else {
            panic!("runs");
        };
        assert_eq!(args, req.arguments);
        let no = req
            .clone()
            .with_input_responses(reply(REMOVAL, json!({"confirm": false})))
            .with_request_state(state);
        assert!(matches!(before_call(&no).unwrap(), Before::Answer(r) if r.is_error == Some(true)));
        // Discarding (marking [-]) and the text form are not asked about.
        let discard = call(
            REMOVE_TOOL,
            json!({"document": "d1", "id": "a", "discard": true}),
        );
        assert!(matches!(before_call(&discard).unwrap(), Before::Run(..)));
        let text = call(
            REMOVE_TOOL,
            json!({"text": "x", "id": "a", "discard": false}),
        );
        assert!(matches!(before_call(&text).unwrap(), Before::Run(..)));
    }

    #[test]
    fn a_conflict_asks_which_side_wins_and_mine_writes_over_the_current_version() {
        let conflict = CallToolResult::structured_error(json!({"error": {"code": "conflict",
            "current": {"document": "d1", "version": 3, "checksum": "c3", "text": "t"}}}));
        let req = call(
            "werkbaum_set_status",
            json!({"document": "d1", "base": {"version": 1, "checksum": "c1"}, "id": "a", "status": "done"}),
        );
        let q = after_call(conflict.clone(), &req).unwrap_err();
        assert_eq!(
            q.input_requests.unwrap().keys().collect::<Vec<_>>(),
            [CONFLICT]
        );
        let state = q.request_state.unwrap();
        let mine = req
            .clone()
            .with_input_responses(reply(CONFLICT, json!({"winner": "mine"})))
            .with_request_state(state.clone());
        let Before::Run(Some(args)) = before_call(&mine).unwrap() else {
            panic!("runs");
        };
        assert_eq!(args["base"], json!({"version": 3, "checksum": "c3"}));
        let theirs = req
            .clone()
            .with_input_responses(reply(CONFLICT, json!({"winner": "theirs"})))
            .with_request_state(state.clone());
        assert!(matches!(before_call(&theirs).unwrap(), Before::Answer(_)));
        // A state without the answer that chose `mine` does not move the base.
        let bare = req.clone().with_request_state(state);
        let Before::Run(args) = before_call(&bare).unwrap() else {
            panic!("runs");
        };
        assert_eq!(args, req.arguments);
        // A tampered state is refused; other results pass unchanged.
        assert!(before_call(&req.clone().with_request_state("%%")).is_err());
        let ok = CallToolResult::success(vec![]);
        assert!(after_call(ok, &req).is_ok());
        // A conflict during a removal asks both again: the confirmation is never in the state.
        let remove = call(
            REMOVE_TOOL,
            json!({"document": "d1", "base": {"version": 1, "checksum": "c1"}, "id": "a", "discard": false}),
        );
        let both = after_call(conflict, &remove).unwrap_err();
        assert_eq!(
            both.input_requests.unwrap().keys().collect::<Vec<_>>(),
            [CONFLICT, REMOVAL]
        );
        let only_conflict = remove
            .with_input_responses(reply(CONFLICT, json!({"winner": "mine"})))
            .with_request_state(both.request_state.unwrap());
        assert!(matches!(
            before_call(&only_conflict).unwrap(),
            Before::Ask(_)
        ));
    }
}
