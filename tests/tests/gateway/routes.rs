//! Routes: one gateway in front of several MCP servers, each at `/NAME/mcp` with its own
//! RFC 9728 document, challenge and `x-pforte-route`; route-limited static tokens; https
//! upstreams verified against a CA file; `pforte check` on bad `[[routes]]`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use pforte_tests::{
    Gateway, McpClient, McpService, Route, Stack, TestCert, TlsFront, bin, parse_challenge,
    rmcp_client,
};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

/// Lists the tools and calls `whoami` through the route at `url`.
async fn use_route(gw: &Gateway, url: &str, token: &str) -> String {
    let client = rmcp_client(url, gw.http(), token, &[]).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "whoami"), "{url}: {tools:?}");
    let answer = client
        .call_tool(CallToolRequestParams::new("whoami"))
        .await
        .unwrap();
    assert_ne!(answer.is_error, Some(true), "{url}: {answer:?}");
    let _ = client.cancel().await;
    serde_json::to_string(&answer).unwrap()
}

/// A POST of one JSON-RPC `ping` to `url`, with `token` if any.
async fn ping(gw: &Gateway, url: &str, token: Option<&str>) -> reqwest::Response {
    let client = match token {
        Some(t) => gw.mcp_at(url, t),
        None => McpClient::new(gw.http(), url),
    };
    client
        .post(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_http_routes_through_one_gateway() {
    let alpha = McpService::start(&[]).unwrap();
    let beta = McpService::start(&[]).unwrap();
    let gw = Stack::builder()
        .route(Route::url("alpha", &alpha.url()))
        .route(Route::url("beta", &beta.url()))
        .service(alpha)
        .start()
        .await;
    let base = gw.base.clone();
    let token = gw.create_token("everywhere").await.unwrap();

    // Tools listed and called on both routes (and on [upstream]'s /mcp).
    for path in ["/alpha/mcp", "/beta/mcp", "/mcp"] {
        use_route(&gw, &format!("{base}{path}"), &token).await;
    }
    assert_eq!(
        ping(&gw, &format!("{base}/gamma/mcp"), Some(&token))
            .await
            .status(),
        404
    );

    // Each route is its own protected resource.
    for name in ["alpha", "beta"] {
        let doc: Value = gw
            .http()
            .get(format!(
                "{base}/.well-known/oauth-protected-resource/{name}/mcp"
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(doc["resource"], format!("{base}/{name}/mcp"));
        assert_eq!(doc["authorization_servers"][0], base);

        let r = ping(&gw, &format!("{base}/{name}/mcp"), None).await;
        assert_eq!(r.status(), 401);
        let header = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
        let (_, params) = parse_challenge(&header).unwrap();
        assert_eq!(
            params["resource_metadata"],
            format!("{base}/.well-known/oauth-protected-resource/{name}/mcp")
        );
    }
    // [upstream] keeps today's documents.
    for path in ["", "/mcp"] {
        let doc: Value = gw
            .http()
            .get(format!("{base}/.well-known/oauth-protected-resource{path}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(doc["resource"], format!("{base}/mcp"));
    }

    // A token limited to alpha opens alpha only.
    let limited = gw
        .create_token_with("alpha-only", &["--route", "alpha"])
        .await
        .unwrap();
    use_route(&gw, &format!("{base}/alpha/mcp"), &limited).await;
    for path in ["/beta/mcp", "/mcp"] {
        let r = ping(&gw, &format!("{base}{path}"), Some(&limited)).await;
        assert_eq!(r.status(), 403, "{path}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "route_forbidden", "{path}: {body}");
    }
    let listed: Value = serde_json::from_str(&gw.token_cmd(&["list", "--json"]).unwrap()).unwrap();
    let entry = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "alpha-only")
        .unwrap()
        .clone();
    assert_eq!(entry["routes"], json!(["alpha"]));

    // An unknown route at create time is a usage error naming the routes.
    let out = Command::new(bin("pforte"))
        .args(["token", "create", "x", "--route", "nope", "--config"])
        .arg(gw.config_path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown route \"nope\""), "{err}");
    assert!(err.contains("mcp alpha beta"), "{err}");
}

/// `/readyz` as status and JSON body.
async fn readyz(gw: &Gateway) -> (u16, Value) {
    let r = gw
        .http()
        .get(format!("{}/readyz", gw.base))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_names_a_down_route_and_only_a_required_one_makes_it_unready() {
    // Nothing listens here.
    let dead = format!("http://127.0.0.1:{}/mcp", pforte_tests::free_port());
    let failing = json!([{"route": "side", "required": false, "reason": "connection refused"}]);

    let gw = Stack::builder()
        .route(Route::url("side", &dead).optional())
        .start()
        .await;
    let (status, body) = readyz(&gw).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ready"], true, "{body}");
    assert_eq!(body["failing"], failing, "{body}");
    // The probe is news for the metrics too: the route's one instance is down.
    let metrics = gw
        .http()
        .get(format!("{}/metrics", gw.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let side = format!("pforte_upstream_up{{route=\"side\",upstream=\"{dead}\"}} 0");
    assert!(metrics.lines().any(|l| l == side), "{side} in {metrics}");
    // The required route (/mcp) still serves; /healthz is as it was.
    let token = gw.create_token("t").await.unwrap();
    assert_eq!(gw.mcp(&token).initialize().await.status(), 200);
    let health: Value = gw
        .http()
        .get(format!("{}/healthz", gw.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health, json!({"status": "ok"}));
    drop(gw);

    let gw = Stack::builder()
        .route(Route::url("side", &dead))
        .start()
        .await;
    let (status, body) = readyz(&gw).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false, "{body}");
    assert_eq!(body["status"], "not_ready", "{body}");
    let mut required = failing.clone();
    required[0]["required"] = json!(true);
    assert_eq!(body["failing"], required, "{body}");
}

/// An upstream that answers every request with what it received (method, path, headers).
async fn echo_upstream() -> std::net::SocketAddr {
    use axum::{Json, extract::Request};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(|req: Request| async move {
        let headers: serde_json::Map<String, Value> = req
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap_or(""))))
            .collect();
        Json(json!({"path": req.uri().path(), "headers": headers}))
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_learns_the_route_and_its_own_path() {
    let echo = echo_upstream().await;
    let gw = Stack::builder()
        .route(Route::url("echo", &format!("http://{echo}/svc/mcp")))
        .start()
        .await;
    let token = gw.create_token("t").await.unwrap();
    let seen: Value = ping(&gw, &format!("{}/echo/mcp", gw.base), Some(&token))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(seen["path"], "/svc/mcp", "{seen}");
    assert_eq!(seen["headers"]["x-pforte-route"], "echo", "{seen}");
    assert_eq!(seen["headers"]["x-pforte-client"], "t", "{seen}");
    assert_eq!(seen["headers"]["host"], echo.to_string(), "{seen}");
    assert!(seen["headers"].get("authorization").is_none(), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstreams_are_verified_against_the_ca_file() {
    let svc = McpService::start(&[]).unwrap();
    let certs = tempfile::tempdir().unwrap();
    let (right_dir, wrong_dir) = (certs.path().join("right"), certs.path().join("wrong"));
    std::fs::create_dir_all(&right_dir).unwrap();
    std::fs::create_dir_all(&wrong_dir).unwrap();
    let right = TestCert::create(&right_dir).unwrap();
    let wrong = TestCert::create(&wrong_dir).unwrap();
    let front = TlsFront::start(&right, svc.addr).await.unwrap();
    let url = format!("https://127.0.0.1:{}/mcp", front.addr.port());
    let gw = Stack::builder()
        .route(Route::url("secure", &url).ca_file(&right.cert))
        .route(Route::url("wrong-ca", &url).ca_file(&wrong.cert))
        // The system roots do not know a self-signed certificate either.
        .route(Route::url("system-roots", &url))
        .service(svc)
        .start()
        .await;
    let token = gw.create_token("t").await.unwrap();
    use_route(&gw, &format!("{}/secure/mcp", gw.base), &token).await;
    // The secure route's verified connection to the same address is not reused by the others.
    for name in ["wrong-ca", "system-roots"] {
        let r = ping(&gw, &format!("{}/{name}/mcp", gw.base), Some(&token)).await;
        assert_eq!(r.status(), 502, "{name}");
    }
}

/// `pforte check --config FILE` with `text`: the exit code and stderr.
fn check(dir: &std::path::Path, text: &str) -> (Option<i32>, String) {
    let path = dir.join("pforte.toml");
    std::fs::write(
        &path,
        format!(
            "data_dir = {:?}\n{text}",
            dir.join("data").display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(bin("pforte"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_refuses_bad_routes() {
    let dir = tempfile::tempdir().unwrap();
    for (text, expected) in [
        (
            "[[routes]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\n[[routes]]\nname = \"a\"\nurl = \"http://127.0.0.1:2/mcp\"",
            "[[routes]] \"a\": name: a route of this name exists already",
        ),
        (
            "[[routes]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\ncommand = [\"sh\"]",
            "[[routes]] \"a\": url: give exactly one of url, urls or command",
        ),
        (
            "[[routes]]\nname = \"a\"\ncommand = [\"pforte-no-such-program\"]",
            "[[routes]] \"a\": command: \"pforte-no-such-program\" is not an executable on PATH",
        ),
        (
            "[[routes]]\nname = \"a\"\nurl = \"ftp://127.0.0.1:1/mcp\"",
            "accepted: http://HOST:PORT/PATH, https://HOST:PORT/PATH or unix:PATH",
        ),
    ] {
        let (code, err) = check(dir.path(), text);
        assert_eq!(code, Some(64), "{text}: {err}");
        assert!(err.contains(expected), "{text}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let out = Command::new(bin("pforte"))
        .args(["check", "--config"])
        .arg(dir.path().join("pforte.toml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    std::fs::write(
        dir.path().join("pforte.toml"),
        "[[routes]]\nname = \"plans\"\ncommand = [\"sh\", \"-c\", \"cat\"]\n[[routes]]\nname = \"web\"\nurl = \"https://mcp.internal/mcp\"",
    )
    .unwrap();
    let out = Command::new(bin("pforte"))
        .args(["check", "--config"])
        .arg(dir.path().join("pforte.toml"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("/plans/mcp → stdio: sh -c cat"), "{stdout}");
    assert!(
        stdout.contains("/web/mcp → https://mcp.internal:443/mcp"),
        "{stdout}"
    );
}

const USER: &str = "alice";
const PASSWORD: &str = "correct horse battery staple";

/// An OAuth token through the real flow (discovery from the route's 401, registration like
/// Claude.ai, login, consent, code exchange) for the route at `mcp_url`; also the consent page.
async fn route_token(gw: &Gateway, mcp_url: &str) -> (String, String) {
    use pforte_tests::oauth::{
        Browser, CLAUDE_CALLBACK, Pkce, authorize_url, browser_step, discover, exchange_code,
        param, register_like_claude,
    };
    let browser = Browser::for_gateway(gw);
    let d = discover(&browser.http, mcp_url).await.unwrap();
    let client = register_like_claude(&browser.http, &d).await.unwrap();
    let pkce = Pkce::new("route-token");
    let auth = authorize_url(
        &d,
        &client.client_id,
        CLAUDE_CALLBACK,
        &pkce,
        "st",
        &[("resource", &d.resource), ("scope", "mcp:read mcp:write")],
    )
    .unwrap();
    let (cb, consent) = browser_step(&browser, &auth, USER, PASSWORD, "approve")
        .await
        .unwrap();
    let code = param(&cb, "code").expect("a code");
    let token = exchange_code(
        &browser.http,
        &d,
        &client,
        &code,
        CLAUDE_CALLBACK,
        &pkce.verifier,
        &d.resource,
    )
    .await
    .unwrap()
    .access()
    .unwrap();
    (token, consent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_tokens_are_bound_to_their_route() {
    use pforte_tests::oauth::{
        Browser, CLAUDE_CALLBACK, Pkce, authorize_url, discover, mcp_status, param,
        register_like_claude,
    };
    let alpha = McpService::start(&[]).unwrap();
    let beta = McpService::start(&[]).unwrap();
    let gw = Stack::builder()
        .route(Route::url("alpha", &alpha.url()))
        .route(Route::url("beta", &beta.url()))
        .service(alpha)
        .start()
        .await;
    gw.add_user(USER, PASSWORD).unwrap();
    let base = gw.base.clone();
    let (alpha_url, beta_url) = (format!("{base}/alpha/mcp"), format!("{base}/beta/mcp"));

    let (a_token, consent) = route_token(&gw, &alpha_url).await;
    assert!(
        consent.contains("alpha"),
        "the consent page names the service: {consent}"
    );
    use_route(&gw, &alpha_url, &a_token).await;
    let (b_token, consent) = route_token(&gw, &beta_url).await;
    assert!(consent.contains("beta"), "{consent}");
    use_route(&gw, &beta_url, &b_token).await;

    // A token for one route is refused on every other, as a token for another resource.
    let http = gw.http();
    for (token, other) in [
        (&a_token, &beta_url),
        (&b_token, &alpha_url),
        (&a_token, &gw.mcp_url()),
    ] {
        assert_eq!(mcp_status(&http, other, token).await, 401, "{other}");
        let r = ping(&gw, other, Some(token)).await;
        let header = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
        let (_, params) = parse_challenge(&header).unwrap();
        assert_eq!(params["error"], "invalid_token", "{header}");
        assert_eq!(params["error_description"], "token is for another resource");
        let path = other.strip_prefix(&base).unwrap();
        assert_eq!(
            params["resource_metadata"],
            format!("{base}/.well-known/oauth-protected-resource{path}")
        );
    }

    // A resource no route serves is invalid_target.
    let browser = Browser::for_gateway(&gw);
    let d = discover(&browser.http, &alpha_url).await.unwrap();
    let client = register_like_claude(&browser.http, &d).await.unwrap();
    let pkce = Pkce::new("nope");
    let auth = authorize_url(
        &d,
        &client.client_id,
        CLAUDE_CALLBACK,
        &pkce,
        "st-nope",
        &[("resource", &format!("{base}/nope/mcp"))],
    )
    .unwrap();
    let cb = browser.get(&auth).await.unwrap().see_other().unwrap();
    assert_eq!(
        param(&cb, "error").as_deref(),
        Some("invalid_target"),
        "{cb}"
    );
    assert!(param(&cb, "code").is_none());
}
