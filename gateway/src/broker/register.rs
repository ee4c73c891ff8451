//! How Pforte is known to an upstream's authorization server: a configured client, a client ID
//! metadata document Pforte serves itself (CIMD: its URL is the client id), or dynamic client
//! registration (RFC 7591) — the choice, the document and the registration request and answer
//! are pure; `register` is the one POST.

use pforte_oauth::Secret;
use serde_json::{Value, json};
use url::Url;

use super::discover::UpstreamServer;
use super::transport::{self, HttpError};

/// How Pforte is registered with an upstream's authorization server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registration {
    /// A client ID metadata document at `client_id_url` (served by Pforte).
    Cimd { client_id_url: String },
    /// Dynamic client registration at the server's `registration_endpoint`.
    Dcr,
    /// A client registered by the operator.
    Static {
        client_id: String,
        client_secret: Option<Secret>,
    },
}

/// How the client authenticates at the token endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenAuth {
    /// A public client: `client_id` in the body, no secret.
    None,
    /// `client_secret_basic`.
    Basic,
    /// `client_secret_post`.
    Post,
}

impl TokenAuth {
    /// The RFC 7591 name.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenAuth::None => "none",
            TokenAuth::Basic => "client_secret_basic",
            TokenAuth::Post => "client_secret_post",
        }
    }

    /// From the RFC 7591 name (anything else: `None`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(TokenAuth::None),
            "client_secret_basic" => Some(TokenAuth::Basic),
            "client_secret_post" => Some(TokenAuth::Post),
            _ => None,
        }
    }
}

/// The client the flow runs as: its id, its secret when it has one, and how it presents it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamClient {
    pub client_id: String,
    pub client_secret: Option<Secret>,
    pub auth: TokenAuth,
}

/// Why no client could be had.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error(
        "the authorization server offers neither client ID metadata documents (for an https Pforte) nor dynamic client registration; configure a client_id"
    )]
    NoWay,
    #[error("registration failed: {0}")]
    Unreachable(#[from] HttpError),
    #[error("registration refused ({status}): {reason}")]
    Refused { status: u16, reason: String },
    #[error("registration answer unusable: {0}")]
    Invalid(String),
}

/// The grant and response types Pforte asks for, and its client name when none is given.
const GRANT_TYPES: [&str; 2] = ["authorization_code", "refresh_token"];

/// The registration to use: the configured client if any; else a metadata document when the
/// server takes them and Pforte's document URL is https (the server must fetch it); else
/// dynamic registration when the server offers it.
pub fn choose(
    configured: Option<(String, Option<Secret>)>,
    server: &UpstreamServer,
    client_id_url: &Url,
) -> Result<Registration, RegisterError> {
    if let Some((client_id, client_secret)) = configured {
        return Ok(Registration::Static {
            client_id,
            client_secret,
        });
    }
    if server.cimd_supported && client_id_url.scheme() == "https" {
        return Ok(Registration::Cimd {
            client_id_url: client_id_url.to_string(),
        });
    }
    if server.registration_endpoint.is_some() {
        return Ok(Registration::Dcr);
    }
    Err(RegisterError::NoWay)
}

/// The client ID metadata document served at `client_id_url`: a public client (no secret) of
/// the code flow with refresh, redirected to `redirect_uri` only.
pub fn cimd_document(client_id_url: &str, redirect_uri: &str, client_name: &str) -> Value {
    json!({
        "client_id": client_id_url,
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": GRANT_TYPES,
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    })
}

/// The RFC 7591 registration request.
pub(crate) fn dcr_request(redirect_uri: &str, client_name: &str) -> Value {
    json!({
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": GRANT_TYPES,
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    })
}

/// How a client with a secret presents it: as the server registered it, else Basic when the
/// server takes it (or says nothing: RFC 8414's default), else in the body.
pub(crate) fn secret_auth(registered: Option<&str>, server_methods: &[String]) -> TokenAuth {
    if let Some(auth) = registered
        .and_then(TokenAuth::parse)
        .filter(|a| *a != TokenAuth::None)
    {
        return auth;
    }
    let offers = |m: &str| server_methods.iter().any(|s| s == m);
    if server_methods.is_empty() || offers("client_secret_basic") || !offers("client_secret_post") {
        TokenAuth::Basic
    } else {
        TokenAuth::Post
    }
}

/// The client a registration answer (`status`, `body`) gives.
pub(crate) fn parse_dcr_answer(
    status: u16,
    body: &[u8],
    server: &UpstreamServer,
) -> Result<UpstreamClient, RegisterError> {
    let doc: Option<Value> = serde_json::from_slice(body).ok();
    if !(200..300).contains(&status) {
        let reason = doc
            .as_ref()
            .and_then(|d| {
                let e = d.get("error")?.as_str()?;
                Some(match d.get("error_description").and_then(Value::as_str) {
                    Some(desc) => format!("{e}: {desc}"),
                    None => e.to_owned(),
                })
            })
            .unwrap_or_else(|| "no OAuth error in the answer".into());
        return Err(RegisterError::Refused { status, reason });
    }
    let doc = doc.ok_or_else(|| RegisterError::Invalid("not JSON".into()))?;
    let client_id = doc
        .get("client_id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| RegisterError::Invalid("no client_id".into()))?;
    let client_secret = doc
        .get("client_secret")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(Secret::new);
    let auth = match &client_secret {
        None => TokenAuth::None,
        Some(_) => secret_auth(
            doc.get("token_endpoint_auth_method")
                .and_then(Value::as_str),
            &server.token_auth_methods,
        ),
    };
    Ok(UpstreamClient {
        client_id: client_id.to_owned(),
        client_secret,
        auth,
    })
}

/// Registers Pforte at `server`'s registration endpoint.
pub(crate) async fn register(
    http: &transport::Client,
    server: &UpstreamServer,
    redirect_uri: &str,
    client_name: &str,
) -> Result<UpstreamClient, RegisterError> {
    let endpoint = server
        .registration_endpoint
        .as_ref()
        .ok_or(RegisterError::NoWay)?;
    let resp = transport::post_json(
        http,
        endpoint,
        &dcr_request(redirect_uri, client_name),
        "application/json",
    )
    .await?;
    parse_dcr_answer(resp.status().as_u16(), resp.body(), server)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn server(cimd: bool, dcr: bool) -> UpstreamServer {
        UpstreamServer {
            resource: "https://up.example/mcp".into(),
            issuer: "https://as.example".into(),
            authorization_endpoint: Url::parse("https://as.example/authorize").unwrap(),
            token_endpoint: Url::parse("https://as.example/token").unwrap(),
            registration_endpoint: dcr.then(|| Url::parse("https://as.example/register").unwrap()),
            revocation_endpoint: None,
            cimd_supported: cimd,
            iss_parameter_supported: false,
            scopes_supported: Vec::new(),
            token_auth_methods: Vec::new(),
            ca_file: None,
            allowed_hosts: Vec::new(),
        }
    }

    #[test]
    fn the_choice() {
        let https = Url::parse("https://gw.example/connect/r/client.json").unwrap();
        let http = Url::parse("http://127.0.0.1:8080/connect/r/client.json").unwrap();
        let configured = Some(("cid".to_owned(), Some(Secret::new("s"))));
        assert_eq!(
            choose(configured, &server(true, true), &https).unwrap(),
            Registration::Static {
                client_id: "cid".into(),
                client_secret: Some(Secret::new("s"))
            }
        );
        assert_eq!(
            choose(None, &server(true, true), &https).unwrap(),
            Registration::Cimd {
                client_id_url: https.to_string()
            }
        );
        assert_eq!(
            choose(None, &server(true, true), &http).unwrap(),
            Registration::Dcr,
            "a plain-http Pforte cannot be fetched: DCR"
        );
        assert_eq!(
            choose(None, &server(false, true), &https).unwrap(),
            Registration::Dcr
        );
        assert!(matches!(
            choose(None, &server(false, false), &https),
            Err(RegisterError::NoWay)
        ));
        assert!(matches!(
            choose(None, &server(true, false), &http),
            Err(RegisterError::NoWay)
        ));
    }

    #[test]
    fn the_metadata_document() {
        let id = "https://gw.example/connect/notion/client.json";
        let cb = "https://gw.example/connect/notion/callback";
        let doc = cimd_document(id, cb, "Pforte");
        assert_eq!(
            doc,
            json!({
                "client_id": id,
                "client_name": "Pforte",
                "redirect_uris": [cb],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
            })
        );
        let dcr = dcr_request(cb, "Pforte");
        assert_eq!(dcr["redirect_uris"], json!([cb]));
        assert_eq!(dcr["token_endpoint_auth_method"], "none");
        assert!(dcr.get("client_id").is_none());
    }

    #[test]
    fn registration_answers() {
        let s = server(false, true);
        let public = parse_dcr_answer(201, br#"{"client_id":"c1"}"#, &s).unwrap();
        assert_eq!(public.client_id, "c1");
        assert_eq!(public.client_secret, None);
        assert_eq!(public.auth, TokenAuth::None);

        let confidential = parse_dcr_answer(
            201,
            br#"{"client_id":"c2","client_secret":"pfcs_x","token_endpoint_auth_method":"client_secret_post"}"#,
            &s,
        )
        .unwrap();
        assert_eq!(confidential.client_secret, Some(Secret::new("pfcs_x")));
        assert_eq!(confidential.auth, TokenAuth::Post);

        let refused = parse_dcr_answer(
            400,
            br#"{"error":"invalid_redirect_uri","error_description":"no"}"#,
            &s,
        );
        assert!(
            matches!(&refused, Err(RegisterError::Refused { status: 400, reason }) if reason == "invalid_redirect_uri: no"),
            "{refused:?}"
        );
        assert!(matches!(
            parse_dcr_answer(503, b"<html>", &s),
            Err(RegisterError::Refused { status: 503, .. })
        ));
        assert!(matches!(
            parse_dcr_answer(201, br#"{"client_secret":"x"}"#, &s),
            Err(RegisterError::Invalid(_))
        ));
        assert!(matches!(
            parse_dcr_answer(201, b"nope", &s),
            Err(RegisterError::Invalid(_))
        ));
    }

    #[test]
    fn how_a_secret_is_presented() {
        let methods = |m: &[&str]| m.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(secret_auth(None, &[]), TokenAuth::Basic);
        assert_eq!(
            secret_auth(None, &methods(&["client_secret_post"])),
            TokenAuth::Post
        );
        assert_eq!(
            secret_auth(
                None,
                &methods(&["client_secret_post", "client_secret_basic"])
            ),
            TokenAuth::Basic
        );
        assert_eq!(
            secret_auth(Some("client_secret_post"), &[]),
            TokenAuth::Post
        );
        assert_eq!(
            secret_auth(Some("none"), &methods(&["client_secret_post"])),
            TokenAuth::Post
        );
        assert_eq!(
            TokenAuth::parse(TokenAuth::Post.as_str()),
            Some(TokenAuth::Post)
        );
        assert_eq!(TokenAuth::parse("private_key_jwt"), None);
    }
}
