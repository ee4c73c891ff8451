//! Filtering a `tools/list` answer down to the tools a principal may call, in either framing
//! the streamable-HTTP transport uses (one JSON body, or SSE events carrying JSON-RPC messages).
//! The answer is edited where it lies ([`crate::raw_json`]): the refused tools are cut out of
//! `result.tools`, every other byte — key order, number text, string escapes, the kept tools —
//! stays as the server wrote it.

use bytes::Bytes;

use super::sse;
use crate::{
    policy::Annotation,
    raw_json::{self, Edits, Span},
};

/// Why a `tools/list` answer could not be filtered. The proxy must not forward the answer
/// unfiltered then (fail closed).
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("the tools/list answer is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the tools/list answer's result.tools is not an array")]
    Shape,
}

/// Rewrites a `tools/list` answer so that only tools with `keep(name, annotation)` remain; the
/// annotation is read from the listed tool itself (`annotations.readOnlyHint`).
///
/// JSON (`content_type_is_sse == false`): the body is a JSON-RPC response (or an array of them);
/// `result.tools` is filtered. SSE: every `data:` event whose data is a JSON-RPC response with
/// `result.tools` is rewritten (its data lines become one `data: ` line at the place of the
/// first); every other event and line (`id:`, `event:`, `retry:`, comments, other messages,
/// the terminators) is kept byte for byte. Tools without a string `name` are dropped.
///
/// Every list result the filter saw, whether or not it lost tools, becomes `cacheScope:
/// "private"` (another principal may see another list; [`mark_private`]), its `ttlMs` kept.
/// Returns `None` when nothing had to change (forward the body as it is). A rewritten message
/// differs from the server's only by the tools cut out and the cache scope (and, in SSE, its
/// data lines' framing: `data: ` before each).
pub fn filter_tools_list(
    body: &[u8],
    content_type_is_sse: bool,
    keep: impl Fn(&str, Annotation) -> bool,
) -> Result<Option<Bytes>, FilterError> {
    filter_listed(body, content_type_is_sse, |n, a, _| keep(n, a), true)
}

/// [`filter_tools_list`] with `keep` also given the listed tool's JSON text (the pins compare
/// its definition), and `private`: whether a list the filter saw is marked `cacheScope:
/// "private"` (false: only a list that lost tools is rewritten, its cache scope as the server
/// said — what the pins cut is the same for everyone).
pub(crate) fn filter_listed(
    body: &[u8],
    content_type_is_sse: bool,
    keep: impl Fn(&str, Annotation, &[u8]) -> bool,
    private: bool,
) -> Result<Option<Bytes>, FilterError> {
    let edit = |text: &[u8], span: Span, edits: &mut Edits| {
        filter_message(text, span, &keep, private, edits)
    };
    filter_framed(body, content_type_is_sse, &edit)
}

/// Rewrites a `server/discover` answer for a principal, as [`filter_tools_list`] does a
/// `tools/list` one: `capabilities.tools` cut when the principal may list no tool
/// (`tools_visible` false), `supportedVersions` cut to the revisions the gateway knows (it
/// refuses the others), and `cacheScope: "private"` ([`mark_private`]); every other byte as
/// the server wrote it.
pub(crate) fn filter_discover(
    body: &[u8],
    content_type_is_sse: bool,
    tools_visible: bool,
) -> Result<Option<Bytes>, FilterError> {
    let edit = |text: &[u8], span: Span, edits: &mut Edits| {
        discover_message(text, span, tools_visible, edits)
    };
    filter_framed(body, content_type_is_sse, &edit)
}

/// What edits one JSON-RPC message (or each of an array of them): whether it changed.
trait EditMessage: Fn(&[u8], Span, &mut Edits) -> Result<bool, FilterError> {}
impl<F: Fn(&[u8], Span, &mut Edits) -> Result<bool, FilterError>> EditMessage for F {}

/// A body in either framing, each message edited by `edit`.
fn filter_framed(
    body: &[u8],
    content_type_is_sse: bool,
    edit: &impl EditMessage,
) -> Result<Option<Bytes>, FilterError> {
    if content_type_is_sse {
        filter_sse(body, edit)
    } else {
        filter_text(body, edit)
    }
}

/// The edits of a `server/discover` answer at `span` (see [`filter_discover`]).
fn discover_message(
    text: &[u8],
    span: Span,
    tools_visible: bool,
    edits: &mut Edits,
) -> Result<bool, FilterError> {
    if let Some(items) = raw_json::elements(text, span.clone()) {
        let mut changed = false;
        for item in items {
            changed |= discover_message(text, item, tools_visible, edits)?;
        }
        return Ok(changed);
    }
    let Some(result) = raw_json::get(text, span, "result") else {
        return Ok(false);
    };
    if raw_json::members(text, result.clone()).is_none() {
        return Err(FilterError::Shape);
    }
    let mut changed = false;
    if !tools_visible
        && let Some(caps) = raw_json::get(text, result.clone(), "capabilities")
        && let Some(without) = raw_json::without_members(text, &caps, "tools")
    {
        edits.replace(caps, without);
        changed = true;
    }
    if let Some(versions) = raw_json::get(text, result.clone(), "supportedVersions")
        && let Some(all) = raw_json::elements(text, versions.clone())
    {
        let kept: Vec<bool> = all
            .iter()
            .map(|v| {
                text.get(v.clone())
                    .and_then(raw_json::string)
                    .is_some_and(|v| crate::mcp::SUPPORTED_VERSIONS.contains(&v.as_ref()))
            })
            .collect();
        if !kept.iter().all(|k| *k) {
            edits.replace(
                versions.clone(),
                raw_json::retain_elements(text, &versions, &all, &kept),
            );
            changed = true;
        }
    }
    Ok(mark_private(text, &result, edits) || changed)
}

/// A whole JSON text filtered: the new text, or `None` when nothing was removed.
fn filter_text(text: &[u8], edit: &impl EditMessage) -> Result<Option<Bytes>, FilterError> {
    serde_json::from_slice::<serde::de::IgnoredAny>(text)?;
    let mut edits = Edits::default();
    if !edit(text, raw_json::trimmed(text), &mut edits)? {
        return Ok(None);
    }
    let mut out = text.to_vec();
    edits.apply(&mut out);
    Ok(Some(Bytes::from(out)))
}

/// The edits that filter `result.tools` of the JSON-RPC response at `span` (or of each in an
/// array); whether anything was removed.
fn filter_message(
    text: &[u8],
    span: Span,
    keep: &impl Fn(&str, Annotation, &[u8]) -> bool,
    private: bool,
    edits: &mut Edits,
) -> Result<bool, FilterError> {
    if let Some(items) = raw_json::elements(text, span.clone()) {
        let mut changed = false;
        for item in items {
            changed |= filter_message(text, item, keep, private, edits)?;
        }
        return Ok(changed);
    }
    let Some(result) = raw_json::get(text, span, "result") else {
        return Ok(false);
    };
    let Some(tools) = raw_json::get(text, result.clone(), "tools") else {
        return Ok(false);
    };
    let Some(all) = raw_json::elements(text, tools.clone()) else {
        return Err(FilterError::Shape);
    };
    let kept: Vec<bool> = all
        .iter()
        .map(|tool| {
            let read_only = raw_json::get(text, tool.clone(), "annotations")
                .and_then(|a| raw_json::get(text, a, "readOnlyHint"))
                .is_some_and(|hint| text.get(hint) == Some(b"true"));
            let annotation = if read_only {
                Annotation::ReadOnly
            } else {
                Annotation::Writes
            };
            raw_json::get(text, tool.clone(), "name")
                .and_then(|name| text.get(name))
                .and_then(raw_json::string)
                .is_some_and(|name| {
                    keep(
                        &name,
                        annotation,
                        text.get(tool.clone()).unwrap_or_default(),
                    )
                })
        })
        .collect();
    let marked = private && mark_private(text, &result, edits);
    if kept.iter().all(|k| *k) {
        return Ok(marked);
    }
    edits.replace(
        tools.clone(),
        raw_json::retain_elements(text, &tools, &all, &kept),
    );
    Ok(true)
}

/// `cacheScope` as JSON text: what a list answer filtered per principal says (MCP 2026-07-28,
/// caching: `"private"` is for "filtered list results that vary per user").
const PRIVATE: &[u8] = b"\"private\"";

/// The edit that makes the list result at `result` `cacheScope: "private"`: the server's value
/// replaced, or the member added at the end; `ttlMs` and every other byte as the server wrote
/// them. Whether an edit was needed (not when the server already said `"private"`).
pub(crate) fn mark_private(text: &[u8], result: &Span, edits: &mut Edits) -> bool {
    match raw_json::get(text, result.clone(), "cacheScope") {
        Some(value) if text.get(value.clone()) == Some(PRIVATE) => false,
        Some(value) => {
            edits.replace(value, PRIVATE);
            true
        }
        None => {
            raw_json::append_member(text, result, b"\"cacheScope\":\"private\"", edits);
            true
        }
    }
}

fn filter_sse(body: &[u8], edit: &impl EditMessage) -> Result<Option<Bytes>, FilterError> {
    let all: Vec<sse::Line<'_>> = sse::lines(body).collect();
    let mut out: Option<Vec<u8>> = None;
    // Byte offset in `body` up to which `out` (once it exists) is complete.
    let mut copied = 0;
    let mut offset = 0;
    for event in all.split_inclusive(|l| l.content.is_empty()) {
        let event_len: usize = event.iter().map(|l| l.content.len() + l.end.len()).sum();
        if let Some(rewritten) = rewrite_event(event, edit)? {
            let out = out.get_or_insert_with(|| Vec::with_capacity(body.len()));
            out.extend_from_slice(&body[copied..offset]);
            out.extend_from_slice(&rewritten);
            copied = offset + event_len;
        }
        offset += event_len;
    }
    Ok(out.map(|mut out| {
        out.extend_from_slice(&body[copied..]);
        Bytes::from(out)
    }))
}

/// The event rewritten when its data is a `tools/list` response that lost tools.
fn rewrite_event(
    event: &[sse::Line<'_>],
    edit: &impl EditMessage,
) -> Result<Option<Vec<u8>>, FilterError> {
    let mut data: Option<Vec<u8>> = None;
    for value in event.iter().filter_map(sse::Line::data) {
        match &mut data {
            Some(d) => {
                d.push(b'\n');
                d.extend_from_slice(value);
            }
            None => data = Some(value.to_vec()),
        }
    }
    let Some(data) = data else {
        return Ok(None);
    };
    // Data that is not JSON is some other message: not ours to judge, kept as it is.
    if !raw_json::is_valid(&data) {
        return Ok(None);
    }
    let Some(json) = filter_text(&data, edit)? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(json.len() + 64);
    let mut wrote_data = false;
    for line in event {
        if line.data().is_some() {
            if !wrote_data {
                wrote_data = true;
                // An unterminated last data line still needs to end before the next field.
                let end = if line.end.is_empty() { b"\n" } else { line.end };
                // The data's own line breaks (between the data lines it came in) stay ones.
                for piece in json.split(|b| *b == b'\n') {
                    out.extend_from_slice(b"data: ");
                    out.extend_from_slice(piece);
                    out.extend_from_slice(end);
                }
            }
        } else {
            out.extend_from_slice(line.content);
            out.extend_from_slice(line.end);
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// Captured from the real mcp-service: `initialize`, then `tools/list` (rmcp 0.x output,
    /// SSE-framed with the priming event and `id:` after `data:`), and the same message as JSON.
    const REAL_SSE: &[u8] = include_bytes!("testdata/tools_list.sse");
    const REAL_JSON: &[u8] = include_bytes!("testdata/tools_list.json");

    const READ: [&str; 5] = [
        "werkbaum_read",
        "werkbaum_inspect",
        "werkbaum_check",
        "werkbaum_history",
        "whoami",
    ];

    fn names(message: &[u8]) -> Vec<String> {
        let v: Value = serde_json::from_slice(message).unwrap();
        v["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    /// Keeps the read tools, and checks that the annotation read from the answer agrees.
    fn read_only(name: &str, annotation: Annotation) -> bool {
        let read = READ.contains(&name);
        assert_eq!(read, annotation == Annotation::ReadOnly, "{name}");
        read
    }

    #[test]
    fn real_json_answer_keeps_the_read_tools() {
        assert_eq!(names(REAL_JSON).len(), 13);
        let out = filter_tools_list(REAL_JSON, false, read_only)
            .unwrap()
            .unwrap();
        let mut want: Vec<String> = READ.iter().map(|s| (*s).to_owned()).collect();
        want.sort();
        assert_eq!(sorted(names(&out)), want);
        // Everything else of the message is intact.
        let (a, b): (Value, Value) = (
            serde_json::from_slice(REAL_JSON).unwrap(),
            serde_json::from_slice(&out).unwrap(),
        );
        assert_eq!(a["id"], b["id"]);
        assert_eq!(a["jsonrpc"], b["jsonrpc"]);
        let whoami = |v: &Value| {
            v["result"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == "whoami")
                .cloned()
                .unwrap()
        };
        assert_eq!(whoami(&a), whoami(&b));
    }

    #[test]
    fn nothing_removed_is_still_private_and_otherwise_unchanged() {
        let out = filter_tools_list(REAL_JSON, false, |_, _| true)
            .unwrap()
            .unwrap();
        let (a, mut b): (Value, Value) = (
            serde_json::from_slice(REAL_JSON).unwrap(),
            serde_json::from_slice(&out).unwrap(),
        );
        assert_eq!(b["result"]["cacheScope"], "private");
        b["result"].as_object_mut().unwrap().remove("cacheScope");
        assert_eq!(a, b);
        let out = filter_tools_list(REAL_SSE, true, |_, _| true)
            .unwrap()
            .unwrap();
        assert!(
            std::str::from_utf8(&out)
                .unwrap()
                .contains(r#""cacheScope":"private"}"#)
        );
        // Already private: nothing to change.
        let private = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"cacheScope":"private"}}"#;
        assert!(
            filter_tools_list(private, false, |_, _| true)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_discover_answer_loses_hidden_tools_and_unknown_versions() {
        let body = br#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2099-01-01","2026-07-28"],"capabilities":{"prompts":{},"tools":{"listChanged":true},"resources":{}},"ttlMs":5,"cacheScope":"public"}}"#;
        let out = filter_discover(body, false, false).unwrap().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out),
            r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"prompts":{},"resources":{}},"ttlMs":5,"cacheScope":"private"}}"#
        );
        let out = filter_discover(body, false, true).unwrap().unwrap();
        assert!(String::from_utf8_lossy(&out).contains(r#""tools":{"listChanged":true}"#));
        let framed = [b"data: ".as_slice(), body, b"\n\n"].concat();
        let out = filter_discover(&framed, true, false).unwrap().unwrap();
        assert!(!String::from_utf8_lossy(&out).contains("tools"));
    }

    #[test]
    fn a_public_list_becomes_private_with_its_ttl_kept() {
        let body = br#"{"jsonrpc":"2.0","id":1,"result":{"ttlMs":60000,"cacheScope":"public","tools":[{"name":"a"},{"name":"b"}]}}"#;
        let out = filter_tools_list(body, false, |n, _| n == "a")
            .unwrap()
            .unwrap();
        assert_eq!(
            &out[..],
            br#"{"jsonrpc":"2.0","id":1,"result":{"ttlMs":60000,"cacheScope":"private","tools":[{"name":"a"}]}}"#
        );
    }

    #[test]
    fn real_sse_answer_rewrites_only_the_data_line() {
        let out = filter_tools_list(REAL_SSE, true, read_only)
            .unwrap()
            .unwrap();
        let text = std::str::from_utf8(&out).unwrap();
        // The priming event and the trailing id line are untouched.
        assert!(text.starts_with("data: \nid: 0/0\nretry: 3000\n\ndata: {"));
        assert!(text.ends_with("}\nid: 1/0\n\n"));
        let data_lines: Vec<&str> = text.lines().filter(|l| l.starts_with("data: {")).collect();
        assert_eq!(data_lines.len(), 1);
        let message = data_lines[0].strip_prefix("data: ").unwrap();
        assert_eq!(sorted(names(message.as_bytes())).len(), 5);
        assert!(
            names(message.as_bytes())
                .iter()
                .all(|n| READ.contains(&n.as_str()))
        );
    }

    #[test]
    fn sse_multi_line_data_crlf_comments_and_other_messages() {
        let body = b": comment\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\n\r\n\
id: 7\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\r\ndata:\"result\":{\"tools\":[{\"name\":\"a\"},{\"name\":\"b\"},{\"title\":\"nameless\"}]}}\r\nretry: 10\r\n\r\n\
data: not json\r\n\r\n";
        let out = filter_tools_list(body, true, |n, _| n == "a")
            .unwrap()
            .unwrap();
        let want = b": comment\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\n\r\n\
id: 7\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\r\ndata: \"result\":{\"tools\":[{\"name\":\"a\"}],\"cacheScope\":\"private\"}}\r\nretry: 10\r\n\r\n\
data: not json\r\n\r\n";
        assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(want));
    }

    #[test]
    fn sse_unterminated_last_event_is_filtered_too() {
        let body = b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[{\"name\":\"a\"},{\"name\":\"b\"}]}}";
        let out = filter_tools_list(body, true, |n, _| n == "b")
            .unwrap()
            .unwrap();
        assert_eq!(
            &out[..],
            b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[{\"name\":\"b\"}],\"cacheScope\":\"private\"}}\n"
        );
    }

    #[test]
    fn errors_and_other_shapes() {
        assert!(matches!(
            filter_tools_list(b"{nope", false, |_, _| true),
            Err(FilterError::Json(_))
        ));
        let bad = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":{"name":"a"}}}"#;
        assert!(matches!(
            filter_tools_list(bad, false, |_, _| true),
            Err(FilterError::Shape)
        ));
        let mut sse_bad = b"data: ".to_vec();
        sse_bad.extend_from_slice(bad);
        sse_bad.extend_from_slice(b"\n\n");
        assert!(matches!(
            filter_tools_list(&sse_bad, true, |_, _| true),
            Err(FilterError::Shape)
        ));
        // A JSON-RPC error answer has nothing to filter.
        let err = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#;
        assert!(
            filter_tools_list(err, false, |_, _| false)
                .unwrap()
                .is_none()
        );
        // An array of responses is filtered element by element.
        let arr = br#"[{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"},{"name":"b"}]}}]"#;
        let out = filter_tools_list(arr, false, |n, _| n == "a")
            .unwrap()
            .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v[0]["result"]["tools"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_filtered_answer_keeps_the_servers_bytes() {
        let tool = |name: &str| {
            format!(
                r#"{{"name":"{name}","inputSchema":{{"type":"object","properties":{{"z":{{"default":1.0}},"a":{{"maximum":9007199254740993}}}}}},"description":"caf\u00e9 \"{name}\"","annotations":{{"readOnlyHint":true}}}}"#
            )
        };
        let body = format!(
            "{{\"result\":{{\"tools\":[\n {},\n {},\n {}\n],\"nextCursor\":\"c\"}},\"jsonrpc\":\"2.0\",\"id\":9007199254740993}}",
            tool("a"),
            tool("b"),
            tool("c")
        );
        let want = format!(
            "{{\"result\":{{\"tools\":[\n {},\n {}\n],\"nextCursor\":\"c\",\"cacheScope\":\"private\"}},\"jsonrpc\":\"2.0\",\"id\":9007199254740993}}",
            tool("a"),
            tool("c")
        );
        let out = filter_tools_list(body.as_bytes(), false, |n, _| n != "b")
            .unwrap()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out), want);
        // In SSE, the pretty-printed answer comes in several data lines: they stay as they were.
        let framed = |json: &str| format!("id: 1\ndata: {}\n\n", json.replace('\n', "\ndata: "));
        let out = filter_tools_list(framed(&body).as_bytes(), true, |n, _| n != "b")
            .unwrap()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out), framed(&want));
    }
}
