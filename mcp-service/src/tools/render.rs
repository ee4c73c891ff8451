//! The text renderings of the tools' answers (the `content` text beside `structuredContent`):
//! plain functions of the structured values.

use std::fmt::Write as _;

use serde_json::Value;

use super::answer::{Revision, WhoamiAnswer};

pub(crate) fn revision_line(rev: &Revision) -> String {
    match (&rev.document, rev.version) {
        (Some(doc), Some(version)) => format!(
            "revision: document {doc} version {version} checksum {}",
            rev.checksum
        ),
        _ => format!("revision: text checksum {}", rev.checksum),
    }
}

pub(crate) fn summary_line(s: &Value) -> String {
    format!(
        "{} nodes, {} warnings, {} needed, {} stations, exact {}",
        s["nodes"], s["warnings"], s["needed"], s["stations"], s["exact"]
    )
}

pub(crate) fn blocking_summary(findings: &Value) -> String {
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

pub(crate) fn render_findings(findings: &Value, blocking: Option<bool>) -> String {
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

pub(crate) fn render_inspect(result: &Value, revision: &Revision) -> String {
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
    out.push_str(&render_notices(&result["notices"]));
    out
}

/// The notices, one line each (nothing when there are none).
pub(crate) fn render_notices(notices: &Value) -> String {
    let mut out = String::new();
    for n in notices.as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "notice {}: {}",
            n["type"].as_str().unwrap_or("?"),
            n["text"].as_str().unwrap_or("")
        );
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

/// `whoami`'s text: one line per fact, the client as `id ("registered name")`.
pub(crate) fn render_whoami(me: &WhoamiAnswer) -> String {
    let client = match (&me.identity.client, &me.identity.client_name) {
        (Some(id), Some(name)) => format!("{id} (\"{name}\")"),
        (Some(id), None) => id.clone(),
        (None, Some(name)) => format!("\"{name}\""),
        (None, None) => "-".to_owned(),
    };
    format!(
        "subject: {}\nclient: {client}\nauth: {}\nscopes: {}\nhost: {}",
        me.identity.subject.as_deref().unwrap_or("-"),
        me.identity.auth_kind.as_deref().unwrap_or("-"),
        if me.identity.scopes.is_empty() {
            "-".to_owned()
        } else {
            me.identity.scopes.join(" ")
        },
        me.host.as_deref().unwrap_or("-"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Identity;

    #[test]
    fn whoami_shows_the_client_name_beside_its_id() {
        let mut me = WhoamiAnswer {
            identity: Identity {
                subject: Some("alice".into()),
                client: Some("c-7f3a".into()),
                client_name: Some("Claude".into()),
                auth_kind: Some("oauth".into()),
                scopes: vec!["mcp:read".into(), "mcp:write".into()],
                request_id: None,
            },
            host: Some("claude-ai".into()),
            host_version: None,
            protocol_version: None,
        };
        assert_eq!(
            render_whoami(&me),
            "subject: alice\nclient: c-7f3a (\"Claude\")\nauth: oauth\nscopes: mcp:read mcp:write\nhost: claude-ai"
        );
        let structured = super::super::answer::to_value(&me);
        assert_eq!(structured["client"], "c-7f3a");
        assert_eq!(structured["clientName"], "Claude");
        me.identity.client_name = None;
        me.identity.scopes.clear();
        assert!(render_whoami(&me).contains("client: c-7f3a\nauth: oauth\nscopes: -"));
        let structured = super::super::answer::to_value(&me);
        assert!(structured["clientName"].is_null());
    }
}
