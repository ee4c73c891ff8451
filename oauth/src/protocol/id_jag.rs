//! The ID-JAG's claims (draft-ietf-oauth-identity-assertion-authz-grant, as profiled by MCP's
//! Enterprise-Managed Authorization) and their checks: inputs and `now` in, the grant's terms
//! or a specific `invalid_grant` out. The signature is checked before, by `jsonwebtoken`.

use serde_json::Value;

use super::{resource, scope};
use crate::config::{EnterpriseIdp, ResourceEntry};
use crate::error::OAuthError;

/// The JOSE `typ` an ID-JAG carries.
pub(crate) const TYP: &str = "oauth-id-jag+jwt";
/// Accepted clock skew between the IdP and this server, in seconds.
pub(crate) const SKEW_SECS: u64 = 60;
/// The longest accepted lifetime (`exp` − `iat`) of an ID-JAG: the draft expects short-lived
/// grants (minutes); this bounds how long a `jti` must be remembered.
pub(crate) const MAX_LIFETIME_SECS: u64 = 3600;

fn refused(why: impl Into<String>) -> OAuthError {
    OAuthError::InvalidGrant(why.into())
}

/// Whether the JOSE header's `typ` is an ID-JAG's (media types compare case-insensitively,
/// RFC 7515 §4.1.9; an `application/` prefix may be present).
pub fn typ_ok(typ: Option<&str>) -> bool {
    typ.map(|t| t.strip_prefix("application/").unwrap_or(t))
        .is_some_and(|t| t.eq_ignore_ascii_case(TYP))
}

/// What a checked ID-JAG grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terms {
    pub issuer: String,
    pub subject: String,
    pub jti: String,
    pub exp: u64,
    /// The configured resource (canonical URL) it is for.
    pub resource: String,
    pub scopes: Vec<String>,
    /// The user's email, when `email_verified` is the JSON `true`, ASCII lower-cased
    /// ([`crate::roles::email_case`]). It names a local user only within the issuer's
    /// `allowed_domains` (`auth_server/enterprise.rs`).
    pub email: Option<String>,
}

/// What the claims are checked against.
#[derive(Clone, Copy, Debug)]
pub struct Expected<'a> {
    pub idp: &'a EnterpriseIdp,
    /// This server's issuer identifier (the ID-JAG's audience).
    pub audience: &'a str,
    /// The authenticated client of the token request.
    pub client_id: &'a str,
    pub resources: &'a [ResourceEntry],
    /// The `resource` parameters of the token request.
    pub requested_resources: &'a [&'a str],
    /// The `scope` parameter of the token request.
    pub requested_scope: Option<&'a str>,
    /// The most any token for this resource may carry: the configured scopes. The user's
    /// roles (`[oauth.roles]`) narrow the result further once the user is known
    /// (`auth_server/enterprise.rs`, `enterprise_roles`).
    pub scope_cap: &'a [String],
    pub now: u64,
}

fn text<'a>(claims: &'a Value, name: &str) -> Result<&'a str, OAuthError> {
    match claims.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(_) => Err(refused(format!(
            "the ID-JAG's {name} claim is not a string"
        ))),
        None => Err(refused(format!("the ID-JAG has no {name} claim"))),
    }
}

fn time(claims: &Value, name: &str) -> Result<u64, OAuthError> {
    match claims.get(name) {
        Some(v) => v
            .as_u64()
            .ok_or_else(|| refused(format!("the ID-JAG's {name} claim is not a NumericDate"))),
        None => Err(refused(format!("the ID-JAG has no {name} claim"))),
    }
}

/// Whether `aud` (a string or an array of strings) names this server's issuer (with or
/// without a trailing `/`).
fn audience_ok(aud: Option<&Value>, ours: &str) -> bool {
    let matches = |a: &str| a.trim_end_matches('/') == ours.trim_end_matches('/');
    match aud {
        Some(Value::String(a)) => matches(a),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).any(matches),
        _ => false,
    }
}

/// Checks the claims of an ID-JAG whose signature was verified with `expected.idp`'s keys.
pub fn check(claims: &Value, expected: &Expected<'_>) -> Result<Terms, OAuthError> {
    let iss = text(claims, "iss")?;
    if iss != expected.idp.issuer {
        return Err(refused(format!(
            "the ID-JAG's iss {iss} is not the identity provider whose key signed it"
        )));
    }
    if !audience_ok(claims.get("aud"), expected.audience) {
        return Err(refused(format!(
            "the ID-JAG's aud is not this authorization server ({})",
            expected.audience
        )));
    }
    let (exp, iat) = (time(claims, "exp")?, time(claims, "iat")?);
    let now = expected.now;
    if now >= exp.saturating_add(SKEW_SECS) {
        return Err(refused("the ID-JAG has expired"));
    }
    if iat > now.saturating_add(SKEW_SECS) {
        return Err(refused("the ID-JAG's iat is in the future"));
    }
    if exp <= iat || exp - iat > MAX_LIFETIME_SECS {
        return Err(refused(format!(
            "the ID-JAG's lifetime (exp - iat) must be between 1 and {MAX_LIFETIME_SECS} s"
        )));
    }
    if let Some(nbf) = claims.get("nbf").and_then(Value::as_u64)
        && nbf > now.saturating_add(SKEW_SECS)
    {
        return Err(refused("the ID-JAG is not valid yet (nbf)"));
    }
    let jti = text(claims, "jti")?;
    if jti.len() > 256 {
        return Err(refused("the ID-JAG's jti is longer than 256 bytes"));
    }
    let subject = text(claims, "sub")?;
    let client_id = text(claims, "client_id")?;
    if client_id != expected.client_id {
        return Err(refused(
            "the ID-JAG was issued to another client (its client_id claim is not the authenticated client)",
        ));
    }
    let allowed = &expected.idp.allowed_clients;
    if !allowed.is_empty() && !allowed.iter().any(|c| c == client_id) {
        return Err(refused(format!(
            "the identity provider {iss} may not grant access to client {client_id}"
        )));
    }
    let resource = check_resource(claims, expected)?;
    let scopes = check_scopes(claims, expected)?;
    let email = verified_email(claims);
    Ok(Terms {
        issuer: iss.to_owned(),
        subject: subject.to_owned(),
        jti: jti.to_owned(),
        exp,
        resource,
        scopes,
        email,
    })
}

/// The resource the token is for: the `resource` claim (optional in MCP's profile; when
/// present it names the MCP server) names a configured resource, and a `resource` parameter of
/// the token request, when given, names the same one. Without the claim, the request's one
/// `resource` parameter names it, or else the one resource this server has; with several and
/// no name, the request is refused rather than a token made for a server nobody named.
fn check_resource(claims: &Value, expected: &Expected<'_>) -> Result<String, OAuthError> {
    let claimed = match claims.get("resource") {
        None => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(refused("the ID-JAG's resource claim is not a string")),
    };
    let named = match (claimed, expected.requested_resources) {
        (Some(claimed), _) => claimed,
        (None, [one]) => one,
        (None, []) => match expected.resources {
            [only] => only.url.as_str(),
            _ => {
                return Err(refused(
                    "neither the ID-JAG nor the request names the resource, and this server has several",
                ));
            }
        },
        (None, _) => return Err(refused("the request names more than one resource")),
    };
    let Some(entry) = resource::find(expected.resources, named) else {
        return Err(refused(format!("the resource {named} is not served here")));
    };
    let url = resource::canonical(&entry.url).unwrap_or_else(|| entry.url.clone());
    for r in expected.requested_resources {
        if resource::canonical(r).as_deref() != Some(url.as_str()) {
            return Err(refused(
                "the request's resource differs from the ID-JAG's resource claim",
            ));
        }
    }
    Ok(url)
}

/// The scopes granted: the ID-JAG's `scope` (none: every scope of the cap), narrowed to the
/// request's `scope` when it names some, and never beyond the cap. Scopes the cap does not
/// know are dropped (the IdP may grant scopes of other servers); none left is a refusal.
fn check_scopes(claims: &Value, expected: &Expected<'_>) -> Result<Vec<String>, OAuthError> {
    let claimed = match claims.get("scope") {
        None => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(refused("the ID-JAG's scope claim is not a string")),
    };
    let granted: Vec<String> = match claimed {
        Some(s) => s
            .split(' ')
            .filter(|s| !s.is_empty())
            .filter(|s| expected.scope_cap.iter().any(|c| c == s))
            .map(str::to_owned)
            .collect(),
        None => expected.scope_cap.to_vec(),
    };
    if granted.is_empty() {
        return Err(refused("the ID-JAG grants no scope this server knows"));
    }
    match expected.requested_scope.filter(|s| !s.trim().is_empty()) {
        None => Ok(granted),
        Some(req) => scope::narrow(Some(req), &granted).map_err(|_| {
            refused(format!(
                "the request asks for scopes the ID-JAG does not grant (it grants: {})",
                scope::join(&granted)
            ))
        }),
    }
}

/// The ID-JAG's email when `email_verified` is exactly `true` (a string `"false"`, or no
/// claim, is unverified), ASCII lower-cased.
fn verified_email(claims: &Value) -> Option<String> {
    match (claims.get("email"), claims.get("email_verified")) {
        (Some(Value::String(e)), Some(Value::Bool(true))) if e.contains('@') => {
            Some(crate::roles::email_case(e))
        }
        _ => None,
    }
}

/// The email's domain, when it is one of `allowed` (users may be created for it).
pub(crate) fn domain_allowed(email: &str, allowed: &[String]) -> bool {
    email
        .rsplit_once('@')
        .is_some_and(|(_, d)| allowed.iter().any(|a| a == d))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    const NOW: u64 = 1_800_000_000;

    fn idp() -> EnterpriseIdp {
        EnterpriseIdp {
            issuer: "https://idp.example".into(),
            allowed_clients: vec![],
            ..EnterpriseIdp::default()
        }
    }

    fn resources() -> Vec<ResourceEntry> {
        vec![ResourceEntry {
            url: "https://gw.example/notes/mcp".into(),
            name: "notes".into(),
            title: None,
            roles: Vec::new(),
            users: Vec::new(),
        }]
    }

    fn claims() -> Value {
        json!({
            "iss": "https://idp.example", "sub": "u-1", "aud": "https://gw.example/",
            "client_id": "c1", "jti": "j-1", "iat": NOW - 10, "exp": NOW + 290,
            "resource": "https://gw.example/notes/mcp", "scope": "mcp:read other:thing",
            "email": "Alice@Example.com", "email_verified": true,
        })
    }

    fn run(c: &Value, f: impl FnOnce(&mut Expected<'_>)) -> Result<Terms, OAuthError> {
        let (idp, res, cap) = (
            idp(),
            resources(),
            vec!["mcp:read".into(), "mcp:write".into()],
        );
        let mut e = Expected {
            idp: &idp,
            audience: "https://gw.example",
            client_id: "c1",
            resources: &res,
            requested_resources: &[],
            requested_scope: None,
            scope_cap: &cap,
            now: NOW,
        };
        f(&mut e);
        check(c, &e)
    }

    fn why(r: Result<Terms, OAuthError>) -> String {
        match r {
            Err(OAuthError::InvalidGrant(d)) => d,
            other => panic!("expected invalid_grant, got {other:?}"),
        }
    }

    #[test]
    fn a_good_id_jag_grants_its_known_scopes_for_its_resource() {
        let t = run(&claims(), |_| {}).unwrap();
        assert_eq!(t.resource, "https://gw.example/notes/mcp");
        assert_eq!(t.scopes, vec!["mcp:read".to_owned()]);
        assert_eq!(t.email.as_deref(), Some("alice@example.com"));
        assert_eq!((t.subject.as_str(), t.jti.as_str()), ("u-1", "j-1"));
    }

    #[test]
    fn typ_is_compared_as_a_media_type() {
        assert!(typ_ok(Some("oauth-id-jag+jwt")));
        assert!(typ_ok(Some("application/OAuth-ID-JAG+JWT")));
        assert!(!typ_ok(Some("JWT")));
        assert!(!typ_ok(None));
    }

    #[test]
    fn each_wrong_claim_is_named() {
        let with = |k: &str, v: Value| {
            let mut c = claims();
            c[k] = v;
            c
        };
        let cases = [
            (with("aud", json!("https://other.example")), "aud"),
            (with("exp", json!(NOW - 61)), "expired"),
            (with("iat", json!(NOW + 120)), "future"),
            (with("exp", json!(NOW + 7200)), "lifetime"),
            (with("client_id", json!("c2")), "another client"),
            (
                with("resource", json!("https://gw.example/other/mcp")),
                "not served",
            ),
            (with("scope", json!("other:thing")), "no scope"),
            (with("iss", json!("https://evil.example")), "iss"),
        ];
        for (c, needle) in cases {
            let d = why(run(&c, |_| {}));
            assert!(d.contains(needle), "{d:?} should mention {needle}");
        }
        let mut c = claims();
        c.as_object_mut().unwrap().remove("jti");
        assert!(why(run(&c, |_| {})).contains("no jti"));
    }

    #[test]
    fn the_request_can_narrow_but_not_widen_or_retarget() {
        let t = run(&claims(), |e| e.requested_scope = Some("mcp:read")).unwrap();
        assert_eq!(t.scopes, vec!["mcp:read".to_owned()]);
        assert!(
            why(run(&claims(), |e| e.requested_scope = Some("mcp:write")))
                .contains("does not grant")
        );
        const OTHER: [&str; 1] = ["https://gw.example/other/mcp"];
        assert!(why(run(&claims(), |e| e.requested_resources = &OTHER)).contains("differs"));
    }

    #[test]
    fn without_a_resource_claim_the_request_or_the_one_resource_names_it() {
        let mut c = claims();
        c.as_object_mut().unwrap().remove("resource");
        // The one configured resource.
        let t = run(&c, |_| {}).unwrap();
        assert_eq!(t.resource, "https://gw.example/notes/mcp");
        // The request's resource parameter.
        const NOTES: [&str; 1] = ["https://gw.example/notes/mcp"];
        let t = run(&c, |e| e.requested_resources = &NOTES).unwrap();
        assert_eq!(t.resource, "https://gw.example/notes/mcp");
        const OTHER: [&str; 1] = ["https://gw.example/other/mcp"];
        assert!(why(run(&c, |e| e.requested_resources = &OTHER)).contains("not served"));
        // Several resources and nobody names one: refused.
        let mut several = resources();
        several.push(ResourceEntry {
            url: "https://gw.example/mcp".into(),
            name: "mcp".into(),
            title: None,
            roles: Vec::new(),
            users: Vec::new(),
        });
        let (idp, cap) = (idp(), vec!["mcp:read".to_owned()]);
        let e = Expected {
            idp: &idp,
            audience: "https://gw.example",
            client_id: "c1",
            resources: &several,
            requested_resources: &[],
            requested_scope: None,
            scope_cap: &cap,
            now: NOW,
        };
        assert!(why(check(&c, &e)).contains("names the resource"));
    }

    #[test]
    fn allowed_clients_and_unverified_email() {
        let idp = EnterpriseIdp {
            allowed_clients: vec!["c9".into()],
            ..idp()
        };
        let (res, cap) = (resources(), vec!["mcp:read".into()]);
        let e = Expected {
            idp: &idp,
            audience: "https://gw.example",
            client_id: "c1",
            resources: &res,
            requested_resources: &[],
            requested_scope: None,
            scope_cap: &cap,
            now: NOW,
        };
        assert!(why(check(&claims(), &e)).contains("may not grant"));
        let mut c = claims();
        c["email_verified"] = json!(false);
        assert_eq!(run(&c, |_| {}).unwrap().email, None);
        assert!(domain_allowed("a@example.com", &["example.com".into()]));
        assert!(!domain_allowed("a@evil.com", &["example.com".into()]));
    }

    #[test]
    fn only_a_json_true_verifies_and_only_ascii_letters_fold() {
        let email = |verified: Value, email: &str| {
            let mut c = claims();
            c["email_verified"] = verified;
            c["email"] = json!(email);
            run(&c, |_| {}).unwrap().email
        };
        assert_eq!(
            email(json!(true), "Bob@Example.com").as_deref(),
            Some("bob@example.com")
        );
        for unverified in [json!("false"), json!("true"), json!(1), json!(null)] {
            assert_eq!(
                email(unverified.clone(), "bob@example.com"),
                None,
                "{unverified}"
            );
        }
        let mut absent = claims();
        absent.as_object_mut().unwrap().remove("email_verified");
        assert_eq!(run(&absent, |_| {}).unwrap().email, None);
        // Only ASCII letters fold: KELVIN SIGN stays what it is.
        assert_eq!(
            email(json!(true), "\u{212A}ate@partner.org").as_deref(),
            Some("\u{212A}ate@partner.org")
        );
    }
}
