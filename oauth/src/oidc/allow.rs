//! Who may sign in through a provider: a verified email in `allowed_domains` or
//! `allowed_emails`, or a group in `allowed_groups` — pure.

use super::Identity;
use crate::config::OidcProviderConfig;

/// Why a person may not sign in through a provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    /// A verified email outside the allowed domains and addresses.
    NotAllowedEmail,
    /// An email the provider did not mark verified.
    Unverified,
    /// No email at all (not in the ID token, not in UserInfo).
    NoEmail,
    /// None of the allowed groups.
    NoGroup,
}

/// A refused sign-in: who (the address, verified or not) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    who: Option<String>,
    reasons: Vec<Reason>,
}

impl Refusal {
    fn why(&self) -> String {
        self.reasons
            .iter()
            .map(|r| match r {
                Reason::NotAllowedEmail => "its email address is not one of the allowed ones",
                Reason::Unverified => "its email address is not verified by the provider",
                Reason::NoEmail => "the provider sent no email address",
                Reason::NoGroup => "it is in none of the allowed groups",
            })
            .collect::<Vec<_>>()
            .join(", and ")
    }

    /// One line for the audit log: `ADDRESS may not sign in here: WHY`.
    pub(crate) fn audit(&self) -> String {
        format!(
            "{} may not sign in here: {}",
            self.who.as_deref().unwrap_or("the account"),
            self.why()
        )
    }

    /// The refusal page's words: the sentence for the person, then what the operator can
    /// change for provider `name`.
    pub(crate) fn page(&self, name: &str, cfg: &OidcProviderConfig) -> String {
        let who = self
            .who
            .as_deref()
            .map(|w| format!(" {w}"))
            .unwrap_or_default();
        let mut out = format!(
            "Your {name} account{who} may not sign in here: {}.",
            self.why()
        );
        let has = |r: Reason| self.reasons.contains(&r);
        if has(Reason::NoEmail) {
            out.push_str(&format!(
                " The operator of this gateway can ask {name} for the email scope, or name the \
                 claim that holds your address (email_claim, currently {:?}; Entra ID: \
                 preferred_username or upn, with trust_email = true).",
                cfg.email_claim
            ));
        }
        if has(Reason::Unverified) {
            out.push_str(&format!(
                " If {name} never marks addresses as verified (Entra ID does not), the operator \
                 of this gateway can set trust_email = true for it."
            ));
        }
        if has(Reason::NotAllowedEmail) || (has(Reason::NoGroup) && self.reasons.len() == 1) {
            out.push_str(
                " If you should have access, ask the operator of this gateway to allow your \
                 address, domain or group.",
            );
        }
        out
    }
}

/// `Ok` when `id` may sign in through `cfg`; otherwise why not.
pub(crate) fn admitted(cfg: &OidcProviderConfig, id: &Identity) -> Result<(), Refusal> {
    if let Some(email) = &id.email {
        if cfg
            .allowed_emails
            .iter()
            .any(|e| e.eq_ignore_ascii_case(email))
        {
            return Ok(());
        }
        if domain_listed(email, &cfg.allowed_domains) {
            return Ok(());
        }
    }
    if id.groups.iter().any(|g| cfg.allowed_groups.contains(g)) {
        return Ok(());
    }
    let mut reasons = Vec::new();
    if !cfg.allowed_domains.is_empty() || !cfg.allowed_emails.is_empty() {
        reasons.push(match (&id.email, &id.unverified_email) {
            (Some(_), _) => Reason::NotAllowedEmail,
            (None, Some(_)) => Reason::Unverified,
            (None, None) => Reason::NoEmail,
        });
    }
    if !cfg.allowed_groups.is_empty() {
        reasons.push(Reason::NoGroup);
    }
    Err(Refusal {
        who: id.email.clone().or_else(|| id.unverified_email.clone()),
        reasons,
    })
}

/// Whether `email`'s domain is one of `domains` (exactly, case-insensitively).
pub(crate) fn domain_listed(email: &str, domains: &[String]) -> bool {
    let domain = email.rsplit_once('@').map(|(_, d)| d).unwrap_or_default();
    !domain.is_empty()
        && domains
            .iter()
            .any(|d| d.trim_start_matches('@').eq_ignore_ascii_case(domain))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cfg() -> OidcProviderConfig {
        OidcProviderConfig {
            name: "Corp".into(),
            issuer: "https://idp.example".into(),
            client_id: "pforte".into(),
            client_secret_file: None,
            scopes: vec!["openid".into()],
            allowed_domains: vec!["example.com".into()],
            allowed_emails: vec!["guest@partner.org".into()],
            allowed_groups: vec!["mcp-users".into()],
            groups_claim: "groups".into(),
            email_claim: "email".into(),
            trust_email: false,
        }
    }

    fn id(email: Option<&str>, verified: bool, groups: &[&str]) -> Identity {
        Identity {
            issuer: "https://idp.example".into(),
            subject: "1".into(),
            email: email.filter(|_| verified).map(str::to_owned),
            unverified_email: email.filter(|_| !verified).map(str::to_owned),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    #[test]
    fn domains_emails_and_groups_admit() {
        assert_eq!(
            admitted(&cfg(), &id(Some("a@example.com"), true, &[])),
            Ok(())
        );
        assert_eq!(
            admitted(&cfg(), &id(Some("guest@partner.org"), true, &[])),
            Ok(())
        );
        assert_eq!(admitted(&cfg(), &id(None, false, &["mcp-users"])), Ok(()));
    }

    #[test]
    fn outsiders_and_unverified_emails_are_refused_with_the_reason() {
        let other = admitted(&cfg(), &id(Some("eve@other.org"), true, &["staff"]))
            .unwrap_err()
            .audit();
        assert!(
            other.starts_with("eve@other.org may not sign in"),
            "{other}"
        );
        assert!(other.contains("not one of the allowed"), "{other}");
        assert!(other.contains("none of the allowed groups"), "{other}");
        let unverified = admitted(&cfg(), &id(Some("a@example.com"), false, &[]))
            .unwrap_err()
            .audit();
        assert!(unverified.contains("not verified"), "{unverified}");
        let subdomain = admitted(&cfg(), &id(Some("a@evil-example.com"), true, &[]));
        assert!(subdomain.is_err());
    }

    #[test]
    fn the_page_reads_as_a_sentence_and_says_what_the_operator_can_change() {
        let none = admitted(&cfg(), &id(None, false, &[])).unwrap_err();
        assert_eq!(
            none.page("Acme SSO", &cfg()),
            "Your Acme SSO account may not sign in here: the provider sent no email address, \
             and it is in none of the allowed groups. The operator of this gateway can ask Acme \
             SSO for the email scope, or name the claim that holds your address (email_claim, \
             currently \"email\"; Entra ID: preferred_username or upn, with trust_email = true)."
        );
        let unverified = admitted(&cfg(), &id(Some("ann@example.com"), false, &[])).unwrap_err();
        let page = unverified.page("Entra", &cfg());
        assert!(
            page.starts_with("Your Entra account ann@example.com may not sign in here: its email address is not verified"),
            "{page}"
        );
        assert!(page.contains("set trust_email = true"), "{page}");
        let outsider = admitted(&cfg(), &id(Some("eve@other.org"), true, &[])).unwrap_err();
        assert!(
            outsider.page("Acme SSO", &cfg()).ends_with(
                "ask the operator of this gateway to allow your address, domain or group."
            ),
        );
    }
}
