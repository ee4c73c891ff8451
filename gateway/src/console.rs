//! The operator console at `/admin`: what the gateway shows an admin in a browser (overview
//! with the last hour's charts, routes, the audit log, static tokens, OAuth grants, users and
//! clients, held tool changes) and the few actions it takes (create or revoke a token, revoke a
//! grant, approve a tool change), each written to the audit log. The sign-in is the
//! authorization server's (`/account`, its session cookie and CSRF token); a signed-out browser
//! is sent there, a signed-in non-admin gets 403. Pages are server-rendered HTML under a strict
//! CSP (no script; charts are SVG).
//!
//! This module holds the console's state and its pure parts: which page a path is, the
//! answers' headers, the charts from the request statistics; `pages.rs`, `manage.rs` and
//! `tool_changes.rs` render, `stats.rs` counts, `audit_view.rs` reads the audit log. The
//! handlers are `proxy/console.rs`.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use crate::tokens::TokenSource;

pub(crate) mod approvals;
pub(crate) mod audit_view;
pub(crate) mod chart;
pub(crate) mod manage;
pub(crate) mod pages;
pub(crate) mod stats;
pub(crate) mod tool_changes;
pub(crate) mod virtuals;

/// Largest form the console accepts.
pub(crate) const MAX_FORM_BYTES: usize = 16 * 1024;

/// The console's state in the gateway.
#[derive(Debug)]
pub(crate) struct Console {
    /// The last hour's requests, per minute.
    pub(crate) stats: stats::RequestStats,
    /// Each route's latest failures.
    pub(crate) errors: stats::RecentErrors,
    /// The static-token store (the gateway's snapshot follows it within 100 ms).
    pub(crate) tokens: Option<Arc<dyn TokenSource>>,
    /// When the gateway started (ms).
    pub(crate) started_ms: u64,
    /// The audit log file, when lines go to one.
    pub(crate) audit_file: Option<PathBuf>,
    /// Per route, a command route's live children.
    pub(crate) children: Vec<Option<crate::stdio::LiveChildren>>,
}

impl Console {
    /// The console of a gateway whose routes' stdio children are `children` (one entry per
    /// route, `None` for a route that is not a command).
    pub(crate) fn new(
        children: Vec<Option<crate::stdio::LiveChildren>>,
        tokens: Option<Arc<dyn TokenSource>>,
        started_ms: u64,
        audit_file: Option<PathBuf>,
    ) -> Self {
        Self {
            stats: stats::RequestStats::default(),
            errors: stats::RecentErrors::new(children.len()),
            tokens,
            started_ms,
            audit_file,
            children,
        }
    }
}

/// Whether `path` is the console's.
pub(crate) fn is_console_path(path: &str) -> bool {
    path == "/admin" || path.starts_with("/admin/")
}

/// A page of the console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Page {
    Overview,
    Route(String),
    Audit,
    Tokens,
    Grants,
    Users,
    Clients,
    /// Held tool changes (pinned definitions).
    Tools,
    /// The calls held for a person's approval.
    Approvals,
    /// One held call (`/admin/approvals/apr_…`).
    Approval(String),
    NotFound,
}

impl Page {
    pub(crate) fn of(path: &str) -> Self {
        match path.trim_end_matches('/') {
            "/admin" => Self::Overview,
            "/admin/audit" => Self::Audit,
            "/admin/tokens" => Self::Tokens,
            "/admin/grants" => Self::Grants,
            "/admin/users" => Self::Users,
            "/admin/clients" => Self::Clients,
            "/admin/tools" => Self::Tools,
            "/admin/approvals" => Self::Approvals,
            p => match (
                p.strip_prefix("/admin/routes/"),
                p.strip_prefix("/admin/approvals/"),
            ) {
                (Some(name), _) if crate::config::valid_route_name(name) => {
                    Self::Route(name.to_owned())
                }
                (_, Some(id)) if approval_id(id) => Self::Approval(id.to_owned()),
                _ => Self::NotFound,
            },
        }
    }
}

/// Whether `id` has an approval id's shape: `apr_` and 32 lowercase hex digits.
fn approval_id(id: &str) -> bool {
    id.len() == 36
        && id.starts_with("apr_")
        && id
            .bytes()
            .skip(4)
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Page {
    /// Whether an approver who is not an admin may see it: the approval pages only.
    pub(crate) fn for_approvers(&self) -> bool {
        matches!(self, Self::Approvals | Self::Approval(_))
    }
}

/// The 403 page's text for someone signed in who may not decide approvals.
pub(crate) fn not_approver_hint(shown: &str) -> String {
    format!(
        "You are signed in as {shown}, and approvals are decided by admins and by holders of a          role with `approver = true` under [oauth.roles]. Ask an approver to look at this call."
    )
}

/// An HTML answer with every page's headers (`pforte_page::headers`): the one CSP, never
/// cached, never framed, no referrer.
pub(crate) fn html(status: u16, body: String) -> http::Response<Bytes> {
    let mut resp = http::Response::new(Bytes::from(body));
    *resp.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    for (name, value) in pforte_page::headers(&[]) {
        if let Ok(v) = http::HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    resp
}

/// A 303 to `location` (after a POST, or to the sign-in page).
pub(crate) fn redirect(location: &str) -> http::Response<Bytes> {
    let mut resp = html(303, String::new());
    if let Ok(v) = http::HeaderValue::from_str(location) {
        resp.headers_mut().insert(http::header::LOCATION, v);
    }
    resp
}

/// A refusal page (403, 400, 404, 503) without the console's frame.
pub(crate) fn refusal(status: u16, title: &str, message: &str) -> http::Response<Bytes> {
    html(status, pages::message_page(title, message))
}

/// The 403 page's text for someone signed in who is not an admin: who they are, and the two
/// ways to become one — the CLI for a named user, a role for people of an identity provider.
pub(crate) fn not_admin_hint(shown: &str, username: &str) -> String {
    format!(
        "You are signed in as {shown}, and the operator console is for admins. An admin can make \
         you one with `pforte user role {username} admin`; if you sign in with your company's \
         identity provider, the operator can instead list your email or group in a role with \
         `admin = true` under [oauth.roles]."
    )
}

/// `3 d 4 h`, `2 h 5 min`, `42 s`.
pub(crate) fn uptime(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m) = (s / 86_400, s / 3600 % 24, s / 60 % 60);
    if d > 0 {
        format!("{d} d {h} h")
    } else if h > 0 {
        format!("{h} h {m} min")
    } else if m > 0 {
        format!("{m} min")
    } else {
        format!("{s} s")
    }
}

/// `2026-12-03 18:05:01` (UTC) of a time in ms.
pub(crate) fn when(ms: u64) -> String {
    let rfc = crate::audit::rfc3339_ms(ms);
    format!(
        "{} {}",
        rfc.get(..10).unwrap_or_default(),
        rfc.get(11..19).unwrap_or_default()
    )
}

/// The overview's three charts from the last hour: request rate, latency p50/p99 and error
/// rate (5xx and refusals, % of requests).
pub(crate) fn charts(hour: &[stats::Minute]) -> Vec<String> {
    use chart::{Series, line_chart};
    let per_minute = |f: fn(&stats::Minute) -> u64| -> Vec<Option<f64>> {
        hour.iter().map(|m| Some(f(m) as f64)).collect()
    };
    let latency = |f: fn(&stats::Minute) -> Option<u64>| -> Vec<Option<f64>> {
        hour.iter().map(|m| f(m).map(|v| v as f64)).collect()
    };
    let share = |f: fn(&stats::Minute) -> u64| -> Vec<Option<f64>> {
        hour.iter()
            .map(|m| (m.requests > 0).then(|| 100.0 * f(m) as f64 / m.requests as f64))
            .collect()
    };
    let (from, to) = ("60 min ago", "now");
    vec![
        line_chart(
            "Requests per minute",
            "",
            &[Series {
                name: "requests",
                color: "#2563eb",
                values: per_minute(|m| m.requests),
            }],
            from,
            to,
        ),
        line_chart(
            "Latency (ms)",
            "",
            &[
                Series {
                    name: "p50",
                    color: "#059669",
                    values: latency(|m| m.p50_ms),
                },
                Series {
                    name: "p99",
                    color: "#d97706",
                    values: latency(|m| m.p99_ms),
                },
            ],
            from,
            to,
        ),
        line_chart(
            "Errors (% of requests)",
            "%",
            &[
                Series {
                    name: "5xx",
                    color: "#dc2626",
                    values: share(|m| m.server_errors),
                },
                Series {
                    name: "refused",
                    color: "#7c3aed",
                    values: share(|m| m.refusals),
                },
            ],
            from,
            to,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_pages() {
        assert!(is_console_path("/admin") && is_console_path("/admin/audit"));
        assert!(!is_console_path("/administrator") && !is_console_path("/mcp"));
        assert_eq!(Page::of("/admin"), Page::Overview);
        assert_eq!(Page::of("/admin/"), Page::Overview);
        assert_eq!(Page::of("/admin/audit"), Page::Audit);
        assert_eq!(Page::of("/admin/tools"), Page::Tools);
        assert_eq!(Page::of("/admin/routes/notes"), Page::Route("notes".into()));
        assert_eq!(Page::of("/admin/routes/../x"), Page::NotFound);
        assert_eq!(Page::of("/admin/nope"), Page::NotFound);
        assert_eq!(Page::of("/admin/approvals"), Page::Approvals);
        let id = format!("apr_{}", "0a".repeat(16));
        assert_eq!(
            Page::of(&format!("/admin/approvals/{id}")),
            Page::Approval(id.clone())
        );
        assert!(Page::Approval(id).for_approvers() && !Page::Tokens.for_approvers());
        assert_eq!(Page::of("/admin/approvals/apr_x"), Page::NotFound);
    }

    #[test]
    fn answers_carry_the_console_headers() {
        let r = html(200, "x".into());
        let csp = r.headers()["content-security-policy"]
            .to_str()
            .unwrap_or_default();
        assert_eq!(csp, pforte_page::content_security_policy(&[]));
        assert_eq!(r.headers()["cache-control"], "no-store");
        assert_eq!(r.headers()["x-frame-options"], "DENY");
        let r = redirect("/account");
        assert_eq!(r.status().as_u16(), 303);
        assert_eq!(r.headers()["location"], "/account");
    }

    #[test]
    fn uptime_and_times_read_plainly() {
        assert_eq!(uptime(42_000), "42 s");
        assert_eq!(uptime(125 * 60_000), "2 h 5 min");
        assert_eq!(uptime(3 * 86_400_000 + 4 * 3_600_000), "3 d 4 h");
        assert_eq!(when(1_800_000_000_000), "2027-01-15 08:00:00");
    }

    #[test]
    fn three_charts_over_the_hour() {
        let hour: Vec<stats::Minute> = (0..60)
            .map(|i| stats::Minute {
                minute: i,
                requests: i % 3,
                server_errors: u64::from(i % 3 == 2),
                p50_ms: (i % 3 > 0).then_some(5),
                p99_ms: (i % 3 > 0).then_some(50),
                ..Default::default()
            })
            .collect();
        let c = charts(&hour);
        assert_eq!(c.len(), 3);
        assert!(
            c[0].contains("Requests per minute") && c[1].contains("p99") && c[2].contains("5xx")
        );
    }
}
