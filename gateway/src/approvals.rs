//! Approvals (issue 43 point 3, `effect = "approve"`): a call that a rule sends to a person is
//! held, not forwarded; a pending [`Approval`] records who asked (person key and name, client),
//! where (route, tool), with which arguments (canonical JSON), the SHA-256 digest binding them
//! ([`digest`]: route, tool, canonical arguments, person), the rule, and when it expires
//! (`[approvals] ttl_secs`, 15 min by default). An approver (an admin, or a role with
//! `approver = true`) approves or rejects it in the console; the caller's retry with the same
//! digest then passes once ([`Store::consume`], atomic on both backends), a rejected or expired
//! one is refused once. The decisions here are pure ([`standing`]); `store.rs` keeps the
//! records (`pforte.db`'s `approvals` table, or redis), `answer.rs` words the caller's answer.

pub(crate) mod answer;
mod record;
mod store;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

pub(crate) use record::ApprovalRecord;
pub(crate) use store::{ApprovalStore, ApprovalStoreError, embedded, redis};

/// The default lifetime of a pending approval, and of a granted one before its retry.
pub(crate) const DEFAULT_TTL_SECS: u64 = 15 * 60;
/// The longest `ttl_secs` accepted (a day).
pub(crate) const MAX_TTL_SECS: u64 = 86_400;
/// How long a finished or expired approval stays listed before it is swept (a day).
pub(crate) const KEEP_MS: u64 = 86_400_000;

/// The `[approvals]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ApprovalsConfig {
    /// Seconds a pending approval waits for a decision, and an approved one for its retry.
    pub(crate) ttl_secs: u64,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            ttl_secs: DEFAULT_TTL_SECS,
        }
    }
}

impl ApprovalsConfig {
    /// Why the table is refused, if it is (`pforte check` names the key).
    pub(crate) fn problem(&self) -> Option<String> {
        (!(1..=MAX_TTL_SECS).contains(&self.ttl_secs)).then(|| {
            format!(
                "{} is out of range: 1 to {MAX_TTL_SECS} seconds",
                self.ttl_secs
            )
        })
    }

    pub(crate) fn ttl_ms(&self) -> u64 {
        self.ttl_secs.saturating_mul(1000)
    }
}

/// Where an approval is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum State {
    /// Waiting for an approver.
    Pending,
    /// Approved: the next identical call passes (once, before `expires_ms`).
    Approved,
    /// Rejected: the next identical call is refused with the rule's message.
    Rejected,
    /// Approved and used by a call.
    Used,
    /// Rejected or expired, and the caller was told: the next identical call asks again.
    Closed,
}

impl State {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Used => "used",
            Self::Closed => "closed",
        }
    }
}

/// One held call and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Approval {
    /// `apr_` and 32 hex digits: the console's link and the SEP-2643 `authorizationContextId`.
    pub(crate) id: String,
    /// `auth::person_key` of the caller.
    pub(crate) person: String,
    /// Who the caller is, as shown to the approver (a user's name, `token NAME`).
    pub(crate) name: String,
    /// The client: its registered name, else its id (a static token: the token's name).
    pub(crate) client: String,
    pub(crate) route: String,
    pub(crate) tool: String,
    /// The call's arguments as canonical JSON (`pins::canonical`).
    pub(crate) arguments: String,
    /// [`digest`] of route, tool, arguments and person (hex).
    pub(crate) digest: String,
    /// The rule that asked for approval, and its message.
    pub(crate) rule: String,
    pub(crate) message: String,
    pub(crate) created_ms: u64,
    /// Pending: the decision's deadline; approved: the retry's.
    pub(crate) expires_ms: u64,
    pub(crate) state: State,
    /// The approver's user name, once decided.
    #[serde(default)]
    pub(crate) decided_by: Option<String>,
    #[serde(default)]
    pub(crate) decided_ms: Option<u64>,
}

impl Approval {
    /// Whether it waits for a decision at `now`.
    pub(crate) fn pending_at(&self, now: u64) -> bool {
        self.state == State::Pending && now < self.expires_ms
    }

    /// What the console shows as its state at `now` (`expired` beside the stored ones).
    pub(crate) fn shown_state(&self, now: u64) -> &'static str {
        match self.state {
            State::Pending | State::Approved if now >= self.expires_ms => "expired",
            s => s.as_str(),
        }
    }

    /// Its arguments as indented JSON (the stored text if it does not parse).
    pub(crate) fn arguments_pretty(&self) -> String {
        serde_json::from_str::<serde_json::Value>(&self.arguments)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| self.arguments.clone())
    }
}

/// The digest that binds an approval to one call: SHA-256 over the route, the tool, the
/// canonical arguments and the person key, each length-prefixed (so no two different tuples
/// share a preimage), as hex.
pub(crate) fn digest(route: &str, tool: &str, canonical_args: &str, person: &str) -> String {
    let mut h = Sha256::new();
    for part in [route, tool, canonical_args, person] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(h.finalize())
}

/// A `tools/call` body's `params.arguments` as canonical JSON (`{}` when absent).
pub(crate) fn canonical_arguments(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Call {
        params: Option<Params>,
    }
    #[derive(Deserialize)]
    struct Params {
        arguments: Option<serde_json::Value>,
    }
    let call: Call = serde_json::from_slice(body).ok()?;
    let args = call
        .params
        .and_then(|p| p.arguments)
        .unwrap_or_else(|| serde_json::Value::Object(serde_json::Map::new()));
    Some(crate::pins::canonical(&args))
}

/// A new approval's id from 16 random bytes.
pub(crate) fn new_id(random: [u8; 16]) -> String {
    format!("apr_{}", hex::encode(random))
}

/// Why a held call is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Rejected,
    Expired,
}

impl Refusal {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::Rejected => "approval_rejected",
            Self::Expired => "approval_expired",
        }
    }
}

/// What a call that needs approval gets, from the newest approval of its digest at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Nothing usable: a new pending approval is made, and the call held.
    Ask,
    /// Its approval still waits: held again, with the same link.
    Waiting,
    /// Approved and unused: pass once, if the consumption wins.
    Approved,
    /// Rejected, or expired before it was decided or used: refused (once; then closed).
    Refused(Refusal),
}

/// The standing of a call whose newest approval (by digest) is `latest`, at `now`.
pub(crate) fn standing(latest: Option<&Approval>, now: u64) -> Standing {
    let Some(a) = latest else {
        return Standing::Ask;
    };
    let live = now < a.expires_ms;
    match a.state {
        State::Pending if live => Standing::Waiting,
        State::Approved if live => Standing::Approved,
        State::Pending | State::Approved => Standing::Refused(Refusal::Expired),
        State::Rejected => Standing::Refused(Refusal::Rejected),
        State::Used | State::Closed => Standing::Ask,
    }
}

/// An approver's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    Approve,
    Reject,
}

/// Whether the signed-in user `username` asked for `approval` themselves (an OAuth user's
/// call): they may reject it, but approving it takes another approver.
pub(crate) fn own_call(approval: &Approval, username: &str) -> bool {
    approval.person == crate::auth::person_key(crate::auth::AuthKind::OAuth, username, "")
}

/// `approval` after `decision` by `by` at `now`: approved ones may be used for `ttl_ms` from
/// now; `None` when it is not pending at `now` (decided already, or expired).
pub(crate) fn decide(
    approval: &Approval,
    decision: Decision,
    by: &str,
    now: u64,
    ttl_ms: u64,
) -> Option<Approval> {
    if !approval.pending_at(now) {
        return None;
    }
    let mut next = approval.clone();
    next.decided_by = Some(by.to_owned());
    next.decided_ms = Some(now);
    match decision {
        Decision::Approve => {
            next.state = State::Approved;
            next.expires_ms = now.saturating_add(ttl_ms);
        }
        Decision::Reject => next.state = State::Rejected,
    }
    Some(next)
}

#[cfg(test)]
#[path = "approvals/tests.rs"]
mod tests;
