//! Discovery of an upstream MCP server's authorization: its 401's `resource_metadata`
//! (else the RFC 9728 well-known URLs), the protected-resource metadata, then the
//! authorization server's RFC 8414 metadata (else its OpenID configuration), checked — the
//! `issuer` is the one asked for, the code flow and PKCE S256 are offered, every URL held to the
//! route's address policy (`pforte_outbound::AddressPolicy`: https to public addresses; plain
//! http and private addresses only on the route's own upstream host, as written, or a host of
//! its `allow_hosts`). URL building and the documents' checks are pure; `discover`
//! is the I/O around them; `Cache` keeps a result per route for an hour.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pforte_outbound::{AddressPolicy, Refusal};
use serde_json::Value;
use url::Url;

use super::challenge;
use super::transport::{self, Client, HttpError};

/// How long a discovery result is used before it is fetched again.
pub(crate) const DISCOVERY_TTL_MS: u64 = 3600 * 1000;

/// What discovery found about one upstream: the resource to ask tokens for and its
/// authorization server's endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamServer {
    /// The protected resource's identifier (RFC 9728 `resource`): the `resource` parameter of
    /// every authorization and token request (RFC 8707).
    pub resource: String,
    pub issuer: String,
    pub authorization_endpoint: Url,
    pub token_endpoint: Url,
    pub registration_endpoint: Option<Url>,
    pub revocation_endpoint: Option<Url>,
    /// `client_id_metadata_document_supported`: client ids may be metadata-document URLs.
    pub cimd_supported: bool,
    /// `authorization_response_iss_parameter_supported` (RFC 9207): callbacks carry `iss`.
    pub iss_parameter_supported: bool,
    /// The resource's `scopes_supported` (else the authorization server's; may be empty).
    pub scopes_supported: Vec<String>,
    /// The token endpoint's `token_endpoint_auth_methods_supported` (empty: not said).
    pub token_auth_methods: Vec<String>,
    /// The CA file of the route it was discovered through (the token endpoint is reached with
    /// the same trust).
    pub ca_file: Option<PathBuf>,
    /// The hosts the route's address policy exempts (its upstream's host and its
    /// `allow_hosts`): every later request to the server is held to the same policy.
    pub allowed_hosts: Vec<String>,
}

/// Why discovery failed.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("{what} could not be fetched: {reason}")]
    Unreachable { what: &'static str, reason: String },
    #[error(
        "the upstream names no protected-resource metadata (no resource_metadata in its 401, nothing at the well-known URLs)"
    )]
    NoResourceMetadata,
    #[error("{what} is unusable: {reason}")]
    Invalid { what: &'static str, reason: String },
    #[error("refused by the address policy: {0}")]
    Insecure(Refusal),
    #[error("the authorization server's metadata says issuer {found}, not {expected}")]
    IssuerMismatch { expected: String, found: String },
    #[error("the authorization server does not offer the authorization code flow")]
    NoCodeFlow,
    #[error(
        "the authorization server does not offer PKCE with S256 (code_challenge_methods_supported)"
    )]
    NoPkceS256,
}

/// `raw` parsed and held to the route's address `policy` (see the module's comment).
pub(crate) fn checked_url(policy: &AddressPolicy, raw: &str) -> Result<Url, DiscoveryError> {
    policy.parse(raw).map_err(|e| match e {
        Refusal::NotAUrl(raw, reason) => DiscoveryError::Invalid {
            what: "a URL",
            reason: format!("{raw}: {reason}"),
        },
        other => DiscoveryError::Insecure(other),
    })
}

/// `origin` + `well_known` + `path` (RFC 8414 §3.1 / RFC 9728 §3.1 insertion: the well-known
/// part goes between the host and the path; a trailing `/` of the path is dropped).
fn inserted(base: &Url, well_known: &str) -> Url {
    let path = base.path().trim_end_matches('/');
    let mut url = base.clone();
    url.set_path(&format!("{well_known}{path}"));
    url.set_query(None);
    url.set_fragment(None);
    url
}

/// Where the protected-resource metadata may be when the 401 names none: the path-inserted
/// form, then the root one.
pub(crate) fn resource_metadata_urls(mcp_url: &Url) -> Vec<Url> {
    const WK: &str = "/.well-known/oauth-protected-resource";
    let mut urls = vec![inserted(mcp_url, WK)];
    let mut root = mcp_url.clone();
    root.set_path(WK);
    root.set_query(None);
    root.set_fragment(None);
    if !urls.contains(&root) {
        urls.push(root);
    }
    urls
}

/// Where the authorization server's metadata may be: RFC 8414's path-inserted form, then
/// OpenID Connect's `{issuer}/.well-known/openid-configuration`.
pub(crate) fn authorization_server_metadata_urls(issuer: &Url) -> Vec<Url> {
    let mut oidc = issuer.clone();
    oidc.set_path(&format!(
        "{}/.well-known/openid-configuration",
        issuer.path().trim_end_matches('/')
    ));
    vec![
        inserted(issuer, "/.well-known/oauth-authorization-server"),
        oidc,
    ]
}

/// What the protected-resource metadata says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResourceMetadata {
    pub resource: String,
    pub issuer: Url,
    pub scopes_supported: Vec<String>,
}

fn strings(doc: &Value, key: &str) -> Vec<String> {
    doc.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn json_object(body: &[u8], what: &'static str) -> Result<Value, DiscoveryError> {
    let doc: Value = serde_json::from_slice(body).map_err(|e| DiscoveryError::Invalid {
        what,
        reason: format!("not JSON: {e}"),
    })?;
    if !doc.is_object() {
        return Err(DiscoveryError::Invalid {
            what,
            reason: "not a JSON object".into(),
        });
    }
    Ok(doc)
}

/// Whether `resource` names the MCP URL or a part of its site above it: same origin, and its
/// path is the MCP URL's path or a `/`-bounded prefix of it.
pub(crate) fn resource_covers(resource: &Url, mcp_url: &Url) -> bool {
    if resource.origin() != mcp_url.origin() {
        return false;
    }
    let r = resource.path().trim_end_matches('/');
    let m = mcp_url.path().trim_end_matches('/');
    m == r || m.starts_with(&format!("{r}/"))
}

/// Reads protected-resource metadata fetched for `mcp_url`: a `resource` that covers it and an
/// authorization server.
pub(crate) fn parse_resource_metadata(
    body: &[u8],
    mcp_url: &Url,
    policy: &AddressPolicy,
) -> Result<ResourceMetadata, DiscoveryError> {
    const WHAT: &str = "the protected-resource metadata";
    let doc = json_object(body, WHAT)?;
    let invalid = |reason: String| DiscoveryError::Invalid { what: WHAT, reason };
    let resource = doc
        .get("resource")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("no resource".into()))?;
    let parsed = Url::parse(resource).map_err(|e| invalid(format!("resource {resource}: {e}")))?;
    if !resource_covers(&parsed, mcp_url) {
        return Err(invalid(format!(
            "its resource {resource} is not the upstream {mcp_url}"
        )));
    }
    let issuer = doc
        .get("authorization_servers")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("no authorization_servers".into()))?;
    let issuer = checked_url(policy, issuer)?;
    if issuer.query().is_some() {
        return Err(invalid(format!("issuer {issuer} has a query")));
    }
    Ok(ResourceMetadata {
        resource: resource.to_owned(),
        issuer,
        scopes_supported: strings(&doc, "scopes_supported"),
    })
}

/// Whether two issuer identifiers are the same (RFC 8414 §3.3: identical; a trailing `/` is
/// forgiven, since URL parsing adds one to a bare origin).
fn same_issuer(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// Checks the authorization server's metadata for `prm`'s issuer and builds the result.
pub(crate) fn parse_server_metadata(
    body: &[u8],
    prm: &ResourceMetadata,
    ca_file: Option<PathBuf>,
    policy: &AddressPolicy,
) -> Result<UpstreamServer, DiscoveryError> {
    const WHAT: &str = "the authorization server's metadata";
    let doc = json_object(body, WHAT)?;
    let issuer = doc.get("issuer").and_then(Value::as_str).unwrap_or("");
    if !same_issuer(issuer, prm.issuer.as_str()) {
        return Err(DiscoveryError::IssuerMismatch {
            expected: prm.issuer.to_string(),
            found: issuer.to_owned(),
        });
    }
    if !strings(&doc, "response_types_supported")
        .iter()
        .any(|t| t == "code")
    {
        return Err(DiscoveryError::NoCodeFlow);
    }
    if !strings(&doc, "code_challenge_methods_supported")
        .iter()
        .any(|m| m == "S256")
    {
        return Err(DiscoveryError::NoPkceS256);
    }
    let endpoint = |key: &'static str| -> Result<Option<Url>, DiscoveryError> {
        doc.get(key)
            .and_then(Value::as_str)
            .map(|raw| checked_url(policy, raw))
            .transpose()
    };
    let required = |key: &'static str| {
        endpoint(key)?.ok_or(DiscoveryError::Invalid {
            what: WHAT,
            reason: format!("no {key}"),
        })
    };
    let scopes = if prm.scopes_supported.is_empty() {
        strings(&doc, "scopes_supported")
    } else {
        prm.scopes_supported.clone()
    };
    Ok(UpstreamServer {
        resource: prm.resource.clone(),
        issuer: issuer.to_owned(),
        authorization_endpoint: required("authorization_endpoint")?,
        token_endpoint: required("token_endpoint")?,
        registration_endpoint: endpoint("registration_endpoint")?,
        revocation_endpoint: endpoint("revocation_endpoint")?,
        cimd_supported: doc
            .get("client_id_metadata_document_supported")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        iss_parameter_supported: doc
            .get("authorization_response_iss_parameter_supported")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        scopes_supported: scopes,
        token_auth_methods: strings(&doc, "token_endpoint_auth_methods_supported"),
        ca_file,
        allowed_hosts: policy.allowed_hosts().to_vec(),
    })
}

/// The JSON-RPC `initialize` an MCP client sends first (here without credentials, to be
/// refused with the challenge).
fn initialize_request() -> Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "pforte", "version": env!("CARGO_PKG_VERSION")}
        }
    })
}

/// The upstream's `resource_metadata` URL from the 401 it answers an uncredentialed
/// `initialize` with; `None` when it answers otherwise or names none.
async fn probe(http: &Client, mcp_url: &Url) -> Result<Option<String>, DiscoveryError> {
    let resp = transport::post_json(
        http,
        mcp_url,
        &initialize_request(),
        "application/json, text/event-stream",
    )
    .await
    .map_err(|e| unreachable("the upstream", &e))?;
    if resp.status() != http::StatusCode::UNAUTHORIZED {
        return Ok(None);
    }
    let lines = resp
        .headers()
        .get_all(http::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok());
    Ok(challenge::resource_metadata(lines))
}

fn unreachable(what: &'static str, e: &HttpError) -> DiscoveryError {
    DiscoveryError::Unreachable {
        what,
        reason: e.to_string(),
    }
}

/// The first of `urls` answering 200, with its body; the last failure otherwise.
async fn first_found(
    http: &Client,
    urls: &[Url],
    what: &'static str,
) -> Result<Option<Vec<u8>>, DiscoveryError> {
    let mut failure = None;
    for url in urls {
        match transport::get_json(http, url).await {
            Ok(resp) if resp.status() == http::StatusCode::OK => {
                return Ok(Some(resp.into_body()));
            }
            Ok(resp) => {
                tracing::debug!(%url, status = resp.status().as_u16(), "{what}: not here");
            }
            Err(e) => failure = Some(unreachable(what, &e)),
        }
    }
    failure.map_or(Ok(None), Err)
}

/// Discovery for the upstream MCP server at `mcp_url` (from the configuration), reached with
/// `http` (which trusts the route's `ca_file` and holds the route's address policy).
pub(crate) async fn discover(
    http: &Client,
    mcp_url: &Url,
    ca_file: Option<PathBuf>,
) -> Result<UpstreamServer, DiscoveryError> {
    const PRM: &str = "the protected-resource metadata";
    let prm_body = match probe(http, mcp_url).await? {
        Some(named) => {
            let url = checked_url(http.policy(), &named)?;
            let resp = transport::get_json(http, &url)
                .await
                .map_err(|e| unreachable(PRM, &e))?;
            if resp.status() != http::StatusCode::OK {
                return Err(DiscoveryError::Unreachable {
                    what: PRM,
                    reason: format!("{url} answered {}", resp.status()),
                });
            }
            resp.into_body()
        }
        None => first_found(http, &resource_metadata_urls(mcp_url), PRM)
            .await?
            .ok_or(DiscoveryError::NoResourceMetadata)?,
    };
    let prm = parse_resource_metadata(&prm_body, mcp_url, http.policy())?;
    const ASM: &str = "the authorization server's metadata";
    let as_body = first_found(http, &authorization_server_metadata_urls(&prm.issuer), ASM)
        .await?
        .ok_or_else(|| DiscoveryError::Unreachable {
            what: ASM,
            reason: format!("nothing at the well-known URLs of {}", prm.issuer),
        })?;
    parse_server_metadata(&as_body, &prm, ca_file, http.policy())
}

/// Discovery results per route, each used for [`DISCOVERY_TTL_MS`].
#[derive(Debug, Default)]
pub(crate) struct Cache {
    entries: Mutex<HashMap<String, (Arc<UpstreamServer>, u64)>>,
}

impl Cache {
    /// The route's result when fetched less than an hour before `now_ms`.
    pub(crate) fn get(&self, route: &str, now_ms: u64) -> Option<Arc<UpstreamServer>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(route)
            .filter(|(_, at)| now_ms.saturating_sub(*at) < DISCOVERY_TTL_MS)
            .map(|(s, _)| Arc::clone(s))
    }

    pub(crate) fn put(&self, route: &str, server: Arc<UpstreamServer>, now_ms: u64) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.insert(route.to_owned(), (server, now_ms));
    }

    /// Drops the route's result (its upstream changed, or the route is gone).
    pub(crate) fn forget(&self, route: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.remove(route);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn well_known_urls_insert_before_the_path() {
        let prm = resource_metadata_urls(&url("https://up.example/tenant/mcp/?x=1"));
        let prm: Vec<&str> = prm.iter().map(Url::as_str).collect();
        assert_eq!(
            prm,
            [
                "https://up.example/.well-known/oauth-protected-resource/tenant/mcp",
                "https://up.example/.well-known/oauth-protected-resource",
            ]
        );
        let root = resource_metadata_urls(&url("https://up.example/"));
        assert_eq!(root.len(), 1);
        assert_eq!(
            root[0].as_str(),
            "https://up.example/.well-known/oauth-protected-resource"
        );

        let asm = authorization_server_metadata_urls(&url("https://as.example/realms/a"));
        let asm: Vec<&str> = asm.iter().map(Url::as_str).collect();
        assert_eq!(
            asm,
            [
                "https://as.example/.well-known/oauth-authorization-server/realms/a",
                "https://as.example/realms/a/.well-known/openid-configuration",
            ]
        );
        let bare = authorization_server_metadata_urls(&url("https://as.example"));
        assert_eq!(
            bare[0].as_str(),
            "https://as.example/.well-known/oauth-authorization-server"
        );
        assert_eq!(
            bare[1].as_str(),
            "https://as.example/.well-known/openid-configuration"
        );
    }

    fn public() -> AddressPolicy {
        AddressPolicy::public_only()
    }

    #[test]
    fn only_https_or_http_to_the_routes_own_hosts() {
        let policy = AddressPolicy::allowing(["127.0.0.1", "[::1]", "localhost"]);
        let checked_url = |raw: &str| checked_url(&policy, raw);
        for ok in [
            "https://as.example/x",
            "http://127.0.0.1:8080/x",
            "http://[::1]/x",
            "http://localhost:3000/",
        ] {
            assert!(checked_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://as.example/x",
            "http://10.0.0.1/x",
            "https://10.0.0.1/x",
            "http://2130706433:8080/x",
            "https://169.254.169.254/x",
            "ftp://as.example/",
            "https://user:pw@as.example/",
            "https://as.example/#frag",
            "javascript:alert(1)",
        ] {
            assert!(
                matches!(checked_url(bad), Err(DiscoveryError::Insecure(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            checked_url("not a url"),
            Err(DiscoveryError::Invalid { .. })
        ));
    }

    #[test]
    fn the_resource_must_cover_the_upstream() {
        let mcp = url("https://up.example/tenant/mcp");
        for ok in [
            "https://up.example/tenant/mcp",
            "https://up.example/tenant/mcp/",
            "https://up.example/tenant",
            "https://up.example",
        ] {
            assert!(resource_covers(&url(ok), &mcp), "{ok}");
        }
        for bad in [
            "https://up.example/tenant/mcp2",
            "https://up.example/ten",
            "https://other.example/tenant/mcp",
            "http://up.example/tenant/mcp",
            "https://up.example:8443/tenant/mcp",
        ] {
            assert!(!resource_covers(&url(bad), &mcp), "{bad}");
        }
    }

    fn prm_doc() -> Value {
        json!({
            "resource": "https://up.example/mcp",
            "authorization_servers": ["https://as.example/t1", "https://other.example"],
            "scopes_supported": ["read", "write"],
        })
    }

    fn prm() -> ResourceMetadata {
        parse_resource_metadata(
            prm_doc().to_string().as_bytes(),
            &url("https://up.example/mcp"),
            &public(),
        )
        .unwrap()
    }

    #[test]
    fn resource_metadata_is_read_and_checked() {
        let p = prm();
        assert_eq!(p.resource, "https://up.example/mcp");
        assert_eq!(p.issuer.as_str(), "https://as.example/t1");
        assert_eq!(p.scopes_supported, ["read", "write"]);

        let mcp = url("https://up.example/mcp");
        let refused =
            |doc: Value| parse_resource_metadata(doc.to_string().as_bytes(), &mcp, &public());
        let mut other = prm_doc();
        other["resource"] = json!("https://evil.example/mcp");
        assert!(matches!(
            refused(other),
            Err(DiscoveryError::Invalid { .. })
        ));
        let mut none = prm_doc();
        none["authorization_servers"] = json!([]);
        assert!(matches!(refused(none), Err(DiscoveryError::Invalid { .. })));
        let mut plain = prm_doc();
        plain["authorization_servers"] = json!(["http://as.example"]);
        assert!(matches!(refused(plain), Err(DiscoveryError::Insecure(_))));
        assert!(matches!(
            parse_resource_metadata(b"[1]", &mcp, &public()),
            Err(DiscoveryError::Invalid { .. })
        ));
        assert!(matches!(
            parse_resource_metadata(b"<html>", &mcp, &public()),
            Err(DiscoveryError::Invalid { .. })
        ));
    }

    fn as_doc() -> Value {
        json!({
            "issuer": "https://as.example/t1",
            "authorization_endpoint": "https://as.example/t1/authorize",
            "token_endpoint": "https://as.example/t1/token",
            "registration_endpoint": "https://as.example/t1/register",
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["plain", "S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_post"],
            "client_id_metadata_document_supported": true,
            "authorization_response_iss_parameter_supported": true,
            "scopes_supported": ["ignored"],
        })
    }

    fn server(doc: Value) -> Result<UpstreamServer, DiscoveryError> {
        parse_server_metadata(doc.to_string().as_bytes(), &prm(), None, &public())
    }

    #[test]
    fn server_metadata_is_read() {
        let s = server(as_doc()).unwrap();
        assert_eq!(s.resource, "https://up.example/mcp");
        assert_eq!(s.issuer, "https://as.example/t1");
        assert_eq!(
            s.authorization_endpoint.as_str(),
            "https://as.example/t1/authorize"
        );
        assert_eq!(s.token_endpoint.as_str(), "https://as.example/t1/token");
        assert_eq!(
            s.registration_endpoint.as_ref().map(Url::as_str),
            Some("https://as.example/t1/register")
        );
        assert_eq!(s.revocation_endpoint, None);
        assert!(s.cimd_supported);
        assert_eq!(
            s.scopes_supported,
            ["read", "write"],
            "the resource's first"
        );
        assert_eq!(s.token_auth_methods, ["none", "client_secret_post"]);
    }

    #[test]
    fn server_metadata_refusals_are_specific() {
        let mut d = as_doc();
        d["issuer"] = json!("https://as.example/t2");
        assert!(matches!(
            server(d),
            Err(DiscoveryError::IssuerMismatch { .. })
        ));
        let mut d = as_doc();
        d["issuer"] = json!("https://as.example/t1/");
        assert!(server(d).is_ok(), "a trailing slash is the same issuer");
        let mut d = as_doc();
        d["response_types_supported"] = json!(["token"]);
        assert!(matches!(server(d), Err(DiscoveryError::NoCodeFlow)));
        let mut d = as_doc();
        d["code_challenge_methods_supported"] = json!(["plain"]);
        assert!(matches!(server(d), Err(DiscoveryError::NoPkceS256)));
        let mut d = as_doc();
        d.as_object_mut()
            .unwrap()
            .remove("code_challenge_methods_supported");
        assert!(matches!(server(d), Err(DiscoveryError::NoPkceS256)));
        let mut d = as_doc();
        d["token_endpoint"] = json!("http://as.example/token");
        assert!(matches!(server(d), Err(DiscoveryError::Insecure(_))));
        let mut d = as_doc();
        d.as_object_mut().unwrap().remove("token_endpoint");
        assert!(matches!(server(d), Err(DiscoveryError::Invalid { .. })));
        let mut d = as_doc();
        d["registration_endpoint"] = json!("http://as.example/register");
        assert!(matches!(server(d), Err(DiscoveryError::Insecure(_))));
    }

    #[test]
    fn the_cache_keeps_a_result_for_an_hour() {
        let cache = Cache::default();
        let s = Arc::new(server(as_doc()).unwrap());
        assert!(cache.get("r", 0).is_none());
        cache.put("r", Arc::clone(&s), 1_000);
        assert_eq!(cache.get("r", 1_000 + DISCOVERY_TTL_MS - 1), Some(s));
        assert!(cache.get("r", 1_000 + DISCOVERY_TTL_MS).is_none());
        assert!(cache.get("other", 1_000).is_none());
        cache.forget("r");
        assert!(cache.get("r", 1_000).is_none());
    }
}
