//! The request line written straight into the batched stderr buffer, in the subscriber's text
//! or JSON layout, without tracing's field visitors (the per-request formatting cost of the
//! generic formatter); a terminal (colour) keeps the subscriber's own line.

use std::io::Write as _;

use pforte_clock::UtcDateTime;
use serde::Serialize;

use super::LogFormat;

/// The fields of one request line, in the order they are written.
#[derive(Debug, Serialize)]
pub(crate) struct RequestLine<'a> {
    pub(crate) request_id: &'a str,
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) route: &'a str,
    pub(crate) status: u16,
    pub(crate) subject: &'a str,
    pub(crate) client: &'a str,
    pub(crate) client_ip: &'a str,
    pub(crate) user_agent: &'a str,
    pub(crate) ms: u64,
    pub(crate) reason: &'a str,
    pub(crate) error: &'a str,
}

/// The JSON layer's own keys around the fields (`flatten_event`).
#[derive(Serialize)]
struct JsonLine<'a> {
    timestamp: &'a str,
    level: &'a str,
    message: &'static str,
    #[serde(flatten)]
    fields: &'a RequestLine<'a>,
    target: &'a str,
}

/// One request line in `format`, ending in a newline. `path`, `user_agent` and `error` are
/// already escaped for one line (`logging::untrusted`); the text layout quotes the plain
/// string fields as the subscriber does (`route="mcp"`).
pub(crate) fn render(
    format: LogFormat,
    now_ms: u64,
    warn: bool,
    target: &str,
    line: &RequestLine<'_>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(320);
    let timestamp = UtcDateTime::from_unix_ms(now_ms).rfc3339_ms();
    let level = if warn { "WARN" } else { "INFO" };
    match format {
        LogFormat::Json => {
            let json = JsonLine {
                timestamp: &timestamp,
                level,
                message: "request",
                fields: line,
                target,
            };
            // Writing to a Vec of plain strings and numbers cannot fail.
            let _ = serde_json::to_writer(&mut out, &json);
        }
        LogFormat::Text => {
            // What `write!` would write with `{:?}` for the quoted fields, without its
            // formatting machinery (this is on every request's path).
            // `{timestamp} {level:>5} {target}`: both levels have four letters.
            for part in [&timestamp, "  ", level, " ", target] {
                out.extend_from_slice(part.as_bytes());
            }
            plain(&mut out, ": request request_id=", line.request_id);
            plain(&mut out, " method=", line.method);
            plain(&mut out, " path=", line.path);
            quoted(&mut out, " route=", line.route);
            let _ = write!(out, " status={}", line.status);
            quoted(&mut out, " subject=", line.subject);
            quoted(&mut out, " client=", line.client);
            plain(&mut out, " client_ip=", line.client_ip);
            plain(&mut out, " user_agent=", line.user_agent);
            let _ = write!(out, " ms={}", line.ms);
            quoted(&mut out, " reason=", line.reason);
            plain(&mut out, " error=", line.error);
        }
    }
    out.push(b'\n');
    out
}

/// `key` and `value` as they are.
fn plain(out: &mut Vec<u8>, key: &str, value: &str) {
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(value.as_bytes());
}

/// `key`, then `value` as `{:?}` writes it: printable ASCII other than `"` and `\` as it is,
/// between quotes; anything else through `Debug`'s escaping.
fn quoted(out: &mut Vec<u8>, key: &str, value: &str) {
    out.extend_from_slice(key.as_bytes());
    if value
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
    {
        out.push(b'"');
        out.extend_from_slice(value.as_bytes());
        out.push(b'"');
    } else {
        let _ = write!(out, "{value:?}");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn line() -> RequestLine<'static> {
        RequestLine {
            request_id: "0b1c",
            method: "POST",
            path: "/mcp",
            route: "mcp",
            status: 200,
            subject: "operator",
            client: "laptop",
            client_ip: "127.0.0.1",
            user_agent: "curl/8 \\u{1b}",
            ms: 3,
            reason: "-",
            error: "-",
        }
    }

    #[test]
    fn json_has_the_layer_keys_and_every_field() {
        let out = render(
            LogFormat::Json,
            1_764_790_000_123,
            false,
            "pforte::x",
            &line(),
        );
        assert_eq!(out.last(), Some(&b'\n'));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["message"], "request");
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["target"], "pforte::x");
        assert_eq!(v["status"], 200);
        assert_eq!(v["user_agent"], "curl/8 \\u{1b}");
        assert!(v["timestamp"].as_str().unwrap().ends_with(".123Z"), "{v}");
        assert_eq!(v.as_object().unwrap().len(), 4 + 12);
    }

    #[test]
    fn text_is_what_the_format_string_wrote() {
        let odd = RequestLine {
            subject: "o\"p\\q\u{7f}é",
            client: "",
            reason: "tab\there",
            ..line()
        };
        for (l, warn) in [(line(), false), (odd, true)] {
            let level = if warn { "WARN" } else { "INFO" };
            let ts = UtcDateTime::from_unix_ms(1_764_790_000_123).rfc3339_ms();
            let expected = format!(
                "{ts} {level:>5} t: request request_id={} method={} path={} route={:?} \
                 status={} subject={:?} client={:?} client_ip={} user_agent={} ms={} \
                 reason={:?} error={}\n",
                l.request_id,
                l.method,
                l.path,
                l.route,
                l.status,
                l.subject,
                l.client,
                l.client_ip,
                l.user_agent,
                l.ms,
                l.reason,
                l.error,
            );
            let out = render(LogFormat::Text, 1_764_790_000_123, warn, "t", &l);
            assert_eq!(String::from_utf8(out).unwrap(), expected);
        }
    }

    #[test]
    fn text_is_one_line_in_the_subscriber_layout() {
        let out = render(LogFormat::Text, 0, true, "pforte::x", &line());
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches('\n').count(), 1);
        assert!(
            text.starts_with("1970-01-01T00:00:00.000Z  WARN pforte::x: request request_id=0b1c"),
            "{text}"
        );
        assert!(
            text.contains(" route=\"mcp\" status=200 subject=\"operator\""),
            "{text}"
        );
    }
}
