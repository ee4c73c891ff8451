//! The console's "Tool changes" handlers (`/admin/tools`): the pending pins read from the store
//! with their diffs, and Approve (one tool) / Approve all (a route) — `Pins::approve`, the same
//! store step as `pforte tools approve` (`pins::approve`), after which this gateway reads the
//! held tools again and serves the tool at once. Each approval is audited twice: the console
//! action (`ConsoleRecord`) and, per tool, `tool_approved` (`by: "console"`) as the CLI writes it.

use pforte_oauth::Viewer;

use crate::{
    audit::PinRecord,
    console::{
        self,
        tool_changes::{HeldTool, ToolChangesPage},
    },
    pins::{Which, diff},
    proxy::Gateway,
};

use super::{Form, Response, blocking};

impl Gateway {
    /// The page's data (`None`: the store did not answer).
    pub(super) async fn tool_changes(
        &self,
        viewer: &Viewer,
        notice: Option<String>,
        error: Option<String>,
    ) -> Option<ToolChangesPage> {
        let pins = self.edge.pins.clone();
        let list = match blocking(move || pins.list()).await? {
            None => Vec::new(),
            Some(Ok(list)) => list,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "console: the pins store did not answer");
                return None;
            }
        };
        let mut pinned: std::collections::BTreeMap<String, usize> = Default::default();
        for pin in &list {
            *pinned.entry(pin.route.clone()).or_default() += 1;
        }
        let held = list
            .into_iter()
            .filter(|p| p.pending())
            .map(|p| HeldTool {
                new: p.approved.is_none(),
                seen: console::when(p.seen_ms),
                changes: diff::diff(p.approved.as_deref(), &p.seen),
                route: p.route,
                tool: p.tool,
            })
            .collect();
        Some(ToolChangesPage {
            pinning: self.edge.pins.pinning(),
            enabled: self.edge.pins.enabled(),
            held,
            pinned: pinned.into_iter().collect(),
            csrf: viewer.csrf.clone(),
            notice,
            error,
        })
    }

    /// Approve (`step=approve`, `route`, `tool`) or Approve all (`step=approve-all`, `route`);
    /// answered with a 303 back to the page.
    pub(super) async fn approve_tools(
        &self,
        form: &Form,
        audit: &(dyn Fn(&str, &str, &str) + Sync),
    ) -> Response {
        let route = form.get("route").to_owned();
        let tool = form.get("tool").to_owned();
        let all = form.get("step") == "approve-all";
        if !self.settings.routes.iter().any(|r| r.name == route) || (!all && tool.is_empty()) {
            return console::refusal(400, "Invalid form", "No route or tool by that name.");
        }
        let (action, target) = if all {
            ("tools_approve_all", route.clone())
        } else {
            ("tool_approve", format!("{route}/{tool}"))
        };
        let pins = self.edge.pins.clone();
        let (r, t) = (route, tool);
        let result = blocking(move || {
            let which = if all { Which::All } else { Which::Tool(&t) };
            pins.approve(&r, which)
        })
        .await;
        let now = self.clock.now_ms();
        let (done, outcome) = match result {
            Some(Ok(approved)) if !approved.is_empty() => {
                if let Some(log) = &self.edge.audit {
                    for pin in &approved {
                        log.record(&PinRecord::approved(pin, now, "console"));
                    }
                }
                ("tool-approved", "done")
            }
            Some(Ok(_)) => ("nothing-pending", "not_found"),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "console: approving a tool failed");
                ("store", "store_error")
            }
            None => ("store", "store_error"),
        };
        audit(action, &target, outcome);
        console::redirect(&format!("/admin/tools?done={done}"))
    }
}
