//! Reading the audit log for the console: the newest lines of the file (and of its last
//! rotated one), each line of any kind (MCP request, sign-in or consent, console action) read
//! into one row shape, the filter (principal, route, tool, decision, time) and its paging.
//! Pure but for [`read_newest`].

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

use serde_json::Value;

/// Rows per page.
pub(crate) const PER_PAGE: usize = 50;
/// How much of the log the console reads (the newest bytes), so that a page stays cheap.
pub(crate) const MAX_READ_BYTES: u64 = 8 * 1024 * 1024;

/// The filter of the audit page, from its query string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AuditFilter {
    /// Part of the subject, client, user or admin.
    pub(crate) principal: String,
    /// The route's name, exactly.
    pub(crate) route: String,
    /// Part of the tool, prompt or resource name (or the console action's target).
    pub(crate) tool: String,
    /// `allowed`, `denied`, `other` (every line that is not an MCP request), or empty.
    pub(crate) decision: String,
    /// RFC 3339 prefixes in UTC (`2026-12-03T18:00`), inclusive.
    pub(crate) from: String,
    pub(crate) to: String,
    /// 1-based.
    pub(crate) page: usize,
}

impl Default for AuditFilter {
    fn default() -> Self {
        Self {
            principal: String::new(),
            route: String::new(),
            tool: String::new(),
            decision: String::new(),
            from: String::new(),
            to: String::new(),
            page: 1,
        }
    }
}

/// One audit line as the page shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AuditRow {
    pub(crate) time: String,
    pub(crate) who: String,
    pub(crate) route: String,
    /// The MCP method, or the event (`sign_in`, `consent`, `console token_revoke`, …).
    pub(crate) what: String,
    pub(crate) name: String,
    /// `allowed` / `denied` for MCP requests, the outcome for the others.
    pub(crate) decision: String,
    pub(crate) reason: String,
    /// The upstream status, or a detail (client IP, client id).
    pub(crate) status: String,
    /// Whether the line is an MCP request's.
    pub(crate) mcp: bool,
}

fn text(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// One line of the log as a row; `None` for a line that is not a JSON object.
pub(crate) fn parse_line(line: &str) -> Option<AuditRow> {
    let v: Value = serde_json::from_str(line).ok()?;
    if !v.is_object() {
        return None;
    }
    let time = text(&v, "time");
    if let Some(method) = v.get("method").and_then(Value::as_str) {
        let who = match v.get("principal") {
            Some(p) if p.is_object() => {
                format!(
                    "{} {} / {}",
                    text(p, "kind"),
                    text(p, "subject"),
                    text(p, "client")
                )
            }
            _ => "anonymous".to_owned(),
        };
        return Some(AuditRow {
            time,
            who,
            route: text(&v, "route"),
            what: method.to_owned(),
            name: text(&v, "name"),
            decision: text(&v, "decision"),
            reason: text(&v, "reason"),
            status: text(&v, "upstream_status"),
            mcp: true,
        });
    }
    let event = text(&v, "event");
    if event == "console" {
        return Some(AuditRow {
            time,
            who: format!("admin {}", text(&v, "admin")),
            route: String::new(),
            what: format!("console {}", text(&v, "action")),
            name: text(&v, "target"),
            decision: text(&v, "outcome"),
            reason: String::new(),
            status: text(&v, "client_ip"),
            mcp: false,
        });
    }
    Some(AuditRow {
        time,
        who: text(&v, "user"),
        route: String::new(),
        what: event,
        name: text(&v, "client_id"),
        decision: text(&v, "outcome"),
        reason: text(&v, "reason"),
        status: text(&v, "client_ip"),
        mcp: false,
    })
}

impl AuditFilter {
    /// The filter a query string asks for (unknown keys ignored; a bad page is page 1).
    pub(crate) fn from_query(query: &str) -> Self {
        let mut f = Self::default();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            let v = v.trim().chars().take(200).collect::<String>();
            match k.as_ref() {
                "principal" => f.principal = v,
                "route" => f.route = v,
                "tool" => f.tool = v,
                "decision" => f.decision = v,
                "from" => f.from = v,
                "to" => f.to = v,
                "page" => f.page = v.parse().ok().filter(|p| *p >= 1).unwrap_or(1),
                _ => {}
            }
        }
        f
    }

    /// The query string of this filter at `page`.
    pub(crate) fn query(&self, page: usize) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("principal", &self.principal),
            ("route", &self.route),
            ("tool", &self.tool),
            ("decision", &self.decision),
            ("from", &self.from),
            ("to", &self.to),
        ] {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
        q.append_pair("page", &page.to_string());
        q.finish()
    }

    pub(crate) fn matches(&self, r: &AuditRow) -> bool {
        let has = |field: &str, part: &str| part.is_empty() || field.contains(part);
        let decision = match self.decision.as_str() {
            "" => true,
            "other" => !r.mcp,
            d => r.mcp && r.decision == d,
        };
        // Times are RFC 3339 UTC: comparing the prefix as long as the bound compares times.
        let prefix = |n: usize| r.time.get(..n.min(r.time.len())).unwrap_or_default();
        has(&r.who, &self.principal)
            && (self.route.is_empty() || r.route == self.route)
            && has(&r.name, &self.tool)
            && decision
            && (self.from.is_empty() || prefix(self.from.len()) >= self.from.as_str())
            && (self.to.is_empty() || prefix(self.to.len()) <= self.to.as_str())
    }
}

/// The filter's page of `lines` (newest first): its rows, and whether older ones match.
pub(crate) fn page<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    filter: &AuditFilter,
) -> (Vec<AuditRow>, bool) {
    let skip = (filter.page.max(1) - 1) * PER_PAGE;
    let mut matching = lines
        .into_iter()
        .filter_map(parse_line)
        .filter(|r| filter.matches(r))
        .skip(skip);
    let rows: Vec<AuditRow> = matching.by_ref().take(PER_PAGE).collect();
    let more = matching.next().is_some();
    (rows, more)
}

/// The newest lines of the log at `path` and then of `path.1`, newest first, reading at most
/// [`MAX_READ_BYTES`] in all (a line cut by that bound is dropped). A missing file is empty.
pub(crate) fn read_newest(path: &Path) -> std::io::Result<Vec<String>> {
    let mut lines = Vec::new();
    let mut budget = MAX_READ_BYTES;
    let mut rotated = path.as_os_str().to_owned();
    rotated.push(".1");
    for p in [path, Path::new(&rotated)] {
        if budget == 0 {
            break;
        }
        let mut file = match std::fs::File::open(p) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        let start = len.saturating_sub(budget);
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::with_capacity((len - start) as usize);
        file.take(budget).read_to_end(&mut bytes)?;
        budget -= bytes.len() as u64;
        let text = String::from_utf8_lossy(&bytes);
        let mut file_lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        if start > 0 && !file_lines.is_empty() {
            file_lines.remove(0);
        }
        lines.extend(file_lines.iter().rev().map(|l| (*l).to_owned()));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const MCP: &str = r#"{"time":"2026-12-03T18:05:01.000Z","request_id":"r1","route":"notes","principal":{"kind":"oauth","subject":"alice","client":"claude"},"method":"tools/call","name":"werkbaum_write","decision":"denied","reason":"insufficient_scope","upstream_status":null,"duration_ms":0}"#;
    const SIGN_IN: &str = r#"{"time":"2026-12-03T18:01:00.000Z","event":"sign_in","via":"password","user":"root","client_id":null,"outcome":"success","reason":null,"scopes":null,"resource":null,"client_ip":"127.0.0.1"}"#;
    const CONSOLE: &str = r#"{"time":"2026-12-03T18:10:00.000Z","event":"console","action":"token_revoke","admin":"root","target":"ci","outcome":"done","client_ip":"127.0.0.1"}"#;

    #[test]
    fn every_kind_of_line_reads_as_a_row() {
        let r = parse_line(MCP).unwrap();
        assert_eq!(r.who, "oauth alice / claude");
        assert_eq!(
            (r.route.as_str(), r.name.as_str()),
            ("notes", "werkbaum_write")
        );
        assert_eq!(
            (r.decision.as_str(), r.reason.as_str()),
            ("denied", "insufficient_scope")
        );
        assert!(r.mcp);
        let s = parse_line(SIGN_IN).unwrap();
        assert_eq!(
            (s.who.as_str(), s.what.as_str(), s.decision.as_str()),
            ("root", "sign_in", "success")
        );
        let c = parse_line(CONSOLE).unwrap();
        assert_eq!(
            (c.what.as_str(), c.name.as_str()),
            ("console token_revoke", "ci")
        );
        assert!(parse_line("not json").is_none() && parse_line("[1]").is_none());
    }

    #[test]
    fn filters_by_each_field_and_time() {
        let rows: Vec<AuditRow> = [MCP, SIGN_IN, CONSOLE]
            .iter()
            .map(|l| parse_line(l).unwrap())
            .collect();
        let count = |q: &str| {
            let f = AuditFilter::from_query(q);
            rows.iter().filter(|r| f.matches(r)).count()
        };
        assert_eq!(count(""), 3);
        assert_eq!(count("principal=alice"), 1);
        assert_eq!(count("principal=root"), 2);
        assert_eq!(count("route=notes"), 1);
        assert_eq!(count("route=note"), 0, "routes match exactly");
        assert_eq!(count("tool=werkbaum"), 1);
        assert_eq!(count("decision=denied"), 1);
        assert_eq!(count("decision=allowed"), 0);
        assert_eq!(count("decision=other"), 2);
        assert_eq!(count("from=2026-12-03T18:05"), 2);
        assert_eq!(
            count("to=2026-12-03T18:05"),
            2,
            "the bound's minute is included"
        );
        assert_eq!(count("from=2026-12-03T18:02&to=2026-12-03T18:09"), 1);
    }

    #[test]
    fn query_round_trips_and_pages_are_bounded() {
        let f = AuditFilter::from_query("principal=a+b%26c&route=notes&page=3&x=1");
        assert_eq!(f.principal, "a b&c");
        assert_eq!(f.page, 3);
        assert_eq!(AuditFilter::from_query(&f.query(3)), f);
        assert_eq!(AuditFilter::from_query("page=0").page, 1);
        assert_eq!(AuditFilter::from_query("page=x").page, 1);
    }

    #[test]
    fn pages_take_fifty_matching_lines_and_say_whether_more_match() {
        let lines: Vec<String> = (0..120).map(|_| MCP.to_owned()).collect();
        let mut f = AuditFilter::default();
        let (rows, more) = page(lines.iter().map(String::as_str), &f);
        assert_eq!((rows.len(), more), (PER_PAGE, true));
        f.page = 3;
        let (rows, more) = page(lines.iter().map(String::as_str), &f);
        assert_eq!((rows.len(), more), (20, false));
        f.decision = "allowed".into();
        assert_eq!(page(lines.iter().map(String::as_str), &f).0.len(), 0);
    }

    #[test]
    fn reads_the_newest_lines_first_across_the_rotated_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        std::fs::write(dir.path().join("audit.jsonl.1"), "old1\nold2\n").unwrap();
        std::fs::write(&path, "new1\nnew2\n").unwrap();
        assert_eq!(
            read_newest(&path).unwrap(),
            ["new2", "new1", "old2", "old1"]
        );
        assert!(read_newest(&dir.path().join("none")).unwrap().is_empty());
    }
}
