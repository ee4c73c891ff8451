//! The audit line of an approval's step (`effect = "approve"`), written through the audit log
//! (`audit.rs`) like every other line.

use serde::{Serialize, Serializer};

use crate::audit::{serialize_time, serialize_untrusted};

/// One audit line per step of a call held for a person's approval (`effect = "approve"`):
/// `approval_requested` (a call held, a pending approval made), `approval_approved` and
/// `approval_rejected` (by an approver in the console: `by`), `approval_used` (the retry
/// passed, once), `approval_expired` (a retry came too late and was refused). Never the
/// arguments: `sha256` is the digest that binds the approval to them (route, tool, canonical
/// arguments, person); the console shows them from the store.
///
/// ```json
/// {"time":"2026-12-05T11:00:00.000Z","event":"approval_requested","approval":"apr_5b1c…","route":"files","tool":"delete","person":"oauth:ann","client":"Claude","rule":"approve-deletes","sha256":"9f2c…","client_ip":"10.0.0.7"}
/// {"time":"2026-12-05T11:02:00.000Z","event":"approval_approved","approval":"apr_5b1c…","route":"files","tool":"delete","person":"oauth:ann","client":"Claude","rule":"approve-deletes","sha256":"9f2c…","by":"root","client_ip":"127.0.0.1"}
/// ```
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ApprovalRecord<'a> {
    #[serde(rename = "time", serialize_with = "serialize_time")]
    pub(crate) time_ms: u64,
    pub(crate) event: &'static str,
    pub(crate) approval: &'a str,
    pub(crate) route: &'a str,
    #[serde(serialize_with = "serialize_untrusted")]
    pub(crate) tool: &'a str,
    #[serde(serialize_with = "serialize_untrusted")]
    pub(crate) person: &'a str,
    #[serde(serialize_with = "serialize_untrusted")]
    pub(crate) client: &'a str,
    pub(crate) rule: &'a str,
    pub(crate) sha256: &'a str,
    /// The approver, for `approval_approved` and `approval_rejected`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "untrusted_by"
    )]
    pub(crate) by: Option<&'a str>,
    /// The caller's (requested, used, expired) or the approver's (decided) address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) client_ip: Option<std::net::IpAddr>,
}

/// The approver's name, escaped like every name from elsewhere (`by` is only written when set).
fn untrusted_by<S: Serializer>(by: &Option<&str>, s: S) -> Result<S::Ok, S::Error> {
    serialize_untrusted(&by.unwrap_or_default(), s)
}
