//! Who may sign in through a provider: a verified email in `allowed_domains` or
//! `allowed_emails`, or a group in `allowed_groups` — pure.

use super::Identity;
use crate::config::OidcProviderConfig;

/// `Ok` when `id` may sign in through `cfg`; otherwise why not, in words for the person.
pub(crate) fn admitted(cfg: &OidcProviderConfig, id: &Identity) -> Result<(), String> {
    if let Some(email) = &id.email {
        if cfg
            .allowed_emails
            .iter()
            .any(|e| e.eq_ignore_ascii_case(email))
        {
            return Ok(());
        }
        let domain = email.rsplit_once('@').map(|(_, d)| d).unwrap_or_default();
        if cfg
            .allowed_domains
            .iter()
            .any(|d| d.trim_start_matches('@').eq_ignore_ascii_case(domain))
        {
            return Ok(());
        }
    }
    if id.groups.iter().any(|g| cfg.allowed_groups.contains(g)) {
        return Ok(());
    }
    let who = id
        .email
        .as_deref()
        .or(id.unverified_email.as_deref())
        .unwrap_or("this account");
    let mut why = Vec::new();
    if !cfg.allowed_domains.is_empty() || !cfg.allowed_emails.is_empty() {
        why.push(match (&id.email, &id.unverified_email) {
            (Some(_), _) => "its email address is not one of the allowed ones".to_owned(),
            (None, Some(_)) => "its email address is not verified by the provider".to_owned(),
            (None, None) => "the provider sent no email address".to_owned(),
        });
    }
    if !cfg.allowed_groups.is_empty() {
        why.push("it is in none of the allowed groups".to_owned());
    }
    Err(format!(
        "{who} may not sign in here: {}",
        why.join(", and ")
    ))
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
        let other = admitted(&cfg(), &id(Some("eve@other.org"), true, &["staff"])).unwrap_err();
        assert!(
            other.starts_with("eve@other.org may not sign in"),
            "{other}"
        );
        assert!(other.contains("not one of the allowed"), "{other}");
        assert!(other.contains("none of the allowed groups"), "{other}");
        let unverified = admitted(&cfg(), &id(Some("a@example.com"), false, &[])).unwrap_err();
        assert!(unverified.contains("not verified"), "{unverified}");
        let subdomain = admitted(&cfg(), &id(Some("a@evil-example.com"), true, &[]));
        assert!(subdomain.is_err());
    }
}
