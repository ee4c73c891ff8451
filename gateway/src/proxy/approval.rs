//! The admission's approval step (`effect = "approve"`, issue 43 point 3): a message a rule
//! sends to a person is held, not forwarded. Its digest (route, tool, canonical arguments,
//! person) finds its newest approval in the store (`approvals.rs`): none, or one used or
//! closed → a new pending approval and the caller's answer with the link
//! (`approvals/answer.rs`: `-32042` for a client that declared URL elicitation, else a tool
//! error with SEP-2643's `_meta`); still pending → the same link again; approved → consumed
//! (one compare-and-set in the store: one call passes, however many race) and forwarded;
//! rejected or expired → refused with the rule's message (403), once. Every step is an audit
//! line (`audit.rs::ApprovalRecord`); no log line carries the arguments.

use pingora::http::RequestHeader;

use super::{Gateway, admission::SESSION_ID};
use crate::{
    approvals::{self, Approval, ApprovalRecord, ApprovalStore, Refusal, Standing, State, answer},
    auth::{AuthKind, Principal},
    mcp::Message,
    reply::{Rejection, RuleRefusal},
};

/// The console's page of one approval, under the gateway's public URL.
pub(crate) fn approval_url(base_url: &str, id: &str) -> String {
    format!("{base_url}/admin/approvals/{id}")
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, approvals::ApprovalStoreError> + Send + 'static,
) -> Result<T, Rejection> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "approvals unavailable");
            Err(Rejection::CredentialsUnavailable)
        }
        Err(_) => Err(Rejection::Internal),
    }
}

/// The call a rule holds: the request, its whole body and its message, who sent it, where.
#[derive(Clone, Copy)]
pub(super) struct HeldCall<'a> {
    pub(super) req: &'a RequestHeader,
    pub(super) body: &'a [u8],
    pub(super) message: &'a Message,
    pub(super) principal: &'a Principal,
    pub(super) route: usize,
    pub(super) ip: Option<std::net::IpAddr>,
}

impl Gateway {
    /// The approval step for `call`, which the rule of `refusal` sends to a person: `Ok` when
    /// an approval of exactly this call is consumed now (the call goes on), else the answer
    /// with the link (`Rejection::Held`) or, rejected or expired, the rule's refusal.
    pub(super) async fn hold_for_approval(
        &self,
        call: HeldCall<'_>,
        refusal: RuleRefusal,
    ) -> Result<(), Rejection> {
        let store = self
            .edge
            .approvals
            .clone()
            .ok_or(Rejection::CredentialsUnavailable)?;
        let message = call.message;
        let route_name = self.settings.routes[call.route].name.clone();
        let tool = message
            .tool()
            .or(message.target.as_deref())
            .unwrap_or(&message.method)
            .to_owned();
        let person = call.principal.person_key();
        let arguments =
            approvals::canonical_arguments(call.body).unwrap_or_else(|| "{}".to_owned());
        let digest = approvals::digest(&route_name, &tool, &arguments, &person);
        let now = self.clock.now_ms();
        // Two rounds at most: a consumption lost to another gateway reads the newest again.
        for _ in 0..2 {
            let (s, d) = (store.clone(), digest.clone());
            let latest = blocking(move || s.latest(&d)).await?;
            match approvals::standing(latest.as_ref(), now) {
                Standing::Approved => {
                    let Some(approved) = latest else { break };
                    let used = Approval {
                        state: State::Used,
                        ..approved
                    };
                    let (s, u) = (store.clone(), used.clone());
                    if blocking(move || s.transition(&u, State::Approved, Some(now))).await? {
                        self.audit_approval("approval_used", &used, None, call.ip);
                        return Ok(());
                    }
                }
                Standing::Waiting => {
                    let Some(pending) = latest else { break };
                    return Err(self.held(call, &pending));
                }
                Standing::Refused(why) => {
                    let Some(old) = latest else { break };
                    let closed = Approval {
                        state: State::Closed,
                        ..old.clone()
                    };
                    let (s, c, from) = (store.clone(), closed, old.state);
                    let won = blocking(move || s.transition(&c, from, None)).await?;
                    if won && why == Refusal::Expired {
                        self.audit_approval("approval_expired", &old, None, call.ip);
                    }
                    return Err(Rejection::PolicyRule(RuleRefusal {
                        message: refusal_text(&refusal.message, why),
                        reason: why.reason(),
                        ..refusal
                    }));
                }
                Standing::Ask => break,
            }
        }
        let principal = call.principal;
        let approval = Approval {
            id: approvals::new_id(rand::random()),
            person,
            name: match principal.kind {
                AuthKind::OAuth => principal.subject.clone(),
                AuthKind::Static => format!("token {}", principal.client),
            },
            client: principal
                .client_name
                .clone()
                .unwrap_or_else(|| principal.client.clone()),
            route: route_name,
            tool,
            arguments,
            digest,
            rule: refusal.rule,
            message: refusal.message,
            created_ms: now,
            expires_ms: now.saturating_add(self.settings.approvals.ttl_ms()),
            state: State::Pending,
            decided_by: None,
            decided_ms: None,
        };
        let (s, a) = (store, approval.clone());
        blocking(move || s.insert(&a, now)).await?;
        self.audit_approval("approval_requested", &approval, None, call.ip);
        Err(self.held(call, &approval))
    }

    /// The caller's answer for a held call: the link, in the form its client understands
    /// (URL elicitation declared on its session's `initialize`, as this process saw it, or in
    /// a 2026-07-28 request's own capabilities).
    fn held(&self, call: HeldCall<'_>, approval: &Approval) -> Rejection {
        let url = approval_url(&self.settings.base_url, &approval.id);
        let eliciting = call
            .req
            .headers
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|id| self.edge.credentials.eliciting(id))
            || answer::request_declares_url_elicitation(call.body);
        let held = answer::Held {
            id: &approval.id,
            url: &url,
            message: &approval.message,
            minutes: approval.expires_ms.saturating_sub(approval.created_ms) / 60_000,
        };
        let json = answer::held_answer(call.message, &held, eliciting).unwrap_or_default();
        Rejection::Held {
            answer: Box::new(json),
            rule: approval.rule.clone(),
        }
    }

    /// One audit line of an approval's step (`event`); `by`: the approver.
    pub(super) fn audit_approval(
        &self,
        event: &'static str,
        a: &Approval,
        by: Option<&str>,
        client_ip: Option<std::net::IpAddr>,
    ) {
        if let Some(log) = &self.edge.audit {
            log.record(&ApprovalRecord {
                time_ms: self.clock.now_ms(),
                event,
                approval: &a.id,
                route: &a.route,
                tool: &a.tool,
                person: &a.person,
                client: &a.client,
                rule: &a.rule,
                sha256: &a.digest,
                by,
                client_ip,
            });
        }
        // The log line names the approval, never its arguments.
        tracing::info!(event, approval = %a.id, route = %a.route, tool = %crate::logging::untrusted_name(&a.tool), "approval");
    }

    /// The approvals store, for the console.
    pub(super) fn approval_store(&self) -> Option<std::sync::Arc<dyn ApprovalStore>> {
        self.edge.approvals.clone()
    }
}

/// What a refused retry says: the rule's message, and why.
fn refusal_text(message: &str, why: Refusal) -> String {
    let lead = message.trim();
    let why = match why {
        Refusal::Rejected => "An approver rejected this call.",
        Refusal::Expired => "Its approval expired before it was decided or used.",
    };
    if lead.is_empty() {
        format!("{why} Calling again asks again.")
    } else {
        format!("{lead} {why} Calling again asks again.")
    }
}
