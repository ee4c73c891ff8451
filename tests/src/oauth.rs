//! What an OAuth client and a user's browser do against the gateway's authorization server:
//! discovery, registration, PKCE, and HTML forms submitted the way a browser submits them
//! (the form's `action` resolved against the page URL, every named input, the chosen button,
//! cookies kept in a jar, redirects not followed so each hop can be checked).

use anyhow::{Context as _, bail, ensure};
use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use reqwest::{StatusCode, redirect::Policy};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use url::Url;

use crate::{Gateway, McpClient};

pub use pforte_test_support::{Form, tags};

/// Claude.ai's OAuth callback.
pub const CLAUDE_CALLBACK: &str = "https://claude.ai/api/mcp/auth_callback";

/// A PKCE pair (S256).
#[derive(Debug, Clone)]
pub struct Pkce {
    pub verifier: String,
    pub challenge: String,
}

impl Pkce {
    /// A pair from `seed` (tests want distinct, reproducible verifiers; 43+ characters).
    /// Characters of `seed` outside RFC 7636's verifier alphabet (e.g. an email's `@`) become `-`.
    pub fn new(seed: &str) -> Self {
        let seed: String = seed
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-._~".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let verifier = format!("verifier-{seed}-0123456789-abcdefghijklmnopqrstuvwxyz");
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        Self {
            verifier,
            challenge,
        }
    }
}

/// A page the browser fetched.
#[derive(Debug)]
pub struct Page {
    pub url: Url,
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Page {
    pub fn form(&self) -> anyhow::Result<Form> {
        Form::parse(&self.url, &self.body)
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A user agent: a cookie jar, the gateway's CA, no automatic redirects.
#[derive(Debug, Clone)]
pub struct Browser {
    pub http: reqwest::Client,
}

impl Browser {
    pub fn new(ca_pem: Option<&str>) -> Self {
        let mut b = reqwest::Client::builder()
            .cookie_store(true)
            .redirect(Policy::none())
            .timeout(std::time::Duration::from_secs(30));
        if let Some(pem) = ca_pem {
            let cert = reqwest::Certificate::from_pem(pem.as_bytes()).expect("pem");
            b = b.tls_certs_only([cert]);
        }
        Self {
            http: b.build().expect("client"),
        }
    }

    pub fn for_gateway(gw: &Gateway) -> Self {
        Self::new(gw.ca_pem())
    }

    async fn page(url: Url, resp: reqwest::Response) -> anyhow::Result<Page> {
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.text().await?;
        Ok(Page {
            url,
            status,
            headers,
            body,
        })
    }

    pub async fn get(&self, url: &Url) -> anyhow::Result<Page> {
        let resp = self.http.get(url.clone()).send().await?;
        Self::page(url.clone(), resp).await
    }

    /// Submits `form` with the button `button_value` clicked.
    pub async fn submit(&self, form: &Form, button_value: Option<&str>) -> anyhow::Result<Page> {
        ensure!(form.method == "post", "form method {}", form.method);
        self.post_fields(&form.action, &form.body(button_value)?)
            .await
    }

    /// POSTs `fields` as `application/x-www-form-urlencoded` to `url`.
    pub async fn post_fields(
        &self,
        url: &Url,
        fields: &[(String, String)],
    ) -> anyhow::Result<Page> {
        let resp = self.http.post(url.clone()).form(fields).send().await?;
        Self::page(url.clone(), resp).await
    }
}

impl Page {
    /// The `Location` of a 303, resolved against this page's URL.
    pub fn see_other(&self) -> anyhow::Result<Url> {
        ensure!(
            self.status == StatusCode::SEE_OTHER,
            "expected 303, got {}: {}",
            self.status,
            self.body
        );
        let loc = self.header("location").context("303 without Location")?;
        Ok(self.url.join(loc)?)
    }
}

/// The query parameters of a URL as pairs.
pub fn query(url: &Url) -> Vec<(String, String)> {
    url.query_pairs().into_owned().collect()
}

/// One query parameter.
pub fn param(url: &Url, name: &str) -> Option<String> {
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// Where discovery led: the resource and authorization-server metadata.
#[derive(Debug, Clone)]
pub struct Discovered {
    pub resource: String,
    pub issuer: String,
    pub as_meta: Value,
}

impl Discovered {
    pub fn endpoint(&self, name: &str) -> anyhow::Result<Url> {
        let s = self.as_meta[name]
            .as_str()
            .with_context(|| format!("metadata without {name}"))?;
        Ok(Url::parse(s)?)
    }
}

/// What an MCP client does first: an unauthenticated POST to the MCP URL (401 with a
/// `resource_metadata` challenge), RFC 9728 metadata, then RFC 8414 metadata of the issuer.
pub async fn discover(http: &reqwest::Client, mcp_url: &str) -> anyhow::Result<Discovered> {
    let resp = McpClient::new(http.clone(), mcp_url)
        .try_initialize()
        .await?;
    ensure!(
        resp.status() == 401,
        "unauthenticated /mcp: {}",
        resp.status()
    );
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .context("401 without WWW-Authenticate")?
        .to_str()?
        .to_owned();
    let prm_url = challenge
        .split("resource_metadata=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .with_context(|| format!("no resource_metadata in {challenge:?}"))?
        .to_owned();
    let prm: Value = http
        .get(&prm_url)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let resource = prm["resource"].as_str().context("prm.resource")?.to_owned();
    ensure!(resource == mcp_url, "resource {resource} != {mcp_url}");
    let issuer = prm["authorization_servers"][0]
        .as_str()
        .context("prm.authorization_servers")?
        .to_owned();
    // RFC 8414 §3: the well-known path is inserted between host and the issuer's path (none).
    let as_meta: Value = http
        .get(format!("{issuer}/.well-known/oauth-authorization-server"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    ensure!(
        as_meta["issuer"] == issuer.as_str(),
        "issuer {} != {issuer}",
        as_meta["issuer"]
    );
    Ok(Discovered {
        resource,
        issuer,
        as_meta,
    })
}

/// A registered client.
#[derive(Debug, Clone)]
pub struct Registered {
    pub client_id: String,
    pub client_secret: Option<String>,
    pub response: Value,
}

/// RFC 7591 registration the way Claude.ai does it (confidential, `client_secret_post`).
pub async fn register_like_claude(
    http: &reqwest::Client,
    d: &Discovered,
) -> anyhow::Result<Registered> {
    register(
        http,
        d,
        &json!({
            "client_name": "Claude",
            "redirect_uris": [CLAUDE_CALLBACK],
            "token_endpoint_auth_method": "client_secret_post",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
        }),
    )
    .await
}

pub async fn register(
    http: &reqwest::Client,
    d: &Discovered,
    metadata: &Value,
) -> anyhow::Result<Registered> {
    let resp = http
        .post(d.endpoint("registration_endpoint")?)
        .json(metadata)
        .send()
        .await?;
    let status = resp.status();
    let body: Value = resp.json().await?;
    ensure!(status == StatusCode::CREATED, "register: {status} {body}");
    Ok(Registered {
        client_id: body["client_id"].as_str().context("client_id")?.to_owned(),
        client_secret: body["client_secret"].as_str().map(str::to_owned),
        response: body,
    })
}

/// The authorization request URL.
pub fn authorize_url(
    d: &Discovered,
    client_id: &str,
    redirect_uri: &str,
    pkce: &Pkce,
    state: &str,
    extra: &[(&str, &str)],
) -> anyhow::Result<Url> {
    let mut url = d.endpoint("authorization_endpoint")?;
    url.query_pairs_mut().extend_pairs([
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect_uri),
        ("state", state),
        ("code_challenge", pkce.challenge.as_str()),
        ("code_challenge_method", "S256"),
    ]);
    url.query_pairs_mut().extend_pairs(extra);
    Ok(url)
}

/// The browser step: open the authorization URL, sign in (when asked), approve or deny on the
/// consent page; returns the URL the authorization server redirected to (the client's
/// callback with `code`/`error`, `state`, `iss`) and the consent page's HTML.
pub async fn browser_step(
    browser: &Browser,
    authorize: &Url,
    username: &str,
    password: &str,
    decision: &str,
) -> anyhow::Result<(Url, String)> {
    let mut page = browser.get(authorize).await?;
    ensure!(
        page.status == 200,
        "authorize: {} {}",
        page.status,
        page.body
    );
    if page.body.contains("type=\"password\"") {
        let mut login = page.form()?;
        login.set("username", username)?;
        login.set("password", password)?;
        let after = browser.submit(&login, None).await?;
        let next = after.see_other()?;
        page = browser.get(&next).await?;
        ensure!(
            page.status == 200,
            "after login: {} {}",
            page.status,
            page.body
        );
    }
    let consent = page.form()?;
    ensure!(
        consent.buttons.iter().any(|(_, v)| v == decision),
        "no {decision} button on {}",
        page.body
    );
    let done = browser.submit(&consent, Some(decision)).await?;
    Ok((done.see_other()?, page.body))
}

/// A token endpoint answer.
#[derive(Debug, Clone)]
pub struct TokenAnswer {
    pub status: StatusCode,
    pub body: Value,
}

impl TokenAnswer {
    pub fn access(&self) -> anyhow::Result<String> {
        if self.status != 200 {
            bail!("token endpoint: {} {}", self.status, self.body);
        }
        Ok(self.body["access_token"]
            .as_str()
            .context("access_token")?
            .to_owned())
    }
    pub fn refresh(&self) -> anyhow::Result<String> {
        Ok(self.body["refresh_token"]
            .as_str()
            .context("refresh_token")?
            .to_owned())
    }
    pub fn error(&self) -> Option<&str> {
        self.body["error"].as_str()
    }
}

/// POSTs `form` to the token (or revocation) endpoint.
pub async fn post_form(
    http: &reqwest::Client,
    url: &Url,
    form: &[(&str, &str)],
) -> anyhow::Result<TokenAnswer> {
    let resp = http.post(url.clone()).form(form).send().await?;
    let status = resp.status();
    let text = resp.text().await?;
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).with_context(|| format!("{status}: {text}"))?
    };
    Ok(TokenAnswer { status, body })
}

/// The code grant with client_secret_post credentials.
pub async fn exchange_code(
    http: &reqwest::Client,
    d: &Discovered,
    client: &Registered,
    code: &str,
    redirect_uri: &str,
    verifier: &str,
    resource: &str,
) -> anyhow::Result<TokenAnswer> {
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect_uri),
        ("code_verifier", verifier),
        ("client_id", client.client_id.as_str()),
        ("resource", resource),
    ];
    if let Some(s) = &client.client_secret {
        form.push(("client_secret", s));
    }
    post_form(http, &d.endpoint("token_endpoint")?, &form).await
}

pub async fn refresh(
    http: &reqwest::Client,
    d: &Discovered,
    client: &Registered,
    refresh_token: &str,
) -> anyhow::Result<TokenAnswer> {
    let mut form = vec![
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh_token),
        ("client_id", client.client_id.as_str()),
    ];
    if let Some(s) = &client.client_secret {
        form.push(("client_secret", s));
    }
    post_form(http, &d.endpoint("token_endpoint")?, &form).await
}

pub async fn revoke(
    http: &reqwest::Client,
    d: &Discovered,
    client: &Registered,
    token: &str,
    hint: &str,
) -> anyhow::Result<TokenAnswer> {
    let mut form = vec![
        ("token", token),
        ("token_type_hint", hint),
        ("client_id", client.client_id.as_str()),
    ];
    if let Some(s) = &client.client_secret {
        form.push(("client_secret", s));
    }
    post_form(http, &d.endpoint("revocation_endpoint")?, &form).await
}

/// The status of an MCP `initialize` POST with `token` (200 accepted, 401 refused).
pub async fn mcp_status(http: &reqwest::Client, mcp_url: &str, token: &str) -> StatusCode {
    McpClient::new(http.clone(), mcp_url)
        .bearer(token)
        .try_initialize()
        .await
        .map_or(StatusCode::SERVICE_UNAVAILABLE, |r| r.status())
}

/// An OAuth access token for `user` with `scope` (space-separated), through the real flow:
/// discovery, registration like Claude.ai, authorize, login, consent, code exchange.
pub async fn access_token(
    gw: &Gateway,
    user: &str,
    password: &str,
    scope: &str,
) -> anyhow::Result<String> {
    access_token_at(&gw.mcp_url(), gw.ca_pem(), user, password, scope).await
}

/// [`access_token`] for any gateway: its MCP URL and the CA its TLS certificate chains to.
pub async fn access_token_at(
    mcp_url: &str,
    ca_pem: Option<&str>,
    user: &str,
    password: &str,
    scope: &str,
) -> anyhow::Result<String> {
    let browser = Browser::new(ca_pem);
    let d = discover(&browser.http, mcp_url).await?;
    let client = register_like_claude(&browser.http, &d).await?;
    let pkce = Pkce::new(user);
    let auth = authorize_url(
        &d,
        &client.client_id,
        CLAUDE_CALLBACK,
        &pkce,
        "state",
        &[("resource", &d.resource), ("scope", scope)],
    )?;
    let (cb, _) = browser_step(&browser, &auth, user, password, "approve").await?;
    let code = param(&cb, "code").context("no code in the callback")?;
    exchange_code(
        &browser.http,
        &d,
        &client,
        &code,
        CLAUDE_CALLBACK,
        &pkce.verifier,
        &d.resource,
    )
    .await?
    .access()
}
