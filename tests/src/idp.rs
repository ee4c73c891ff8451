//! A real OpenID provider for the sign-in tests: npm's `oidc-provider` (pinned), run by
//! tests/oidc/idp.mjs on 127.0.0.1 with one confidential client and the given users, and the
//! script's admin routes (the client's redirect URI, key rotation, a tampered next ID token).

use std::{collections::BTreeMap, path::PathBuf, process::Command, time::Duration};

use anyhow::{Context as _, ensure};
use serde::Serialize;

use crate::{Proc, node22, npm_packages, target_dir};

/// The OpenID provider, pinned; tests/prepare.sh installs it under `<target>/oidc-provider`.
pub const OIDC_PROVIDER_PACKAGE: &str = "oidc-provider@9.13.3";

/// The test client's id at the provider.
pub const IDP_CLIENT_ID: &str = "pforte-gateway";
/// The test client's secret (the gateway reads it from a file).
pub const IDP_CLIENT_SECRET: &str = "idp-client-secret-for-tests-0123456789";

/// A user of the test provider: its claims (in the ID token or UserInfo, by [`IdpProfile`]).
#[derive(Debug, Clone, Serialize)]
pub struct IdpUser {
    pub email: String,
    /// Absent: the provider never says (as Entra ID).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email_verified: Option<bool>,
    pub groups: Vec<String>,
    /// More claims (`preferred_username`, `upn`).
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

impl IdpUser {
    pub fn new(email: &str, verified: bool, groups: &[&str]) -> Self {
        Self {
            email: email.to_owned(),
            email_verified: Some(verified),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            extra: BTreeMap::new(),
        }
    }

    /// Without `email_verified` (Entra-like).
    pub fn never_verified(mut self) -> Self {
        self.email_verified = None;
        self
    }

    /// With one more claim.
    pub fn claim(mut self, name: &str, value: &str) -> Self {
        self.extra.insert(name.to_owned(), value.into());
        self
    }
}

/// Where the provider puts the claims of the `email`, `profile` and `groups` scopes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdpProfile {
    /// All in the ID token (`conformIdTokenClaims: false`).
    #[default]
    IdToken,
    /// Only in UserInfo: oidc-provider's default (`conformIdTokenClaims: true`), OIDC Core §5.4.
    UserInfo,
    /// Email in the ID token, groups only in UserInfo.
    GroupsFromUserInfo,
}

#[derive(Serialize)]
struct IdpConfig<'a> {
    client_id: &'a str,
    client_secret: &'a str,
    accounts: &'a BTreeMap<String, IdpUser>,
    profile: IdpProfile,
}

/// What [`TestIdp::tamper`] does to the next ID token.
#[derive(Debug, Clone, Copy)]
pub enum Tamper {
    Audience,
    Expired,
    Nonce,
    Issuer,
    Signature,
}

impl Tamper {
    fn kind(self) -> &'static str {
        match self {
            Tamper::Audience => "aud",
            Tamper::Expired => "exp",
            Tamper::Nonce => "nonce",
            Tamper::Issuer => "iss",
            Tamper::Signature => "sig",
        }
    }
}

/// The running provider.
#[derive(Debug)]
pub struct TestIdp {
    pub proc: Proc,
    pub issuer: String,
    http: reqwest::Client,
}

/// The node script.
fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("oidc/idp.mjs")
}

impl TestIdp {
    /// Starts the provider with `users` (by id); Err says what is missing (Node 22, the npm
    /// package) so the caller can skip.
    pub fn start(users: &BTreeMap<String, IdpUser>) -> Result<Self, String> {
        Self::start_with(users, IdpProfile::IdToken)
    }

    /// Starts the provider with `users`, their claims placed as `profile` says.
    pub fn start_with(
        users: &BTreeMap<String, IdpUser>,
        profile: IdpProfile,
    ) -> Result<Self, String> {
        let node = node22()?;
        let prefix = target_dir().join("oidc-provider");
        npm_packages(&prefix, &[OIDC_PROVIDER_PACKAGE])?;
        let config = serde_json::to_string(&IdpConfig {
            client_id: IDP_CLIENT_ID,
            client_secret: IDP_CLIENT_SECRET,
            accounts: users,
            profile,
        })
        .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(node);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("IDP_CONFIG", config)
            .arg(script())
            .arg(prefix.join("node_modules"));
        let mut proc = Proc::spawn(cmd).map_err(|e| e.to_string())?;
        let line = proc
            .wait_line("pforte-idp listening on", Duration::from_secs(30))
            .map_err(|e| e.to_string())?;
        let issuer = line.rsplit(' ').next().unwrap_or_default().to_owned();
        Ok(Self {
            proc,
            issuer,
            http: reqwest::Client::new(),
        })
    }

    async fn admin(&self, action: &str, query: &[(&str, &str)]) -> anyhow::Result<()> {
        let mut url = url::Url::parse(&format!("{}/admin/{action}", self.issuer))?;
        url.query_pairs_mut().extend_pairs(query);
        let resp = self
            .http
            .post(url)
            .send()
            .await
            .with_context(|| format!("idp admin {action}"))?;
        ensure!(
            resp.status() == 200,
            "idp admin {action}: {}",
            resp.status()
        );
        Ok(())
    }

    /// Registers `gateway_base` + `/oidc/callback` as the client's redirect URI.
    pub async fn set_gateway(&self, gateway_base: &str) -> anyhow::Result<()> {
        let redirect = format!("{gateway_base}/oidc/callback");
        self.admin("client", &[("redirect_uri", &redirect)]).await
    }

    /// Replaces the signing key by a new one (new `kid`; the old one is gone from the JWKS).
    pub async fn rotate_keys(&self) -> anyhow::Result<()> {
        self.admin("rotate", &[]).await
    }

    /// Changes the groups of user `id` (what their next sign-in's ID token says).
    pub async fn set_groups(&self, id: &str, groups: &[&str]) -> anyhow::Result<()> {
        self.admin("groups", &[("id", id), ("groups", &groups.join(","))])
            .await
    }

    /// The next token answer carries an ID token spoiled as `how`.
    pub async fn tamper(&self, how: Tamper) -> anyhow::Result<()> {
        self.admin("tamper", &[("kind", how.kind())]).await
    }

    /// Stops the provider (the "IdP down" case).
    pub fn stop(&mut self) {
        let _ = self.proc.child.kill();
        let _ = self.proc.child.wait();
    }
}
