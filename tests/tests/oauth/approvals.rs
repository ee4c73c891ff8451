//! Approvals (issue 43 point 3): a call a `[[policy]]` rule with `effect = "approve"` matches is
//! held — nothing reaches the upstream (a wire tap counts the call's unique argument) — and the
//! caller gets the link: a tool error with it and SEP-2643's `_meta` for a client without URL
//! elicitation, `-32042` with `data.elicitations` and `data.authorization` for one that
//! declared it (raw clients, the Python SDK, and a session with exactly what the Claude Code
//! CLI declares). An admin, or a user whose role has `approver = true`, approves or rejects it
//! at `/admin/approvals/ID` (CSRF-checked form; audited; nobody approves their own call); a
//! non-approver gets 403. The retry
//! with identical arguments passes once, the next identical call is held again, different
//! arguments are a new approval; rejected or expired → refused with the rule's message; a
//! restart keeps a pending approval. Two
//! gateways on one redis use an approval once. In headless Chromium an admin opens the list and
//! the call and clicks Approve: screenshots `admin-approvals*.png`, `admin-approval*.png`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use pforte_tests::{
    EchoUpstream, McpClient, McpService, OAuth, PolicyRule, Role, Stack, WireTap,
    console::{approval_form, browser_script, chromium, decide_approval, is_png},
    eventually, in_ci,
    oauth::{Browser, Form, Page, access_token},
    python_sdk_or_skip, rpc_answer, run_python_json,
};
use reqwest::{StatusCode, Url};
use serde_json::{Value, json};

const ROOT: &str = "root";
const ROOT_PW: &str = "admin horse battery staple";
const CAROL: &str = "carol";
const CAROL_PW: &str = "carol horse battery staple";
const BOB: &str = "bob";
const BOB_PW: &str = "bob horse battery staple";
/// The `_meta` key of the structured denial on a held call's tool result.
const META: &str = "io.modelcontextprotocol/authorization";
const RULE: &str = "approve-notes";
const MESSAGE: &str = "Calls with a note need a second person.";

/// A gateway whose rule sends every tool call with a `note` argument to a person, in front of
/// a wire tap in front of a small MCP server (`EchoUpstream`: its `echo` takes any arguments);
/// `root` (admin), `carol` (approver role), `bob` (neither).
async fn stack(ttl_secs: Option<u64>) -> (EchoUpstream, WireTap, Stack) {
    let svc = EchoUpstream::start().await.unwrap();
    let tap = WireTap::start(&svc.addr.to_string()).await.unwrap();
    let gw = gateway(&tap, ttl_secs).await;
    (svc, tap, gw)
}

/// [`stack`] with mcp-service behind the tap: MCP sessions (its tools refuse a `note`, but a
/// held call never reaches them).
async fn stack_with_sessions() -> (McpService, WireTap, Stack) {
    let svc = McpService::start(&[]).unwrap();
    let tap = WireTap::start(&svc.addr.to_string()).await.unwrap();
    let gw = gateway(&tap, None).await;
    (svc, tap, gw)
}

fn rule() -> PolicyRule {
    PolicyRule::new(RULE, r#""note" in args"#, "approve").message(MESSAGE)
}

async fn gateway(tap: &WireTap, ttl_secs: Option<u64>) -> Stack {
    let mut b = Stack::builder()
        .upstream(&tap.mcp_url())
        .oauth(
            OAuth::default()
                .role(
                    "everyone",
                    Role {
                        users: vec!["*".into()],
                        ..Role::default()
                    },
                )
                .role(
                    "approvers",
                    Role {
                        users: vec![CAROL.into()],
                        scopes: Some(vec![]),
                        approver: true,
                        ..Role::default()
                    },
                ),
        )
        .policy(rule());
    if let Some(ttl) = ttl_secs {
        b = b.approvals_ttl_secs(ttl);
    }
    let gw = b.start().await;
    gw.admin_cmd(
        &["user", "add", ROOT, "--role", "admin"],
        &format!("{ROOT_PW}\n"),
    )
    .unwrap();
    gw.add_user(CAROL, CAROL_PW).unwrap();
    gw.add_user(BOB, BOB_PW).unwrap();
    gw
}

fn url(gw: &Stack, path: &str) -> Url {
    Url::parse(&format!("{}{path}", gw.base)).unwrap()
}

/// A browser signed in as `user`, through the approvals list's sign-in.
async fn signed_in(gw: &Stack, user: &str, password: &str) -> Browser {
    let b = Browser::for_gateway(gw);
    let first = b.get(&url(gw, "/admin/approvals")).await.unwrap();
    let login = first.see_other().unwrap();
    assert_eq!(login.path(), "/account");
    assert_eq!(login.query(), Some("next=%2Fadmin%2Fapprovals"));
    let page = b.get(&login).await.unwrap();
    let mut form = page.form().unwrap();
    form.set("username", user).unwrap();
    form.set("password", password).unwrap();
    let done = b.submit(&form, None).await.unwrap();
    assert_eq!(done.see_other().unwrap().path(), "/admin/approvals");
    b
}

/// The decision form of approval `id` on its page.
fn decision_form(page: &Page, id: &str) -> Form {
    approval_form(page, id).unwrap()
}

/// `who` decides approval `id` (`approve` or `reject`): the page after the 303.
async fn decide(gw: &Stack, who: &Browser, id: &str, step: &str) -> Page {
    decide_approval(gw, who, id, step).await.unwrap()
}

fn call(id: u64, note: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"note": note}}})
}

/// The approval's id and link of a held call's answer, checking its form: `-32042` with both
/// SEP-2643's authorization and the URL elicitation (`eliciting`), or a tool error naming the
/// rule's message and the link with the authorization in `_meta`.
fn held(answer: &Value, eliciting: bool) -> (String, Url) {
    if eliciting {
        let e = &answer["error"];
        assert_eq!(e["code"], -32042, "{answer}");
        let auth = &e["data"]["authorization"];
        assert_eq!(auth["reason"], "insufficient_authorization", "{answer}");
        assert_eq!(
            auth["remediationHints"],
            json!([{"type": "url"}]),
            "{answer}"
        );
        let id = auth["authorizationContextId"].as_str().unwrap().to_owned();
        let el = &e["data"]["elicitations"][0];
        assert_eq!(el["mode"], "url");
        assert_eq!(el["elicitationId"], id.as_str());
        assert!(el["message"].as_str().unwrap().starts_with(MESSAGE));
        (id, Url::parse(el["url"].as_str().unwrap()).unwrap())
    } else {
        let r = &answer["result"];
        assert_eq!(r["isError"], true, "{answer}");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with(MESSAGE), "{text}");
        let auth = &r["_meta"][META];
        assert_eq!(auth["reason"], "insufficient_authorization", "{answer}");
        assert_eq!(auth["remediation"], "available", "{answer}");
        let link = auth["remediationHints"][0]["url"].as_str().unwrap();
        assert!(text.contains(link), "{text}");
        (
            auth["authorizationContextId"].as_str().unwrap().to_owned(),
            Url::parse(link).unwrap(),
        )
    }
}

fn audit_lines(gw: &Stack) -> Vec<Value> {
    std::fs::read_to_string(gw.data_dir().join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The audit lines of approval `id`, by event.
fn approval_events(gw: &Stack, id: &str) -> Vec<String> {
    audit_lines(gw)
        .into_iter()
        .filter(|l| l["approval"] == id)
        .map(|l| l["event"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn events_eventually(gw: &Stack, id: &str, want: &[&str]) {
    let ok = eventually(Duration::from_secs(5), || async {
        let have = approval_events(gw, id);
        want.iter().all(|w| have.iter().any(|h| h == w))
    })
    .await;
    assert!(ok, "{want:?} for {id}: {:?}", approval_events(gw, id));
}

async fn session(gw: &Stack, token: &str, caps: Value) -> McpClient {
    session_on(gw, token, caps, "2025-11-25").await
}

async fn session_on(gw: &Stack, token: &str, caps: Value, version: &str) -> McpClient {
    let mut c = gw.mcp(token).protocol(version).capabilities(caps);
    c.open().await.unwrap();
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_approves_a_held_call_and_its_retry_passes_once() {
    let (_svc, tap, mut gw) = stack(None).await;
    let token = gw.create_token("ci").await.unwrap();
    let client = session(&gw, &token, json!({})).await;
    let note = "delete-the-draft-7f3a";

    // Held: a tool error with the link; nothing of it reaches the upstream.
    let first = rpc_answer(client.post(&call(2, note)).await).await;
    let (id, link) = held(&first, false);
    assert_eq!(link.path(), format!("/admin/approvals/{id}"));
    assert_eq!(tap.count(note), 0, "a held call reached the upstream");
    // Asked again before a decision: the same approval, still nothing upstream.
    let again = rpc_answer(client.post(&call(3, note)).await).await;
    assert_eq!(held(&again, false).0, id);
    assert_eq!(tap.count(note), 0);
    // A restart keeps it (pforte.db), and the session too.
    gw.restart().await.unwrap();

    // The approver sees who, which client, route, tool, the arguments, rule and message.
    let root = signed_in(&gw, ROOT, ROOT_PW).await;
    let list = root.get(&url(&gw, "/admin/approvals")).await.unwrap();
    assert!(
        list.body.contains(&id) && list.body.contains("pending"),
        "{}",
        list.body
    );
    let page = root.get(&link).await.unwrap();
    for needle in [
        "token ci",
        "static:ci",
        "echo",
        RULE,
        MESSAGE,
        note,
        "Approve",
        "Reject",
    ] {
        assert!(
            page.body.contains(needle),
            "{needle:?} missing:\n{}",
            page.body
        );
    }
    // Without the CSRF token the form changes nothing.
    let forged = root
        .submit(&decision_form(&page, &id).without("csrf"), Some("approve"))
        .await
        .unwrap();
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let after = decide(&gw, &root, &id, "approve").await;
    assert!(after.body.contains("Approved."), "{}", after.body);
    // Decided once: a second decision is too late.
    let twice = root
        .submit(&decision_form(&page, &id), Some("reject"))
        .await
        .unwrap();
    assert!(
        twice
            .see_other()
            .unwrap()
            .as_str()
            .contains("done=too-late")
    );

    // The retry (another request id, the same arguments) passes, once.
    let retry = rpc_answer(client.post(&call(4, note)).await).await;
    assert!(retry["result"]["isError"] != true, "{retry}");
    assert!(
        retry["result"]["structuredContent"].is_object() || retry["result"]["content"].is_array(),
        "{retry}"
    );
    assert_eq!(
        tap.count(note),
        1,
        "the upstream saw the approved call once"
    );
    // The next identical call is held again, as a new approval.
    let next = rpc_answer(client.post(&call(5, note)).await).await;
    let (second, _) = held(&next, false);
    assert_ne!(second, id);
    // Different arguments: a new approval too.
    let other = rpc_answer(client.post(&call(6, "something-else")).await).await;
    let (third, _) = held(&other, false);
    assert!(third != id && third != second);
    assert_eq!(tap.count(note), 1);
    assert_eq!(tap.count("something-else"), 0);

    events_eventually(
        &gw,
        &id,
        &["approval_requested", "approval_approved", "approval_used"],
    )
    .await;
    let lines = audit_lines(&gw);
    let approved = lines
        .iter()
        .find(|l| l["event"] == "approval_approved" && l["approval"] == id.as_str())
        .unwrap();
    assert_eq!(approved["by"], ROOT);
    assert_eq!(approved["rule"], RULE);
    assert_eq!(approved["sha256"].as_str().unwrap().len(), 64);
    // No line of the audit log carries the arguments.
    let text = std::fs::read_to_string(gw.data_dir().join("audit.jsonl")).unwrap();
    assert!(!text.contains(note), "the arguments reached the audit log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_role_decides_a_non_approver_gets_403_and_a_rejected_call_is_refused() {
    let (_svc, tap, gw) = stack(None).await;
    let token = gw.create_token("ci").await.unwrap();
    let client = session(&gw, &token, json!({})).await;
    let (id, link) = held(
        &rpc_answer(client.post(&call(2, "reject-me")).await).await,
        false,
    );

    let bob = signed_in(&gw, BOB, BOB_PW).await;
    for path in ["/admin/approvals".to_owned(), link.path().to_owned()] {
        let page = bob.get(&url(&gw, &path)).await.unwrap();
        assert_eq!(page.status, StatusCode::FORBIDDEN, "{path}");
        assert!(page.body.contains("Approvers only"), "{}", page.body);
    }
    // The caller's own link is no way in either: a POST by a non-approver changes nothing.
    let carol = signed_in(&gw, CAROL, CAROL_PW).await;
    let page = carol.get(&link).await.unwrap();
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let refused = bob
        .submit(&decision_form(&page, &id), Some("approve"))
        .await
        .unwrap();
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    // Carol approves without being an admin: the rest of the console stays closed to her.
    let admin_only = carol.get(&url(&gw, "/admin/tokens")).await.unwrap();
    assert_eq!(admin_only.status, StatusCode::FORBIDDEN);
    let after = decide(&gw, &carol, &id, "reject").await;
    assert!(after.body.contains("Rejected."), "{}", after.body);

    let resp = client.post(&call(3, "reject-me")).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["reason"], "approval_rejected", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains(MESSAGE),
        "{body}"
    );
    assert_eq!(tap.count("reject-me"), 0);
    // Refused once: the next identical call asks again.
    let (again, _) = held(
        &rpc_answer(client.post(&call(4, "reject-me")).await).await,
        false,
    );
    assert_ne!(again, id);
    events_eventually(&gw, &id, &["approval_requested", "approval_rejected"]).await;
    let rejected = audit_lines(&gw)
        .into_iter()
        .find(|l| l["event"] == "approval_rejected")
        .unwrap();
    assert_eq!(rejected["by"], CAROL);

    // An approver's approval works like an admin's.
    let (mine, _) = held(
        &rpc_answer(client.post(&call(5, "carol-approves")).await).await,
        false,
    );
    decide(&gw, &carol, &mine, "approve").await;
    let passed = rpc_answer(client.post(&call(6, "carol-approves")).await).await;
    assert!(passed["result"]["isError"] != true, "{passed}");
    assert_eq!(tap.count("carol-approves"), 1);

    // An admin's own call (OAuth, the real flow) takes another approver.
    let root_token = access_token(&gw, ROOT, ROOT_PW, "mcp:read mcp:write")
        .await
        .unwrap();
    let root_client = session(&gw, &root_token, json!({})).await;
    let (own, _) = held(
        &rpc_answer(root_client.post(&call(2, "roots-own")).await).await,
        false,
    );
    let root = signed_in(&gw, ROOT, ROOT_PW).await;
    let refused = decide(&gw, &root, &own, "approve").await;
    assert!(refused.body.contains("your own call"), "{}", refused.body);
    decide(&gw, &carol, &own, "approve").await;
    let passed = rpc_answer(root_client.post(&call(3, "roots-own")).await).await;
    assert!(passed["result"]["isError"] != true, "{passed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecided_approval_expires_and_its_retry_is_refused() {
    let (_svc, tap, gw) = stack(Some(1)).await;
    let token = gw.create_token("ci").await.unwrap();
    let client = session(&gw, &token, json!({})).await;
    let (id, _) = held(
        &rpc_answer(client.post(&call(2, "too-slow")).await).await,
        false,
    );
    // Retried until the approval's second has passed (held again meanwhile, then refused).
    let started = Instant::now();
    let mut refused = None;
    for n in 3..200 {
        let resp = client.post(&call(n, "too-slow")).await;
        if resp.status() == StatusCode::FORBIDDEN {
            refused = Some(resp.json::<Value>().await.unwrap());
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let body = refused.expect("refused once expired");
    assert_eq!(body["reason"], "approval_expired", "{body}");
    assert_eq!(tap.count("too-slow"), 0);
    events_eventually(&gw, &id, &["approval_requested", "approval_expired"]).await;
    // Too late to decide, too.
    let root = signed_in(&gw, ROOT, ROOT_PW).await;
    let page = root
        .get(&url(&gw, &format!("/admin/approvals/{id}")))
        .await
        .unwrap();
    assert!(!page.body.contains("value=\"approve\""), "{}", page.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_get_the_link_in_the_form_they_declared() {
    let (_svc, _tap, gw) = stack_with_sessions().await;
    let token = gw.create_token("ci").await.unwrap();
    // Raw clients: URL elicitation declared on initialize, or not.
    let eliciting = session(&gw, &token, json!({"elicitation": {"url": {}}})).await;
    held(
        &rpc_answer(eliciting.post(&call(2, "raw-url")).await).await,
        true,
    );
    let plain = session(&gw, &token, json!({"elicitation": {"form": {}}})).await;
    held(
        &rpc_answer(plain.post(&call(2, "raw-plain")).await).await,
        false,
    );
    // A 2026-07-28 request without a session: its own capabilities say.
    let stateless = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": "echo", "arguments": {"note": "stateless"},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "approvals", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}},
    }}});
    let resp = gw
        .mcp(&token)
        .protocol("2026-07-28")
        .post_request()
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "echo")
        .json(&stateless)
        .send()
        .await
        .unwrap();
    held(&rpc_answer(resp).await, true);

    // The official Python SDK, with and without an elicitation callback.
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, gw.ca_pem().unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/approval_client.py");
    let mcp_url = gw.mcp_url();
    for (elicit, note) in [(true, "sdk-url"), (false, "sdk-plain")] {
        let args = json!({"note": note}).to_string();
        let mut argv = vec![
            mcp_url.as_str(),
            token.as_str(),
            ca.to_str().unwrap(),
            "echo",
            args.as_str(),
        ];
        if elicit {
            argv.push("--elicit");
        }
        let r = run_python_json(&python, &script, &argv, "", Duration::from_secs(60))
            .await
            .unwrap();
        if elicit {
            assert!(r["capabilities"]["elicitation"]["url"].is_object(), "{r}");
            let e = &r["error"];
            assert_eq!(e["code"], -32042, "{r}");
            let answer = json!({"error": e});
            held(&answer, true);
        } else {
            assert!(r["capabilities"]["elicitation"].is_null(), "{r}");
            let res = &r["result"];
            assert_eq!(res["is_error"], true, "{r}");
            let answer = json!({"result": {"isError": true,
                "content": [{"type": "text", "text": res["text"]}], "_meta": res["meta"]}});
            held(&answer, false);
        }
    }
}

/// What the Claude Code CLI declares on initialize: `claude mcp list` (its health check)
/// initializes through the gateway, and the wire tap behind it keeps the request.
fn claude_capabilities(tap: &WireTap) -> Option<(Value, String)> {
    let sent = tap.sent_text();
    sent.split("\r\n\r\n")
        .filter_map(|part| {
            let start = part.find("{\"")?;
            // The body, and whatever followed it on the connection.
            serde_json::Deserializer::from_str(&part[start..])
                .into_iter::<Value>()
                .next()?
                .ok()
        })
        .find(|m| m["method"] == "initialize")
        .map(|m| {
            (
                m["params"]["capabilities"].clone(),
                m["params"]["protocolVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_claude_codes_capabilities_gets_the_right_form_of_link() {
    let claude = match pforte_tests::claude_code() {
        Ok(claude) => claude,
        Err(why) => {
            assert!(!in_ci(), "{why}");
            pforte_tests::skip(&why);
            return;
        }
    };
    let (_svc, tap, gw) = stack_with_sessions().await;
    let token = gw.create_token("claude").await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let ca = home.path().join("ca.pem");
    std::fs::write(&ca, gw.ca_pem().unwrap()).unwrap();
    let run = |args: Vec<String>| {
        let claude = claude.clone();
        let home = home.path().to_owned();
        let ca = ca.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            pforte_tests::run_claude_with_ca(&claude, &home, &ca, &args)
        })
    };
    let auth = format!("Authorization: Bearer {token}");
    let add = [
        "mcp",
        "add",
        "--transport",
        "http",
        "gw",
        &gw.mcp_url(),
        "--header",
        &auth,
    ];
    run(add.iter().map(|s| (*s).to_owned()).collect())
        .await
        .unwrap()
        .unwrap();
    let listed = run(vec!["mcp".into(), "list".into()])
        .await
        .unwrap()
        .unwrap();
    assert!(listed.contains("Connected"), "{listed}");
    let (caps, version) = claude_capabilities(&tap).expect("claude's initialize went upstream");
    eprintln!("claude code declares {caps} on {version}");
    let eliciting = caps["elicitation"]["url"].is_object();
    let client = session_on(&gw, &token, caps.clone(), &version).await;
    let answer = rpc_answer(client.post(&call(2, "claude-code")).await).await;
    let (_, link) = held(&answer, eliciting);
    assert_eq!(link.host_str(), Url::parse(&gw.base).unwrap().host_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_redis_use_an_approval_once() {
    let Some(redis) = pforte_tests::RedisServer::start() else {
        assert!(!in_ci(), "redis-server is missing under CI=true");
        pforte_tests::skip("redis-server is not installed");
        return;
    };
    let svc = EchoUpstream::start().await.unwrap();
    let tap = WireTap::start(&svc.addr.to_string()).await.unwrap();
    let url_a = redis.url();
    let a = Stack::builder()
        .upstream(&tap.mcp_url())
        .redis_url(&url_a)
        .policy(rule())
        .start()
        .await;
    let b = Stack::builder()
        .upstream(&tap.mcp_url())
        .redis_url(&url_a)
        .policy(rule())
        .start()
        .await;
    a.admin_cmd(
        &["user", "add", ROOT, "--role", "admin"],
        &format!("{ROOT_PW}\n"),
    )
    .unwrap();
    let token = a.create_token("ci").await.unwrap();
    assert!(
        b.accepts_token(&token).await,
        "gateway b never saw the token"
    );
    let on_a = session(&a, &token, json!({})).await;
    let on_b = session(&b, &token, json!({})).await;
    let (id, _) = held(
        &rpc_answer(on_a.post(&call(2, "shared-7c1")).await).await,
        false,
    );
    // Gateway b knows the same pending approval.
    assert_eq!(
        held(
            &rpc_answer(on_b.post(&call(2, "shared-7c1")).await).await,
            false
        )
        .0,
        id
    );
    let root = signed_in(&b, ROOT, ROOT_PW).await;
    decide(&b, &root, &id, "approve").await;
    // Both retry at once: one passes, the other is held as a new approval.
    let retry = call(3, "shared-7c1");
    let (ra, rb) = tokio::join!(on_a.post(&retry), on_b.post(&retry));
    let (ra, rb) = (rpc_answer(ra).await, rpc_answer(rb).await);
    let passed = [&ra, &rb]
        .iter()
        .filter(|r| r["result"]["isError"] != true)
        .count();
    assert_eq!(passed, 1, "{ra}\n{rb}");
    assert_eq!(tap.count("shared-7c1"), 1, "one call reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_in_chromium_list_call_and_a_click_on_approve() {
    let Some(chromium) = chromium() else {
        assert!(!in_ci(), "chromium is missing under CI=true");
        pforte_tests::skip("chromium is not installed (apt-get install -y chromium)");
        return;
    };
    let (_svc, tap, gw) = stack(None).await;
    let token = gw.create_token("ci").await.unwrap();
    let client = session(&gw, &token, json!({})).await;
    let pending = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"note": "browser-click", "path": "docs/<draft>.md",
        "text": "a long line that an approver reads on a phone without scrolling sideways ".repeat(4),
        "recursive": true, "keep": ["a", "b"]}}});
    let (id, _) = held(&rpc_answer(client.post(&pending).await).await, false);
    held(
        &rpc_answer(client.post(&call(3, "another-call")).await).await,
        false,
    );

    let r = browser_script(
        "approvals.py",
        &chromium,
        &gw,
        ROOT,
        ROOT_PW,
        &["--approval", &id],
    )
    .await
    .unwrap();
    assert_eq!(r["console"], json!([]), "console messages");
    assert_eq!(r["exceptions"], json!([]), "exceptions");
    for key in ["list", "approval"] {
        for size in ["desktop", "phone"] {
            let page = &r[format!("{key}_{size}")];
            assert_eq!(page["scripts"], 0, "{key} {size} has scripts");
            let limit = if size == "phone" { 390 } else { 1280 };
            assert!(
                page["width"].as_u64().unwrap() <= limit,
                "{key} overflows at {size}: {}",
                page["width"]
            );
            assert!(
                is_png(Path::new(page["screenshot"].as_str().unwrap())),
                "{key} {size} screenshot"
            );
        }
    }
    let detail = r["approval_desktop"]["text"].as_str().unwrap();
    for needle in [
        "Approve a call?",
        "docs/<draft>.md",
        "token ci",
        RULE,
        MESSAGE,
    ] {
        assert!(detail.contains(needle), "{needle:?} missing:\n{detail}");
    }
    let clicked = r["after_click"]["text"].as_str().unwrap();
    assert!(clicked.contains("Approved."), "{clicked}");
    // The click approved it: the retry passes.
    let retry = rpc_answer(
        client
            .post(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": pending["params"].clone()}))
            .await,
    )
    .await;
    assert!(retry["result"]["isError"] != true, "{retry}");
    assert_eq!(tap.count("browser-click"), 1);
}
