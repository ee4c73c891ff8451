//! The console's approval handlers: the list and one held call gathered from the approvals
//! store for an approver (an admin, or a role with `approver = true`), and the decision — a
//! CSRF-checked POST (checked before), one compare-and-set in the store (a call decided twice,
//! or too late, is refused with a notice), an audit line (`approval_approved`,
//! `approval_rejected`), a 303 back to the call's page.

use std::net::IpAddr;

use pforte_oauth::Viewer;

use crate::{
    approvals::{self, Approval, Decision, State},
    console::{
        self,
        approvals::{ApprovalDetail, ApprovalRow, ApprovalsPage},
    },
    proxy::Gateway,
};

use super::{Form, Response, blocking, store_down};

fn row(a: &Approval, now: u64) -> ApprovalRow {
    ApprovalRow {
        id: a.id.clone(),
        who: a.name.clone(),
        client: a.client.clone(),
        route: a.route.clone(),
        tool: a.tool.clone(),
        rule: a.rule.clone(),
        state: a.shown_state(now),
        created: console::when(a.created_ms),
        expires: console::when(a.expires_ms),
    }
}

impl Gateway {
    /// Every stored approval, the pending ones first; `None`: the store did not answer.
    pub(super) async fn approvals_page(
        &self,
        notice: Option<String>,
        error: Option<String>,
    ) -> Option<ApprovalsPage> {
        let store = self.approval_store()?;
        let mut list = blocking(move || store.list()).await?.ok()?;
        let now = self.clock.now_ms();
        // Pending first (stable: newest first within each group).
        list.sort_by_key(|a| !a.pending_at(now));
        Some(ApprovalsPage {
            rows: list.iter().map(|a| row(a, now)).collect(),
            notice,
            error,
        })
    }

    /// One approval's page; `Some(None)`: no such approval; `None`: the store did not answer.
    pub(super) async fn approval_detail(
        &self,
        id: &str,
        viewer: &Viewer,
        notice: Option<String>,
        error: Option<String>,
    ) -> Option<Option<ApprovalDetail>> {
        let store = self.approval_store()?;
        let id = id.to_owned();
        let found = blocking(move || store.get(&id)).await?.ok()?;
        let now = self.clock.now_ms();
        Some(found.map(|a| ApprovalDetail {
            row: row(&a, now),
            arguments: a.arguments_pretty(),
            decided: a.decided_by.clone().zip(a.decided_ms.map(console::when)),
            person: a.person,
            message: a.message,
            digest: a.digest,
            csrf: viewer.csrf.clone(),
            notice,
            error,
        }))
    }

    /// Approve or reject the held call `id` (the form's `step`), audited.
    pub(super) async fn decide_approval(
        &self,
        id: &str,
        form: &Form,
        viewer: &Viewer,
        ip: Option<IpAddr>,
    ) -> Response {
        let decision = match form.get("step") {
            "approve" => Decision::Approve,
            "reject" => Decision::Reject,
            _ => {
                return console::refusal(
                    400,
                    "Invalid form",
                    "The console does not know that action.",
                );
            }
        };
        let Some(store) = self.approval_store() else {
            return store_down();
        };
        let (s, i) = (store.clone(), id.to_owned());
        let Some(Ok(found)) = blocking(move || s.get(&i)).await else {
            return store_down();
        };
        let Some(current) = found else {
            return console::refusal(404, "No such approval", "No held call has that id.");
        };
        if decision == Decision::Approve && approvals::own_call(&current, &viewer.username) {
            return console::redirect(&format!("/admin/approvals/{id}?done=own-call"));
        }
        let now = self.clock.now_ms();
        let ttl = self.settings.approvals.ttl_ms();
        let done = match approvals::decide(&current, decision, &viewer.username, now, ttl) {
            None => "too-late",
            Some(next) => {
                let n = next.clone();
                match blocking(move || store.transition(&n, State::Pending, Some(now))).await {
                    Some(Ok(true)) => {
                        let event = match decision {
                            Decision::Approve => "approval_approved",
                            Decision::Reject => "approval_rejected",
                        };
                        self.audit_approval(event, &next, Some(&viewer.username), ip);
                        match decision {
                            Decision::Approve => "approved",
                            Decision::Reject => "rejected",
                        }
                    }
                    Some(Ok(false)) => "too-late",
                    _ => "store",
                }
            }
        };
        console::redirect(&format!("/admin/approvals/{id}?done={done}"))
    }
}
