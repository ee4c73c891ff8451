//! What a sign-in's claims say about the person, the way providers send them (OIDC Core §5.4):
//! the ID token first, UserInfo for what the ID token left out; the email from the provider's
//! `email_claim`, verified by `email_verified: true` or the provider's `trust_email`; the groups
//! from its `groups_claim` — pure.

use serde_json::{Map, Value};

use super::Identity;
use crate::config::OidcProviderConfig;

/// The claims of one source (the ID token's or UserInfo's), as JSON.
pub(crate) type Claims = Map<String, Value>;

/// Whether the ID token leaves out a claim Pforte reads, so UserInfo should be asked.
pub(crate) fn needs_userinfo(cfg: &OidcProviderConfig, id_token: &Claims) -> bool {
    let missing = |name: &str| id_token.get(name).is_none_or(Value::is_null);
    missing(&cfg.email_claim)
        || missing(&cfg.groups_claim)
        || (!cfg.trust_email && missing("email_verified"))
}

/// `name` from the ID token, else from UserInfo.
fn claim<'a>(name: &str, id_token: &'a Claims, userinfo: Option<&'a Claims>) -> Option<&'a Value> {
    id_token
        .get(name)
        .filter(|v| !v.is_null())
        .or_else(|| userinfo.and_then(|u| u.get(name)).filter(|v| !v.is_null()))
}

/// A claim that says "true": the JSON boolean, or the string some providers send.
fn truthy(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

/// The person of a validated ID token (`issuer`, `subject`) with its claims and, when asked,
/// UserInfo's (whose `sub` the caller checked against the ID token's).
pub(crate) fn identity(
    cfg: &OidcProviderConfig,
    issuer: &str,
    subject: &str,
    id_token: &Claims,
    userinfo: Option<&Claims>,
) -> Identity {
    let email = claim(&cfg.email_claim, id_token, userinfo)
        .and_then(Value::as_str)
        .map(|e| crate::roles::email_case(e.trim()))
        .filter(|e| !e.is_empty() && !e.chars().any(char::is_control));
    let verified = cfg.trust_email || truthy(claim("email_verified", id_token, userinfo));
    let groups = match claim(&cfg.groups_claim, id_token, userinfo) {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|g| g.as_str().map(str::to_owned))
            .collect(),
        Some(Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    };
    Identity {
        issuer: issuer.to_owned(),
        subject: subject.to_owned(),
        email: email.clone().filter(|_| verified),
        unverified_email: email.filter(|_| !verified),
        groups,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg() -> OidcProviderConfig {
        OidcProviderConfig {
            name: "Acme SSO".into(),
            issuer: "https://idp.example".into(),
            client_id: "pforte".into(),
            client_secret_file: None,
            scopes: vec!["openid".into()],
            allowed_domains: vec!["acme.example".into()],
            allowed_emails: vec![],
            allowed_groups: vec![],
            groups_claim: "groups".into(),
            email_claim: "email".into(),
            trust_email: false,
        }
    }

    fn claims(v: Value) -> Claims {
        v.as_object().cloned().unwrap_or_default()
    }

    fn id(cfg: &OidcProviderConfig, token: Value, userinfo: Option<Value>) -> Identity {
        let userinfo = userinfo.map(claims);
        identity(
            cfg,
            "https://idp.example",
            "s1",
            &claims(token),
            userinfo.as_ref(),
        )
    }

    #[test]
    fn claims_in_the_id_token_need_no_userinfo() {
        let token = json!({"sub": "s1", "email": "Ann@Acme.example", "email_verified": true, "groups": ["eng"]});
        assert!(!needs_userinfo(&cfg(), &claims(token.clone())));
        let got = id(&cfg(), token, None);
        assert_eq!(got.email.as_deref(), Some("ann@acme.example"));
        assert_eq!(got.groups, ["eng"]);
    }

    #[test]
    fn claims_only_in_userinfo_are_read_from_there() {
        let token = json!({"sub": "s1"});
        assert!(needs_userinfo(&cfg(), &claims(token.clone())));
        let userinfo = json!({"sub": "s1", "email": "ann@acme.example", "email_verified": true, "groups": "eng"});
        let got = id(&cfg(), token, Some(userinfo));
        assert_eq!(got.email.as_deref(), Some("ann@acme.example"));
        assert_eq!(got.groups, ["eng"], "a single group as a string");
    }

    #[test]
    fn the_id_token_wins_over_userinfo() {
        let token = json!({"email": "ann@acme.example", "email_verified": true});
        let userinfo =
            json!({"email": "other@acme.example", "email_verified": false, "groups": ["ops"]});
        let got = id(&cfg(), token, Some(userinfo));
        assert_eq!(got.email.as_deref(), Some("ann@acme.example"));
        assert_eq!(got.groups, ["ops"], "groups only from UserInfo");
    }

    #[test]
    fn without_email_verified_an_email_counts_only_with_trust_email() {
        let token = json!({"email": "ann@acme.example", "groups": []});
        let plain = id(&cfg(), token.clone(), None);
        assert_eq!(plain.email, None);
        assert_eq!(plain.unverified_email.as_deref(), Some("ann@acme.example"));
        let trusted = OidcProviderConfig {
            trust_email: true,
            ..cfg()
        };
        assert!(!needs_userinfo(&trusted, &claims(token.clone())));
        assert_eq!(
            id(&trusted, token, None).email.as_deref(),
            Some("ann@acme.example")
        );
        let string_true = json!({"email": "ann@acme.example", "email_verified": "true"});
        assert!(id(&cfg(), string_true, None).email.is_some());
    }

    #[test]
    fn email_claim_and_groups_claim_name_other_claims() {
        let entra = OidcProviderConfig {
            email_claim: "upn".into(),
            groups_claim: "roles".into(),
            trust_email: true,
            ..cfg()
        };
        let token =
            json!({"upn": "Ann@Acme.example", "email": "private@home.example", "roles": ["mcp"]});
        let got = id(&entra, token, None);
        assert_eq!(got.email.as_deref(), Some("ann@acme.example"));
        assert_eq!(got.groups, ["mcp"]);
    }
}
