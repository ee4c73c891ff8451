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
            let _ = write!(
                out,
                "{timestamp} {level:>5} {target}: request request_id={} method={} path={} \
                 route={:?} status={} subject={:?} client={:?} client_ip={} user_agent={} ms={} \
                 reason={:?} error={}",
                line.request_id,
                line.method,
                line.path,
                line.route,
                line.status,
                line.subject,
                line.client,
                line.client_ip,
                line.user_agent,
                line.ms,
                line.reason,
                line.error,
            );
        }
    }
    out.push(b'\n');
    out
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
