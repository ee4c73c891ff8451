//! End to end, per-user upstream credentials entered as secrets (issue 24): a `header` route in
//! front of an upstream that echoes and records what it receives — the connect prompt (a tool
//! error with the link; `-32042` for a client that declared URL elicitation), the single-use
//! link, the secret form, each user's key and never the client's token upstream, an upstream 401
//! to a key → reconnect; and an `env` route running `mcp-service stdio` — an OAuth user's link
//! works only in a browser signed in as that user, the secret lands in that user's child's
//! environment beside the caller's identity (`whoami` names the user), `/connections` lists and
//! disconnects it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use pforte_tests::{
    EchoUpstream, Limits, McpClient, OAuth, Prompt, Route, Stack, UpstreamAuth, bin,
    connect::{self, enter_secret, log_wrapper},
    oauth::{Browser, access_token_at},
    rpc_answer, write_vault_key,
};
use serde_json::{Value, json};
use url::Url;

/// Where these gateways send `/mcp`: nowhere (only their routes are used).
const NOWHERE: &str = "http://127.0.0.1:9/mcp";
const SEARCH: &str = "search";

/// `tools/call TOOL {}` on `client`'s session: the JSON-RPC answer (panics unless 200).
async fn call(client: &McpClient, tool: &str) -> Value {
    let resp = client.call_tool(tool, json!({})).await;
    assert_eq!(resp.status(), 200, "tools/call {tool}");
    rpc_answer(resp).await
}

/// The connect prompt in `answer` (panics when it is something else).
fn prompt(answer: &Value) -> Prompt {
    Prompt::of(answer).unwrap_or_else(|| panic!("not a connect prompt: {answer}"))
}

/// A plain-HTTP gateway whose route `search` fronts `echo` with each user's `X-Api-Key`, its
/// log in `log`.
async fn header_gateway(echo: &EchoUpstream, dir: &std::path::Path) -> Stack {
    let key = write_vault_key(dir).unwrap();
    let wrapper = log_wrapper(&dir.join("gateway.log"));
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    Stack::builder()
        .upstream(NOWHERE)
        .plain_http()
        .limits(Limits::off())
        .vault_key(&key)
        .wrapper(&wrapper)
        .route(
            Route::url(SEARCH, &echo.mcp_url())
                .title("Search")
                .upstream_auth(UpstreamAuth::header("X-Api-Key").label("Search API key")),
        )
        .start()
        .await
}

/// Whether any of the vault's files in `data_dir` (`vault.db` and its journal) holds `secret`
/// in clear.
fn vault_holds(data_dir: &std::path::Path, secret: &str) -> bool {
    let files: Vec<_> = std::fs::read_dir(data_dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("vault.db"))
        .collect();
    assert!(!files.is_empty(), "no vault.db in {}", data_dir.display());
    files.iter().any(|e| {
        let bytes = std::fs::read(e.path()).unwrap_or_default();
        bytes.windows(secret.len()).any(|w| w == secret.as_bytes())
    })
}

/// The last `tools/call` the echo upstream received.
fn last_call(echo: &EchoUpstream) -> pforte_tests::connect::Seen {
    echo.seen()
        .into_iter()
        .rev()
        .find(|s| s.rpc_method.as_deref() == Some("tools/call"))
        .expect("a tools/call upstream")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_route_asks_each_user_for_a_key_once_and_sends_only_that_upstream() {
    let echo = EchoUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gw = header_gateway(&echo, dir.path()).await;
    let hana = gw.create_token("hana").await.unwrap();
    let url = gw.route_url(SEARCH);
    let (mut connects, mut reconnects) = (0, 0);

    // Not connected: Pforte answers for the route — a stand-in session with the link in its
    // instructions and one tool, `connect`.
    let mut standin = gw.mcp_at(&url, &hana);
    let init = standin.open().await.unwrap();
    let instructions = init["instructions"].as_str().unwrap_or_default();
    assert!(
        instructions.contains(&format!("/connect/{SEARCH}?link=")),
        "{init}"
    );
    let sid = standin.session().expect("a stand-in session").to_owned();
    assert!(sid.starts_with("pforte-connect-"), "{sid}");
    assert_eq!(
        standin.tool_names().await,
        BTreeSet::from(["connect".to_owned()])
    );
    // A tool call gets a tool error whose text carries the link (what Claude shows).
    let asked = prompt(&call(&standin, "echo").await);
    assert!(matches!(asked, Prompt::ToolError { .. }), "{asked:?}");
    assert!(!asked.is_reconnect(), "{asked:?}");
    assert!(
        asked.text().starts_with("Search needs your account"),
        "{asked:?}"
    );
    let link = asked.link().clone();
    assert_eq!(link.path(), format!("/connect/{SEARCH}"));
    // One link per person and route while it is fresh: the instructions' link is the call's.
    assert_eq!(connect::link_in(instructions).as_ref(), Some(&link));
    assert_eq!(
        link.origin().ascii_serialization(),
        Url::parse(&gw.base).unwrap().origin().ascii_serialization()
    );
    // No event stream before connecting.
    assert_eq!(standin.stream().await.status(), 405);
    // Other requests get a JSON-RPC error naming the link; nothing reached the upstream.
    let read = standin
        .request("resources/read", json!({"uri": "file:///x"}))
        .await;
    assert_eq!(read.status(), 200, "resources/read");
    let named = prompt(&rpc_answer(read).await);
    assert!(matches!(named, Prompt::Error { .. }), "{named:?}");
    assert!(
        echo.seen()
            .iter()
            .all(|s| s.rpc_method.as_deref() != Some("tools/call")),
        "{:?}",
        echo.seen()
    );

    // The link opens the form (a static token's link works by itself); the key is stored.
    let browser = Browser::new(None);
    let (form, _) = enter_secret(&browser, &link, &[("x-api-key", "key-of-hana")])
        .await
        .unwrap();
    assert!(form.body.contains("Search API key"), "{}", form.body);
    connects += 1;
    // Single use: the same link again is refused.
    let again = browser.get(&link).await.unwrap();
    assert_eq!(again.status, 400, "{}", again.body);
    // The stand-in session is over (404): the client starts a session with the upstream.
    let over = standin.call_tool("echo", json!({})).await;
    assert_eq!(over.status(), 404);
    let mut client = gw.mcp_at(&url, &hana);
    client.open().await.unwrap();
    let answer = call(&client, "echo").await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(last_call(&echo).header("x-api-key"), Some("key-of-hana"));

    // A second user has a key of their own; each call carries its caller's.
    let ivo = gw.create_token("ivo").await.unwrap();
    let mut ivo_client = gw.mcp_at(&url, &ivo);
    ivo_client.open().await.unwrap();
    let asked = prompt(&call(&ivo_client, "echo").await);
    enter_secret(&browser, asked.link(), &[("x-api-key", "key-of-ivo")])
        .await
        .unwrap();
    connects += 1;
    let mut ivo_client = gw.mcp_at(&url, &ivo);
    ivo_client.open().await.unwrap();
    call(&ivo_client, "echo").await;
    assert_eq!(last_call(&echo).header("x-api-key"), Some("key-of-ivo"));
    call(&client, "echo").await;
    assert_eq!(last_call(&echo).header("x-api-key"), Some("key-of-hana"));

    // The service stops taking hana's key (401): the call carries a reconnect link, and the
    // new key works in the same session.
    echo.refuse_key("key-of-hana", true);
    let asked = prompt(&call(&client, "echo").await);
    assert!(asked.is_reconnect(), "{asked:?}");
    let next = prompt(&call(&client, "echo").await);
    assert!(next.is_reconnect(), "still needs reconnect: {next:?}");
    enter_secret(&browser, asked.link(), &[("x-api-key", "key-of-hana-2")])
        .await
        .unwrap();
    reconnects += 1;
    let answer = call(&client, "echo").await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(last_call(&echo).header("x-api-key"), Some("key-of-hana-2"));

    // Upstream, never a client's token: no Authorization at all, no header carrying either.
    let seen = echo.seen();
    assert!(seen.len() >= 4, "{seen:?}");
    for s in &seen {
        assert_eq!(s.header("authorization"), None, "{s:?}");
        for (name, value) in &s.headers {
            assert!(
                !value.contains(&hana) && !value.contains(&ivo),
                "a client token upstream in {name}: {s:?}"
            );
        }
    }
    // The keys are sealed in the vault, and in no log line.
    for secret in ["key-of-hana-2", "key-of-ivo"] {
        assert!(!vault_holds(&gw.data_dir(), secret), "{secret} in clear");
    }
    let log = std::fs::read_to_string(dir.path().join("gateway.log")).unwrap();
    for secret in ["key-of-hana", "key-of-ivo"] {
        assert!(!log.contains(secret), "{secret} logged");
    }
    // `/metrics` counts what happened to the credentials (and nothing of them).
    let text = connect::metrics_text(&gw.http(), &gw.base).await.unwrap();
    let events = |event: &str| {
        connect::metric_sum(
            &text,
            "pforte_upstream_credential_events_total",
            &["route=\"search\"", &format!("event=\"{event}\"")],
        )
    };
    // A reconnect is a connect too (the key entered again).
    assert_eq!(
        events("connected"),
        f64::from(connects + reconnects),
        "{text}"
    );
    assert_eq!(events("reconnect_needed"), f64::from(reconnects), "{text}");
    assert!(!text.contains("key-of-"), "a key in /metrics");
    println!(
        "upstream_auth header route: connects {connects}, reconnects {reconnects}, upstream requests {}",
        seen.len()
    );
}

/// The secret form's ticket works only in the browser that opened the link (red team
/// 2026-12-04, informational): another browser posting it is refused and stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_form_posts_only_from_the_browser_that_opened_the_link() {
    let echo = EchoUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gw = header_gateway(&echo, dir.path()).await;
    let hana = gw.create_token("hana").await.unwrap();
    let mut client = gw.mcp_at(&gw.route_url(SEARCH), &hana);
    client.open().await.unwrap();
    let asked = prompt(&call(&client, "echo").await);
    let page = Browser::new(None).get(asked.link()).await.unwrap();
    assert_eq!(page.status, 200, "{}", page.body);
    let mut form = page.form().unwrap();
    form.set("v.x-api-key", "key-of-bob").unwrap();
    let posted = Browser::new(None).submit(&form, None).await.unwrap();
    assert_eq!(posted.status, 403, "{}", posted.body);
    assert!(posted.body.contains("another browser"), "{}", posted.body);
    // hana is still not connected: the call asks again, and nothing reached the upstream.
    let again = prompt(&call(&client, "echo").await);
    assert!(matches!(again, Prompt::ToolError { .. }), "{again:?}");
    assert!(
        echo.seen()
            .iter()
            .all(|s| s.rpc_method.as_deref() != Some("tools/call")),
        "{:?}",
        echo.seen()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_underscore_twin_of_the_credential_header_never_reaches_the_upstream() {
    let echo = EchoUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gw = header_gateway(&echo, dir.path()).await;
    let kai = gw.create_token("kai").await.unwrap();
    let url = gw.route_url(SEARCH);
    let mut standin = gw.mcp_at(&url, &kai);
    standin.open().await.unwrap();
    let asked = prompt(&call(&standin, "echo").await);
    let browser = Browser::new(None);
    enter_secret(&browser, asked.link(), &[("x-api-key", "key-of-kai")])
        .await
        .unwrap();
    let mut client = gw.mcp_at(&url, &kai);
    client.open().await.unwrap();
    // The client sends its own spellings of the credential header beside the gateway's.
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "echo", "arguments": {}}});
    let resp = client
        .post_request()
        .header("X_Api_Key", "client-underscore")
        .header("x_API_key", "client-mixed")
        .header("X-Api-Key", "client-dash")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let seen = last_call(&echo);
    assert_eq!(seen.header("x-api-key"), Some("key-of-kai"), "{seen:?}");
    for (name, value) in &seen.headers {
        assert!(
            !value.starts_with("client-"),
            "{name}: {value} reached the upstream"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_declared_url_elicitation_gets_minus_32042_with_the_link() {
    let echo = EchoUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gw = header_gateway(&echo, dir.path()).await;
    let token = gw.create_token("juno").await.unwrap();
    let url = gw.route_url(SEARCH);
    let mut client = gw
        .mcp_at(&url, &token)
        .protocol("2025-11-25")
        .capabilities(json!({"elicitation": {"url": {}}}));
    client.open().await.unwrap();
    let answer = call(&client, "echo").await;
    let asked = prompt(&answer);
    let Prompt::Elicitation {
        elicitation_id,
        link,
        ..
    } = &asked
    else {
        panic!("a client with URL elicitation got {answer}");
    };
    assert!(!elicitation_id.is_empty());
    assert_eq!(link.path(), format!("/connect/{SEARCH}"));
    // A client that did not declare it, in a session of its own: the tool error.
    let mut plain = gw.mcp_at(&url, &token).protocol("2025-11-25");
    plain.open().await.unwrap();
    let other = prompt(&call(&plain, "echo").await);
    assert!(matches!(other, Prompt::ToolError { .. }), "{other:?}");
    assert_eq!(
        other.link(),
        asked.link(),
        "one link per person and route while it is fresh (issue 38)"
    );
    // The elicited link works like any other.
    enter_secret(&Browser::new(None), link, &[("x-api-key", "key-of-juno")])
        .await
        .unwrap();
    let mut client = gw.mcp_at(&url, &token).protocol("2025-11-25");
    client.open().await.unwrap();
    assert_eq!(call(&client, "echo").await["result"]["isError"], false);
    assert_eq!(last_call(&echo).header("x-api-key"), Some("key-of-juno"));
}

/// An upstream 401 without a body (`Content-Length: 0`, as many servers send it) is answered
/// like one with a body: the reconnect prompt, not an empty 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bodiless_upstream_401_still_carries_the_reconnect_link() {
    let echo = EchoUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gw = header_gateway(&echo, dir.path()).await;
    let token = gw.create_token("kai").await.unwrap();
    let url = gw.route_url(SEARCH);
    let mut standin = gw.mcp_at(&url, &token);
    standin.open().await.unwrap();
    let asked = prompt(&call(&standin, "echo").await);
    enter_secret(
        &Browser::new(None),
        asked.link(),
        &[("x-api-key", "key-of-kai")],
    )
    .await
    .unwrap();
    let mut client = gw.mcp_at(&url, &token);
    client.open().await.unwrap();
    assert_eq!(call(&client, "echo").await["result"]["isError"], false);
    echo.refuse_key("key-of-kai", false);
    let resp = client.call_tool("echo", json!({})).await;
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the answer to a call the upstream refused: {e}: {text:?}"));
    let asked = prompt(&answer);
    assert!(asked.is_reconnect(), "{asked:?}");
}

const ENV_ROUTE: &str = "keys";
const DORA: &str = "dora";
const DORA_PW: &str = "dora horse battery staple";

/// The environment files the `env` route's children wrote at their start (`NAME=value`
/// lines), each as its text.
fn child_envs(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_env_route_starts_each_users_child_with_their_secret_and_identity() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_vault_key(dir.path()).unwrap();
    let dumps = dir.path().join("children");
    pforte_tests::open_to_children(&dumps);
    let data = dir.path().join("plans");
    pforte_tests::open_to_children(&data);
    // Each child writes its environment to a file of its own, then becomes `mcp-service stdio`.
    let command = [
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        "env > \"$DUMP_DIR/child-$$.env\"; exec \"$0\" stdio".to_owned(),
        bin("mcp-service").display().to_string(),
    ];
    let gw = Stack::builder()
        .upstream(NOWHERE)
        .limits(Limits::off().sessions_per_principal(100))
        .oauth(OAuth::default())
        .vault_key(&key)
        .route(
            Route::command(ENV_ROUTE, &command)
                .title("Key search")
                .env("DUMP_DIR", &dumps.display().to_string())
                .env("MCP_SERVICE_DATA_DIR", &data.display().to_string())
                .upstream_auth(UpstreamAuth::env(&["SEARCH_KEY"]).label("Search key")),
        )
        .start()
        .await;
    gw.add_user(DORA, DORA_PW).unwrap();
    let url = gw.route_url(ENV_ROUTE);
    let token = access_token_at(&url, gw.ca_pem(), DORA, DORA_PW, "mcp:read mcp:write")
        .await
        .unwrap();

    let mut standin = gw.mcp_at(&url, &token);
    standin.open().await.unwrap();
    let first = prompt(&call(&standin, "whoami").await);
    // An OAuth user's link works only in a browser signed in to Pforte as that user.
    let stranger = Browser::for_gateway(&gw);
    let refused = stranger.get(first.link()).await.unwrap();
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("Sign in"), "{}", refused.body);
    // That used the link up; the next call carries a fresh one.
    let asked = prompt(&call(&standin, "whoami").await);
    assert_ne!(asked.link(), first.link());
    let browser = Browser::for_gateway(&gw);
    browser.sign_in(&gw.base, DORA, DORA_PW).await.unwrap();
    let (form, _) = enter_secret(&browser, asked.link(), &[("SEARCH_KEY", "dora-search-key")])
        .await
        .unwrap();
    assert!(form.body.contains("Search key"), "{}", form.body);

    // A session now starts a child of dora's own: whoami names her, and the child's
    // environment holds her key beside her identity, never her token.
    let mut client = gw.mcp_at(&url, &token);
    client.open().await.unwrap();
    let me = call(&client, "whoami").await;
    let who = &me["result"]["structuredContent"];
    assert_eq!(who["subject"], DORA, "{me}");
    assert_eq!(who["authKind"], "oauth", "{me}");
    let envs = child_envs(&dumps);
    let mine: Vec<&String> = envs
        .iter()
        .filter(|e| e.lines().any(|l| l == format!("PFORTE_SUBJECT={DORA}")))
        .collect();
    assert_eq!(mine.len(), 1, "one child of dora's: {envs:?}");
    let env = mine[0];
    assert!(
        env.lines().any(|l| l == "SEARCH_KEY=dora-search-key"),
        "{env}"
    );
    assert!(env.lines().any(|l| l == "PFORTE_AUTH_KIND=oauth"), "{env}");
    // The gateway's tool catalog learns the route's tools through a child started with her
    // variables (issue 36): its own identity, her key.
    let borrowed = pforte_tests::eventually(std::time::Duration::from_secs(10), || {
        let dumps = dumps.clone();
        async move {
            child_envs(&dumps).iter().any(|e| {
                e.lines().any(|l| l == "PFORTE_AUTH_KIND=gateway")
                    && e.lines().any(|l| l == "SEARCH_KEY=dora-search-key")
            })
        }
    })
    .await;
    assert!(borrowed, "no catalog child with her key: {envs:?}");
    let envs = child_envs(&dumps);
    for e in &envs {
        assert!(!e.contains(&token), "the client's token in a child: {e}");
        // Besides her own child, only the gateway's catalog child borrows it (to list the
        // tools; issue 36).
        let catalog = e.lines().any(|l| l == "PFORTE_AUTH_KIND=gateway");
        if !e.contains(&format!("PFORTE_SUBJECT={DORA}")) && !catalog {
            assert!(!e.contains("dora-search-key"), "dora's key elsewhere: {e}");
        }
    }

    assert!(!vault_holds(&gw.data_dir(), "dora-search-key"));
    // /account lists it among her connected services; /connections too, and disconnects it.
    let account = Url::parse(&format!("{}/account", gw.base)).unwrap();
    let page = browser.get(&account).await.unwrap();
    let services = page
        .body
        .split("Connected services")
        .nth(1)
        .unwrap_or_default();
    assert!(
        services.contains(
            "<td data-label=\"Service\">Key search</td><td data-label=\"Kind\">env</td>\
             <td data-label=\"State\">connected</td>"
        ),
        "{}",
        page.body
    );
    let list_url = Url::parse(&format!("{}/connections", gw.base)).unwrap();
    let list = browser.get(&list_url).await.unwrap();
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(
        list.body.contains("Key search") && list.body.contains("connected"),
        "{}",
        list.body
    );
    let disconnect = pforte_tests::Form::parse_all(&list.url, &list.body)
        .unwrap()
        .into_iter()
        .find(|f| f.field("route") == Some(ENV_ROUTE))
        .unwrap_or_else(|| panic!("no disconnect form: {}", list.body));
    let done = browser
        .submit(&disconnect, Some("disconnect"))
        .await
        .unwrap();
    let back = browser.get(&done.see_other().unwrap()).await.unwrap();
    assert!(back.body.contains("Disconnected"), "{}", back.body);
    // Gone from the vault: a new session is the stand-in again, and a call asks to connect.
    let mut after = gw.mcp_at(&url, &token);
    after.open().await.unwrap();
    let asked = prompt(&call(&after, "whoami").await);
    assert!(!asked.is_reconnect(), "{asked:?}");
    println!("upstream_auth env route: connects 1, disconnects 1");
}

/// `pforte ARGS…` run to its end: exit code, stdout, stderr.
fn pforte_run(args: &[&str], env: &[(&str, &std::path::Path)]) -> (Option<i32>, String, String) {
    let mut cmd = std::process::Command::new(bin("pforte"));
    cmd.args(args).env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 37: a key ring that opens none of the stored credentials is refused by `check` and at
/// `serve`'s start (before it says it listens) — not a 503 "try again" at each person's call;
/// with the right ring, `check` says how many stored credentials open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vault_key_that_opens_no_stored_credential_is_refused_at_start() {
    let echo = EchoUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut gw = header_gateway(&echo, dir.path()).await;
    let hana = gw.create_token("hana").await.unwrap();
    let mut client = gw.mcp_at(&gw.route_url(SEARCH), &hana);
    client.open().await.unwrap();
    let asked = prompt(&call(&client, "echo").await);
    enter_secret(
        &Browser::new(None),
        asked.link(),
        &[("x-api-key", "key-of-hana")],
    )
    .await
    .unwrap();
    let config = gw.config_path();
    let config = config.to_str().unwrap();

    let (code, stdout, stderr) = pforte_run(&["check", "--config", config], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let vault_line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("vault: "))
        .unwrap_or_else(|| panic!("no vault line in {stdout}"));
    assert!(
        vault_line.ends_with("; keys k1 (k1 seals); 1 stored credential(s) open"),
        "{vault_line}"
    );
    assert!(stdout.contains("  sign-in: local passwords"), "{stdout}");

    // Another ring (a new key without the old one): refused, naming what to do.
    let other_dir = tempfile::tempdir().unwrap();
    let other = write_vault_key(other_dir.path()).unwrap();
    let wrong = [("PFORTE_VAULT_KEY_FILE", other.as_path())];
    let (code, stdout, stderr) = pforte_run(&["check", "--config", config], &wrong);
    assert_eq!(code, Some(64), "{stdout}{stderr}");
    assert!(
        stderr.contains("the vault key ring opens 0 of the 1 stored credentials (route \"search\""),
        "{stderr}"
    );
    assert!(stderr.contains("pforte vault rekey"), "{stderr}");

    // `serve` with it stops at start and never says it listens.
    gw.proc
        .signal_and_wait(
            nix::sys::signal::Signal::SIGTERM,
            std::time::Duration::from_secs(10),
        )
        .unwrap();
    let (code, stdout, stderr) = pforte_run(&["serve", "--config", config], &wrong);
    assert_ne!(code, Some(0), "{stdout}{stderr}");
    assert!(!stdout.contains("listening"), "said it listens: {stdout}");
    assert!(
        stderr.contains("the vault key ring opens 0 of the 1 stored credentials"),
        "{stderr}"
    );
}
