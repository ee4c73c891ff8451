//! Sign-in through a real OpenID provider (npm's `oidc-provider`, run by tests/oidc/idp.mjs on
//! 127.0.0.1) at the real gateway over TLS: the login page's "Sign in with Test IdP" button,
//! the provider's sign-in form, the callback, consent, the code exchange and an MCP call with
//! the Pforte token; outsiders refused; ID tokens spoiled by the provider (wrong `aud`, `iss`,
//! `nonce`, expired, bad signature) refused; key rotation; the provider down; roles narrowing
//! what the consent page offers; and no token, code or ID token in the logs or the audit log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use anyhow::{Context as _, bail};
use pforte_tests::{
    Form, IDP_CLIENT_ID, IDP_CLIENT_SECRET, IdpProfile, IdpUser, Login, OAuth, OidcEntry, Role,
    Route, Stack, StackBuilder, Tamper, TestIdp, in_ci,
    oauth::{
        Browser, CLAUDE_CALLBACK, Discovered, Page, Pkce, Registered, authorize_url, discover,
        exchange_code, param, register_like_claude,
    },
    rmcp_client, skip, whoami,
};
use url::Url;

pub(crate) const IDP: &str = "Test IdP";

pub(crate) fn users() -> BTreeMap<String, IdpUser> {
    [
        ("ann", IdpUser::new("ann@example.com", true, &["eng"])),
        ("eve", IdpUser::new("eve@other.org", true, &["staff"])),
        ("gus", IdpUser::new("gus@partner.org", true, &["mcp-users"])),
        ("una", IdpUser::new("una@example.com", false, &[])),
        (
            "kim",
            IdpUser::new("kim@partner.org", true, &["mcp-users", "eng"]),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The provider, or `None` (skipped) when Node 22 or the npm package is missing outside CI.
fn start_idp(users: &BTreeMap<String, IdpUser>, profile: IdpProfile) -> Option<TestIdp> {
    match TestIdp::start_with(users, profile) {
        Ok(idp) => Some(idp),
        Err(e) if in_ci() => panic!("{e}"),
        Err(e) => {
            skip(&e);
            None
        }
    }
}

/// A gateway whose login page offers the provider, with its log in a file.
pub(crate) struct World {
    pub(crate) idp: TestIdp,
    pub(crate) gw: Stack,
    pub(crate) browser: Browser,
    pub(crate) d: Discovered,
    files: tempfile::TempDir,
}

impl World {
    async fn start(tune: impl FnOnce(StackBuilder, OAuth) -> StackBuilder) -> Option<Self> {
        Self::start_with(
            &users(),
            IdpProfile::IdToken,
            |_| {},
            |b, _, oauth| tune(b, oauth),
        )
        .await
    }

    /// The provider with `users` and their claims placed as `profile` says; `entry` adjusts
    /// the gateway's `[[oauth.login.oidc]]` entry, `tune` the gateway (it gets the provider's
    /// issuer too).
    pub(crate) async fn start_with(
        users: &BTreeMap<String, IdpUser>,
        profile: IdpProfile,
        entry: impl FnOnce(&mut OidcEntry),
        tune: impl FnOnce(StackBuilder, &str, OAuth) -> StackBuilder,
    ) -> Option<Self> {
        let idp = start_idp(users, profile)?;
        let files = tempfile::tempdir().unwrap();
        let secret = files.path().join("idp-secret");
        // Owner-only, as every secret file must be.
        pforte_tests::write_secret(&secret, IDP_CLIENT_SECRET).unwrap();
        let log = files.path().join("gateway.log");
        let mut provider = OidcEntry {
            name: IDP.into(),
            issuer: idp.issuer.clone(),
            client_id: IDP_CLIENT_ID.into(),
            client_secret_file: Some(secret),
            scopes: ["openid", "email", "groups"].map(String::from).to_vec(),
            allowed_domains: vec!["example.com".into()],
            allowed_groups: vec!["mcp-users".into()],
            ..OidcEntry::default()
        };
        entry(&mut provider);
        let oauth = OAuth::default().login(Login {
            local_passwords: None,
            oidc: vec![provider],
        });
        let wrapper = format!("exec \"$@\" 2>>'{}'", log.display());
        let builder = Stack::builder().wrapper(&["sh", "-c", &wrapper, "sh"]);
        let gw = tune(builder, &idp.issuer, oauth).start().await;
        idp.set_gateway(&gw.base).await.unwrap();
        let browser = Browser::for_gateway(&gw);
        let d = discover(&browser.http, &gw.mcp_url()).await.unwrap();
        Some(Self {
            idp,
            gw,
            browser,
            d,
            files,
        })
    }

    fn log_path(&self) -> PathBuf {
        self.files.path().join("gateway.log")
    }

    /// A fresh browser (no cookies) for another person.
    pub(crate) fn new_browser(&mut self) {
        self.browser = Browser::for_gateway(&self.gw);
    }

    /// An authorization request like Claude.ai's for `resource` (default: `/mcp`) and `scope`.
    pub(crate) async fn authorize(
        &self,
        scope: &str,
        resource: Option<&str>,
    ) -> (Registered, Pkce, Url) {
        let client = register_like_claude(&self.browser.http, &self.d)
            .await
            .unwrap();
        let pkce = Pkce::new(&client.client_id);
        let resource = resource.unwrap_or(&self.d.resource).to_owned();
        let url = authorize_url(
            &self.d,
            &client.client_id,
            CLAUDE_CALLBACK,
            &pkce,
            "client-state",
            &[("resource", &resource), ("scope", scope)],
        )
        .unwrap();
        (client, pkce, url)
    }

    /// From the authorization URL through "Sign in with Test IdP" and the provider's form (as
    /// `login`) back to the gateway: the page it ends on (consent, or a refusal).
    pub(crate) async fn sign_in(&self, auth: &Url, login: &str) -> anyhow::Result<Page> {
        let (at_idp, _) = self.to_provider(auth, login).await?;
        follow(&self.browser, at_idp).await
    }

    /// Up to the provider's redirect back to the gateway (not followed): that response and the
    /// callback URL.
    async fn to_provider(&self, auth: &Url, login: &str) -> anyhow::Result<(Page, Url)> {
        let page = self.browser.get(auth).await?;
        let button = Form::parse_all(&page.url, &page.body)?
            .into_iter()
            .find(|f| f.buttons.iter().any(|(n, _)| n == "provider"))
            .with_context(|| format!("no provider button on {}", page.body))?;
        let sent = self.browser.submit(&button, Some(IDP)).await?;
        let form_page = follow(&self.browser, sent).await?;
        let mut form = form_page
            .form()
            .with_context(|| format!("provider page: {} {}", form_page.status, form_page.body))?;
        form.set("login", login)?;
        let mut page = self.browser.submit(&form, None).await?;
        // Through the provider's own redirects until it sends the browser to the gateway.
        for _ in 0..10 {
            let next = location(&page)?;
            if next.as_str().starts_with(&self.gw.base) {
                return Ok((page, next));
            }
            page = self.browser.get(&next).await?;
        }
        bail!("the provider never sent the browser back")
    }

    /// Approves the consent page and redeems the code: the access token.
    pub(crate) async fn approve(
        &self,
        consent: &Page,
        client: &Registered,
        pkce: &Pkce,
    ) -> anyhow::Result<String> {
        let form = consent.form()?;
        let done = self.browser.submit(&form, Some("approve")).await?;
        let cb = done.see_other()?;
        let code = param(&cb, "code").context("code")?;
        exchange_code(
            &self.browser.http,
            &self.d,
            client,
            &code,
            CLAUDE_CALLBACK,
            &pkce.verifier,
            &self.d.resource,
        )
        .await?
        .access()
    }

    pub(crate) fn audit(&self) -> Vec<serde_json::Value> {
        let text =
            std::fs::read_to_string(self.gw.data_dir().join("audit.jsonl")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|v: &serde_json::Value| v["event"].is_string())
            .collect()
    }

    /// Waits (≤ 5 s) for the audit writer to record `n` account events.
    pub(crate) async fn audit_events(&self, n: usize) -> Vec<serde_json::Value> {
        pforte_tests::eventually(Duration::from_secs(5), || async { self.audit().len() >= n })
            .await;
        self.audit()
    }
}

/// The `Location` of a redirect, resolved against the page.
fn location(page: &Page) -> anyhow::Result<Url> {
    anyhow::ensure!(
        page.status.is_redirection(),
        "expected a redirect, got {} {}",
        page.status,
        page.body
    );
    let loc = page.header("location").context("Location")?;
    Ok(page.url.join(loc)?)
}

/// Follows redirects (GET) until a page that is not one.
async fn follow(browser: &Browser, mut page: Page) -> anyhow::Result<Page> {
    for _ in 0..10 {
        if !page.status.is_redirection() {
            return Ok(page);
        }
        let next = location(&page)?;
        page = browser.get(&next).await?;
    }
    bail!("too many redirects")
}

#[tokio::test]
async fn sign_in_with_the_provider_then_an_mcp_call_with_the_pforte_token() {
    let Some(w) = World::start(|b, oauth| b.oauth(oauth)).await else {
        return;
    };
    let (client, pkce, auth) = w.authorize("mcp:read mcp:write", None).await;
    let login = w.browser.get(&auth).await.unwrap();
    assert!(
        login.body.contains("Sign in with Test IdP"),
        "{}",
        login.body
    );
    assert!(
        login.body.contains("type=\"password\""),
        "passwords stay beside it"
    );
    let csp = login.header("content-security-policy").unwrap();
    assert!(
        csp.contains(&w.idp.issuer),
        "the button's redirect is allowed: {csp}"
    );

    let consent = w.sign_in(&auth, "ann").await.unwrap();
    assert_eq!(consent.status, 200, "{}", consent.body);
    assert!(consent.body.contains("ann@example.com"), "{}", consent.body);
    let token = w.approve(&consent, &client, &pkce).await.unwrap();

    let mcp = rmcp_client(&w.gw.mcp_url(), w.gw.http(), &token, &[])
        .await
        .unwrap();
    let me = whoami(&mcp).await;
    assert_eq!(me["subject"], "ann@example.com", "known by her email: {me}");
    drop(mcp);

    // The second sign-in finds the same user.
    let (_, _, again) = w.authorize("mcp:read", None).await;
    let second = w.browser.get(&again).await.unwrap();
    assert_eq!(second.status, 200, "still signed in: {}", second.body);
    let users = w.gw.admin_cmd(&["user", "list"], "").unwrap();
    assert!(users.contains("oidc Test IdP"), "{users}");
    assert_eq!(users.matches("ann@example.com").count(), 1, "{users}");
    assert!(!users.contains('#'), "no ISSUER#SUBJECT name: {users}");

    let audit = w.audit_events(2).await;
    let sign_in = audit
        .iter()
        .find(|e| e["event"] == "sign_in")
        .expect("a sign-in line");
    assert_eq!(sign_in["via"], IDP);
    assert_eq!(sign_in["user"], "ann@example.com");
    assert_eq!(sign_in["outcome"], "success");
    assert_eq!(sign_in["client_ip"], "127.0.0.1");
    let consented = audit
        .iter()
        .find(|e| e["event"] == "consent")
        .expect("a consent line");
    assert_eq!(consented["outcome"], "approved");
    assert_eq!(consented["client_id"], client.client_id.as_str());
    println!("figures: sign-ins 1 (success), consents 1");
}

#[tokio::test]
async fn outsiders_are_refused_with_a_page_that_says_why() {
    let Some(mut w) = World::start(|b, oauth| b.oauth(oauth)).await else {
        return;
    };
    let mut refused = 0;
    for (login, why) in [
        ("eve", "eve@other.org may not sign in here"),
        ("una", "not verified"),
    ] {
        w.new_browser();
        let (_, _, auth) = w.authorize("mcp:read", None).await;
        let page = w.sign_in(&auth, login).await.unwrap();
        assert_eq!(page.status, 403, "{login}: {}", page.body);
        assert!(
            page.body.contains("Not allowed to sign in"),
            "{}",
            page.body
        );
        assert!(page.body.contains(why), "{login}: {}", page.body);
        assert!(page.body.contains("Test IdP"), "{}", page.body);
        refused += 1;
    }
    // A member of an allowed group from another domain is let in.
    w.new_browser();
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    let page = w.sign_in(&auth, "gus").await.unwrap();
    assert_eq!(page.status, 200, "{}", page.body);
    let users = w.gw.admin_cmd(&["user", "list"], "").unwrap();
    assert!(
        !users.contains("eve@other.org"),
        "no user for a refused sign-in: {users}"
    );

    let audit = w.audit_events(3).await;
    let refusals: Vec<_> = audit.iter().filter(|e| e["outcome"] == "refused").collect();
    assert_eq!(refusals.len(), refused, "{audit:?}");
    assert!(
        refusals
            .iter()
            .all(|e| e["reason"].as_str().unwrap().starts_with("not_allowed"))
    );
    println!("figures: sign-ins 3, refused {refused} (wrong domain and group; unverified email)");
}

#[tokio::test]
async fn spoiled_id_tokens_are_refused() {
    let Some(mut w) = World::start(|b, oauth| b.oauth(oauth)).await else {
        return;
    };
    let cases = [
        Tamper::Audience,
        Tamper::Expired,
        Tamper::Nonce,
        Tamper::Issuer,
        Tamper::Signature,
    ];
    for how in cases {
        w.new_browser();
        w.idp.tamper(how).await.unwrap();
        let (_, _, auth) = w.authorize("mcp:read", None).await;
        let page = w.sign_in(&auth, "ann").await.unwrap();
        assert_eq!(page.status, 502, "{how:?}: {}", page.body);
        assert!(
            page.body.contains("Sign-in with Test IdP failed"),
            "{}",
            page.body
        );
        assert!(
            page.body.contains("could not be verified"),
            "{how:?}: {}",
            page.body
        );
    }
    let users = w.gw.admin_cmd(&["user", "list"], "").unwrap();
    assert!(
        !users.contains("ann@example.com"),
        "no user from a refused token: {users}"
    );
    let audit = w.audit_events(cases.len()).await;
    let reasons: Vec<&str> = audit.iter().filter_map(|e| e["reason"].as_str()).collect();
    assert_eq!(reasons.len(), cases.len(), "{audit:?}");
    assert!(
        reasons.iter().all(|r| r.starts_with("id_token_invalid")),
        "{reasons:?}"
    );
    // Untouched, the same user signs in.
    w.new_browser();
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    assert_eq!(w.sign_in(&auth, "ann").await.unwrap().status, 200);
    println!(
        "figures: spoiled ID tokens refused {} of {}: {reasons:#?}",
        reasons.len(),
        cases.len()
    );
}

#[tokio::test]
async fn after_the_provider_rotates_its_keys_the_next_sign_in_works() {
    let Some(mut w) = World::start(|b, oauth| b.oauth(oauth)).await else {
        return;
    };
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    assert_eq!(w.sign_in(&auth, "ann").await.unwrap().status, 200);
    w.idp.rotate_keys().await.unwrap();
    w.new_browser();
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    let page = w.sign_in(&auth, "ann").await.unwrap();
    assert_eq!(page.status, 200, "signed with the new key: {}", page.body);
    let refetched = pforte_tests::eventually(Duration::from_secs(5), || async {
        std::fs::read_to_string(w.log_path())
            .unwrap_or_default()
            .contains("fetching the provider's keys again")
    })
    .await;
    assert!(refetched, "the keys were fetched again after the rotation");
}

#[tokio::test]
async fn the_provider_down_gives_a_page_naming_it() {
    let Some(mut w) = World::start(|b, oauth| b.oauth(oauth)).await else {
        return;
    };
    // Down before anything was discovered: the button answers with the page.
    w.idp.stop();
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    let login = w.browser.get(&auth).await.unwrap();
    let button = Form::parse_all(&login.url, &login.body)
        .unwrap()
        .into_iter()
        .find(|f| f.buttons.iter().any(|(n, _)| n == "provider"))
        .unwrap();
    let page = w.browser.submit(&button, Some(IDP)).await.unwrap();
    assert_eq!(page.status, 502, "{}", page.body);
    assert!(
        page.body.contains("Test IdP could not be reached"),
        "{}",
        page.body
    );
    assert!(page.body.contains("sign in another way"), "{}", page.body);
    // The password form is still there for local users.
    let again = w.browser.get(&auth).await.unwrap();
    assert_eq!(again.status, 200);
}

#[tokio::test]
async fn the_provider_down_at_the_callback_gives_a_page_naming_it() {
    let Some(mut w) = World::start(|b, oauth| b.oauth(oauth)).await else {
        return;
    };
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    let (_, callback) = w.to_provider(&auth, "ann").await.unwrap();
    // Another browser (an attacker handed the callback URL) cannot finish it: login CSRF.
    let stranger = Browser::for_gateway(&w.gw).get(&callback).await.unwrap();
    assert_eq!(stranger.status, 403, "{}", stranger.body);
    assert!(
        stranger.body.contains("started in another browser"),
        "{}",
        stranger.body
    );
    w.idp.stop();
    let page = follow(&w.browser, w.browser.get(&callback).await.unwrap())
        .await
        .unwrap();
    assert_eq!(page.status, 502, "{}", page.body);
    assert!(
        page.body.contains("Test IdP could not be reached"),
        "{}",
        page.body
    );
    // The callback is single use.
    let replay = w.browser.get(&callback).await.unwrap();
    assert_eq!(replay.status, 400, "{}", replay.body);
    assert!(replay.body.contains("expired or was already used"));
}

#[tokio::test]
async fn roles_narrow_what_the_consent_page_offers_and_routes_require_them() {
    let notes_service = pforte_tests::McpService::start(&[]).unwrap();
    let notes_upstream = notes_service.url();
    let Some(mut w) = World::start(move |b, oauth| {
        let notes = Route {
            roles: vec!["writers".into()],
            ..Route::url("notes", &notes_upstream)
        };
        b.oauth(
            oauth
                .role(
                    "writers",
                    Role {
                        groups: vec!["eng".into()],
                        scopes: Some(vec!["mcp:read".into(), "mcp:write".into()]),
                        ..Role::default()
                    },
                )
                .role(
                    "readers",
                    Role {
                        users: vec!["*".into()],
                        scopes: Some(vec!["mcp:read".into()]),
                        ..Role::default()
                    },
                ),
        )
        .route(notes)
    })
    .await
    else {
        return;
    };
    // gus (group mcp-users) holds only "readers": the consent page offers mcp:read.
    let (client, pkce, auth) = w.authorize("mcp:read mcp:write", None).await;
    let consent = w.sign_in(&auth, "gus").await.unwrap();
    assert_eq!(consent.status, 200, "{}", consent.body);
    assert!(consent.body.contains("mcp:read"), "{}", consent.body);
    assert!(!consent.body.contains("mcp:write"), "{}", consent.body);
    let token = w.approve(&consent, &client, &pkce).await.unwrap();
    assert_eq!(
        pforte_tests::oauth::mcp_status(&w.gw.http(), &w.gw.mcp_url(), &token).await,
        200
    );
    // … and may not use the route that requires "writers".
    let notes = w.gw.route_url("notes");
    let (_, _, auth) = w.authorize("mcp:read", Some(&notes)).await;
    let page = w.browser.get(&auth).await.unwrap();
    assert_eq!(page.status, 403, "{}", page.body);
    assert!(page.body.contains("may not use notes"), "{}", page.body);
    // ann (group eng) holds "writers": both scopes, and the route.
    w.new_browser();
    let (_, _, auth) = w.authorize("mcp:read mcp:write", Some(&notes)).await;
    let consent = w.sign_in(&auth, "ann").await.unwrap();
    assert_eq!(consent.status, 200, "{}", consent.body);
    assert!(consent.body.contains("mcp:write"), "{}", consent.body);
    let audit = w.audit_events(3).await;
    assert!(
        audit
            .iter()
            .any(|e| e["event"] == "consent" && e["reason"] == "route_not_allowed"),
        "{audit:?}"
    );
    drop(w);
    drop(notes_service);
}

#[tokio::test]
async fn no_token_code_or_id_token_in_the_logs_or_the_audit_log() {
    let Some(w) = World::start(|b, oauth| b.oauth(oauth)).await else {
        return;
    };
    let (client, pkce, auth) = w.authorize("mcp:read", None).await;
    let (at_idp, callback) = w.to_provider(&auth, "ann").await.unwrap();
    let consent = follow(&w.browser, w.browser.get(&callback).await.unwrap())
        .await
        .unwrap();
    drop(at_idp);
    let form = consent.form().unwrap();
    let done = w.browser.submit(&form, Some("approve")).await.unwrap();
    let cb = done.see_other().unwrap();
    let code = param(&cb, "code").unwrap();
    let answer = exchange_code(
        &w.browser.http,
        &w.d,
        &client,
        &code,
        CLAUDE_CALLBACK,
        &pkce.verifier,
        &w.d.resource,
    )
    .await
    .unwrap();
    let access = answer.access().unwrap();
    let refresh = answer.refresh().unwrap();
    assert_eq!(
        pforte_tests::oauth::mcp_status(&w.gw.http(), &w.gw.mcp_url(), &access).await,
        200
    );
    w.audit_events(2).await;
    // Stop the gateway so its log is complete.
    let mut w = w;
    let _ =
        w.gw.gw
            .proc
            .signal_and_wait(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(10));
    let idp_code = param(&callback, "code").unwrap();
    let state = param(&callback, "state").unwrap();
    let log = std::fs::read_to_string(w.log_path()).unwrap();
    let audit = std::fs::read_to_string(w.gw.data_dir().join("audit.jsonl")).unwrap();
    assert!(
        log.contains("oidc sign-in"),
        "the log is the gateway's: {log}"
    );
    for (what, secret) in [
        ("access token", access.as_str()),
        ("refresh token", refresh.as_str()),
        ("Pforte code", code.as_str()),
        ("provider code", idp_code.as_str()),
        ("state", state.as_str()),
        ("client secret", IDP_CLIENT_SECRET),
        ("PKCE verifier", pkce.verifier.as_str()),
    ] {
        assert!(!log.contains(secret), "{what} in the log");
        assert!(!audit.contains(secret), "{what} in the audit log");
    }
    // An ID token (or any JWT) starts with a base64url JSON header: `eyJ`.
    assert!(!log.contains("eyJ"), "a JWT in the log: {log}");
    assert!(!audit.contains("eyJ"), "a JWT in the audit log: {audit}");
}

/// Headless Chromium (tests/browser/render.py) clicks "Sign in with Test IdP", signs in at the
/// provider, approves, and reaches the client's redirect URI with a code: the login page's CSP
/// lets the button's redirect to the provider through, nothing logs an error. Screenshots in
/// `<target>/screenshots/`: `idp-login.png` (the login page with the provider's button beside
/// the password form), `idp-idp.png` (the provider's page), `idp-consent.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_signs_in_with_the_provider_button() {
    let Some(chromium) = crate::oauth_browser::chromium() else {
        assert!(!in_ci(), "chromium is missing under CI=true");
        skip("chromium is not installed (apt-get install -y chromium)");
        return;
    };
    let Some(w) = World::start(|b, oauth| b.oauth(oauth)).await else {
        return;
    };
    let (_, _, auth) = w.authorize("mcp:read mcp:write", None).await;
    let shots = pforte_tests::target_dir().join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let stderr_path = w.files.path().join("render-stderr.log");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("browser/render.py");
    let mut child = std::process::Command::new("python3")
        .arg(&script)
        .arg("--chromium")
        .arg(&chromium)
        .args(["--url", auth.as_str(), "--user", "ann", "--idp", IDP])
        .args([
            "--shot-prefix",
            "idp-",
            "--callback-prefix",
            CLAUDE_CALLBACK,
        ])
        .arg("--out-dir")
        .arg(&shots)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let done = pforte_tests::eventually(Duration::from_secs(90), || {
        let finished = child.try_wait().unwrap().is_some();
        async move { finished }
    })
    .await;
    if !done {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(done && out.status.success(), "render.py failed:\n{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let r: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    assert_eq!(
        r["console"],
        serde_json::json!([]),
        "console messages: {r:#}"
    );
    assert_eq!(r["exceptions"], serde_json::json!([]), "exceptions: {r:#}");
    let problems: Vec<_> = r["log"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| matches!(e["level"].as_str(), Some("error" | "warning")))
        .filter(|e| {
            !e["url"]
                .as_str()
                .is_some_and(|u| u.ends_with("/favicon.ico"))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "log errors/warnings (a CSP block?): {problems:#?}"
    );
    let login = r["login"]["text"].as_str().unwrap();
    assert!(
        login.contains("Sign in with Test IdP") && login.contains("Password"),
        "{login}"
    );
    assert!(
        r["idp"]["url"].as_str().unwrap().starts_with(&w.idp.issuer),
        "{r:#}"
    );
    let consent = r["consent"]["text"].as_str().unwrap();
    assert!(consent.contains("ann@example.com"), "{consent}");
    let cb = Url::parse(r["callback"].as_str().unwrap()).unwrap();
    assert!(param(&cb, "code").is_some(), "{cb}");
    for name in ["idp-login.png", "idp-idp.png", "idp-consent.png"] {
        let p = shots.join(name);
        assert!(
            crate::oauth_browser::is_png(&p),
            "{} is not a screenshot",
            p.display()
        );
        eprintln!("screenshot: {}", p.display());
    }
}

#[tokio::test]
async fn a_provider_error_gives_a_page_naming_it() {
    let Some(w) = World::start(|b, oauth| b.oauth(oauth)).await else {
        return;
    };
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    let login = w.browser.get(&auth).await.unwrap();
    let button = Form::parse_all(&login.url, &login.body)
        .unwrap()
        .into_iter()
        .find(|f| f.buttons.iter().any(|(n, _)| n == "provider"))
        .unwrap();
    let sent = w.browser.submit(&button, Some(IDP)).await.unwrap();
    let form_page = follow(&w.browser, sent).await.unwrap();
    // The person cancels at the provider: it answers error=access_denied.
    let abort = Url::parse(&format!("{}/abort", form_page.url)).unwrap();
    let cancelled = w.browser.post_fields(&abort, &[]).await.unwrap();
    let page = follow(&w.browser, cancelled).await.unwrap();
    assert_eq!(page.status, 403, "{}", page.body);
    assert!(
        page.body.contains("Sign-in with Test IdP failed"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("did not allow the sign-in (access_denied)"),
        "{}",
        page.body
    );
    let audit = w.audit_events(1).await;
    assert_eq!(audit[0]["reason"], "idp_error: access_denied", "{audit:?}");
}

#[tokio::test]
async fn sign_in_on_redis_keeps_the_pending_sign_in_there() {
    let Some(redis) = pforte_tests::RedisServer::start() else {
        return;
    };
    let Some(w) = World::start(move |b, oauth| b.redis(redis).oauth(oauth)).await else {
        return;
    };
    let (client, pkce, auth) = w.authorize("mcp:read", None).await;
    let (_, callback) = w.to_provider(&auth, "ann").await.unwrap();
    // Between the button and the callback the pending sign-in is a record in redis, under
    // the hash of its state (the state itself is not there).
    let state = param(&callback, "state").unwrap();
    let dump = w.gw.redis.as_ref().unwrap().dump().unwrap();
    let dump = String::from_utf8_lossy(&dump);
    assert!(
        dump.contains("\"provider\":\"Test IdP\""),
        "the pending sign-in is in redis"
    );
    assert!(!dump.contains(&state), "the state itself is not stored");
    let consent = follow(&w.browser, w.browser.get(&callback).await.unwrap())
        .await
        .unwrap();
    assert_eq!(consent.status, 200, "{}", consent.body);
    let token = w.approve(&consent, &client, &pkce).await.unwrap();
    assert_eq!(
        pforte_tests::oauth::mcp_status(&w.gw.http(), &w.gw.mcp_url(), &token).await,
        200
    );
}

#[tokio::test]
async fn without_local_passwords_only_the_buttons_are_offered() {
    let Some(w) = World::start(|b, mut oauth| {
        if let Some(login) = oauth.login.as_mut() {
            login.local_passwords = Some(false);
        }
        b.oauth(oauth)
    })
    .await
    else {
        return;
    };
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    let page = w.browser.get(&auth).await.unwrap();
    assert!(page.body.contains("Sign in with Test IdP"), "{}", page.body);
    assert!(!page.body.contains("type=\"password\""), "{}", page.body);
    // A password login posted anyway (with a valid CSRF token) is refused.
    let button = Form::parse_all(&page.url, &page.body).unwrap().remove(0);
    let mut fields: Vec<(String, String)> = button
        .fields
        .iter()
        .filter(|(n, _)| n != "step")
        .cloned()
        .collect();
    fields.extend([
        ("step".to_owned(), "login".to_owned()),
        ("username".to_owned(), "alice".to_owned()),
        ("password".to_owned(), "whatever-password".to_owned()),
    ]);
    let refused = w
        .browser
        .post_fields(&button.action, &fields)
        .await
        .unwrap();
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.body.contains("Password sign-in is turned off"),
        "{}",
        refused.body
    );
}

/// Roles follow the provider: kim loses the group that gave `mcp:write`; at her next sign-in
/// (any client) her record says so, and the token she had already granted loses `mcp:write`
/// within `roles_recheck_secs` (1 s here; at most 60 s) — seen by the MCP service.
#[tokio::test]
async fn an_issued_token_follows_a_role_change_at_the_provider() {
    let Some(mut w) = World::start(|b, mut oauth| {
        oauth.roles_recheck_secs = Some(1);
        b.oauth(
            oauth
                .role(
                    "writers",
                    Role {
                        groups: vec!["eng".into()],
                        ..Role::default()
                    },
                )
                .role(
                    "readers",
                    Role {
                        users: vec!["*".into()],
                        scopes: Some(vec!["mcp:read".into()]),
                        ..Role::default()
                    },
                ),
        )
    })
    .await
    else {
        return;
    };
    let (client, pkce, auth) = w.authorize("mcp:read mcp:write", None).await;
    let consent = w.sign_in(&auth, "kim").await.unwrap();
    let token = w.approve(&consent, &client, &pkce).await.unwrap();
    let mcp = rmcp_client(&w.gw.mcp_url(), w.gw.http(), &token, &[])
        .await
        .unwrap();
    let scopes = |me: &serde_json::Value| me["scopes"].to_string();
    let before = whoami(&mcp).await;
    assert!(scopes(&before).contains("mcp:write"), "{before}");

    w.idp.set_groups("kim", &["mcp-users"]).await.unwrap();
    w.new_browser();
    let (_, _, again) = w.authorize("mcp:read", None).await;
    assert_eq!(w.sign_in(&again, "kim").await.unwrap().status, 200);
    let started = std::time::Instant::now();
    let mut after = whoami(&mcp).await;
    while scopes(&after).contains("mcp:write") && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = whoami(&mcp).await;
    }
    assert!(!scopes(&after).contains("mcp:write"), "{after}");
    assert!(scopes(&after).contains("mcp:read"), "{after}");
    println!(
        "figures: the issued token lost mcp:write {} ms after the sign-in that recorded the change",
        started.elapsed().as_millis()
    );
}

/// `/account` for a person of the provider: its sign-in offers the provider's button and
/// returns there; the page names the provider instead of offering a password form; a role
/// with `admin = true` (her group `eng`) makes her an admin.
#[tokio::test]
async fn a_provider_user_signs_in_at_account_and_a_role_makes_her_admin() {
    let Some(w) = World::start(|b, oauth| {
        b.oauth(oauth.role(
            "it",
            Role {
                groups: vec!["eng".into()],
                scopes: Some(vec![]),
                admin: true,
                ..Role::default()
            },
        ))
    })
    .await
    else {
        return;
    };
    let account = Url::parse(&format!("{}/account", w.gw.base)).unwrap();
    let page = w.sign_in(&account, "ann").await.unwrap();
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.url.as_str().ends_with("/account"), "{}", page.url);
    for needle in [
        "Signed in as <strong>ann@example.com</strong> (admin)",
        "You sign in with <strong>Test IdP</strong>",
        "Show all users",
    ] {
        assert!(page.body.contains(needle), "{needle:?} in {}", page.body);
    }
    assert!(!page.body.contains("name=\"new\""), "{}", page.body);
}

/// RFC 9207 (red team L7): a callback whose `iss` names another issuer is refused — a mix-up
/// with another provider — and the same sign-in with the provider's own `iss` goes on.
#[tokio::test]
async fn a_callback_naming_another_issuer_is_refused() {
    let Some(mut w) = World::start(|b, oauth| b.oauth(oauth)).await else {
        return;
    };
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    let (_, callback) = w.to_provider(&auth, "ann").await.unwrap();
    // oidc-provider sends RFC 9207's `iss`: the pending provider's issuer.
    assert_eq!(
        param(&callback, "iss").as_deref(),
        Some(w.idp.issuer.as_str()),
        "{callback}"
    );
    let mut forged = callback.clone();
    let pairs: Vec<(String, String)> = callback
        .query_pairs()
        .map(|(k, v)| {
            let v = if k == "iss" {
                "https://idp.other.example".into()
            } else {
                v.into_owned()
            };
            (k.into_owned(), v)
        })
        .collect();
    forged.query_pairs_mut().clear().extend_pairs(pairs);
    let page = w.browser.get(&forged).await.unwrap();
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(page.body.contains("another provider"), "{}", page.body);
    let refused = w.audit_events(1).await;
    assert!(
        refused
            .iter()
            .any(|e| e["event"] == "sign_in" && e["reason"] == "iss_mismatch"),
        "{refused:?}"
    );
    // The next sign-in, untouched, reaches the consent page (a fresh browser: the provider
    // would otherwise skip its form for the session it already has).
    w.new_browser();
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    let consent = w.sign_in(&auth, "ann").await.unwrap();
    assert_eq!(consent.status, 200, "{}", consent.body);
}
