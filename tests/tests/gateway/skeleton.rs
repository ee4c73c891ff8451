//! End to end, the walking skeleton: real `pforte` and `mcp-service` processes on 127.0.0.1, TLS,
//! static tokens, and an rmcp client — what Claude Code with a static token does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use pforte_tests::{McpClient, Stack, eventually, whoami};
use rmcp::model::ReadResourceRequestParams;
use serde_json::{Value, json};

/// An MCP client on the gateway's `/mcp` without a credential.
fn anonymous(gw: &Stack) -> McpClient {
    McpClient::new(gw.http(), &gw.mcp_url())
}

/// A body over `max_body_bytes` is refused: 413, or the upload reset when the gateway closes
/// before the client has written it all.
fn refused_too_large(resp: reqwest::Result<reqwest::Response>) {
    match resp {
        Ok(r) => assert_eq!(r.status(), 413),
        Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
    }
}

fn challenge(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_client_over_tls_with_a_static_token() {
    let gw = Stack::start().await;
    assert!(gw.base.starts_with("https://"));
    let token = gw.create_token("laptop").await.unwrap();
    let client = gw.rmcp_client(&token, &[]).await.unwrap();

    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "whoami"), "{tools:?}");

    let me = whoami(&client).await;
    assert_eq!(me["subject"], "operator");
    assert_eq!(me["client"], "laptop");
    assert_eq!(me["authKind"], "static");
    assert_eq!(me["scopes"], json!(["mcp:read", "mcp:write"]));
    assert_eq!(me["host"], "pforte-tests");
    assert!(me["requestId"].as_str().is_some_and(|s| s.len() == 36));

    let guide = client
        .read_resource(ReadResourceRequestParams::new("werkbaum://guide"))
        .await
        .unwrap();
    let text = serde_json::to_value(&guide.contents[0]).unwrap();
    assert_eq!(text["mimeType"], "text/markdown");
    assert!(text["text"].as_str().unwrap().contains("Werkbaum"));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_identity_headers_never_reach_the_service() {
    let gw = Stack::start().await;
    let token = gw.create_token("ci").await.unwrap();
    let spoof = [
        ("x-pforte-subject", "mallory"),
        ("x-pforte-client", "evil"),
        ("x-pforte-auth-kind", "oauth"),
        ("x-pforte-scopes", "admin"),
        ("x-request-id", "spoofed-id"),
    ];
    let client = gw.rmcp_client(&token, &spoof).await.unwrap();
    let me = whoami(&client).await;
    assert_eq!(me["subject"], "operator");
    assert_eq!(me["client"], "ci");
    assert_eq!(me["authKind"], "static");
    assert_ne!(me["requestId"], "spoofed-id");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_wrong_malformed_and_revoked_tokens_get_401() {
    let gw = Stack::start().await;
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", gw.base);

    let none = anonymous(&gw).initialize().await;
    assert_eq!(none.status(), 401);
    assert_eq!(
        challenge(&none),
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );

    let wrong = gw.mcp("pft_not-a-real-token").initialize().await;
    assert_eq!(wrong.status(), 401);
    assert!(challenge(&wrong).contains("error=\"invalid_token\""));
    assert!(challenge(&wrong).contains(&metadata_url));

    let malformed = anonymous(&gw)
        .header("authorization", "Basic dXNlcjpwYXNz")
        .initialize()
        .await;
    assert_eq!(malformed.status(), 401);
    assert!(challenge(&malformed).contains("error=\"invalid_request\""));

    // A token in the query string is never looked at.
    let token = gw.create_token("revoke-me").await.unwrap();
    let query = McpClient::new(gw.http(), &format!("{}?access_token={token}", gw.mcp_url()))
        .initialize()
        .await;
    assert_eq!(query.status(), 401);

    assert_eq!(gw.mcp(&token).initialize().await.status(), 200);

    // Revocation from the CLI reaches the running gateway within a second.
    gw.token_cmd(&["revoke", "revoke-me"]).unwrap();
    let revoked_at = Instant::now();
    let refused = eventually(Duration::from_secs(1), || async {
        gw.mcp(&token).initialize().await.status() == 401
    })
    .await;
    assert!(
        refused,
        "revoked token still accepted after {:?}",
        revoked_at.elapsed()
    );
    let resp = gw.mcp(&token).initialize().await;
    assert!(challenge(&resp).contains("error=\"invalid_token\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_rfc9728_metadata_and_health() {
    let gw = Stack::start().await;
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let doc: Value = gw
            .http()
            .get(format!("{}{path}", gw.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(doc["resource"], format!("{}/mcp", gw.base));
        assert_eq!(doc["authorization_servers"], json!([gw.base]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }
    let ready = gw
        .http()
        .get(format!("{}/readyz", gw.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_precise_statuses() {
    let gw = Stack::builder().max_body_bytes(64 * 1024).start().await;
    let token = gw.create_token("t").await.unwrap();

    // Declared too large.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(100 * 1024)
    );
    // Refused before the body is read: the gateway answers 413 and may close while the client
    // still writes, so a reset of the upload is also the refusal.
    let resp = gw.mcp(&token).post_request().body(big).send().await;
    refused_too_large(resp);

    // Too large without a Content-Length (chunked).
    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = (0..100)
        .map(|_| Ok(bytes::Bytes::from(vec![b' '; 1024])))
        .collect();
    let resp = gw
        .mcp(&token)
        .post_request()
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await;
    refused_too_large(resp);

    // A browser origin that is not allowed.
    let from = |origin: &str| gw.mcp(&token).header("origin", origin);
    let resp = from("https://evil.example").initialize().await;
    assert_eq!(resp.status(), 403);
    let resp = from("https://claude.ai").initialize().await;
    assert_eq!(resp.status(), 200);

    // Unknown paths (`/admin` is the operator console now).
    let resp = gw
        .http()
        .get(format!("{}/administrator", gw.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_down_is_502_and_silent_upstream_is_504() {
    // Nothing listens on this port.
    let dead = format!("http://127.0.0.1:{}/mcp", pforte_tests::free_port());
    let gw = Stack::builder().upstream(&dead).start().await;
    let token = gw.create_token("t").await.unwrap();
    let resp = gw.mcp(&token).initialize().await;
    assert_eq!(resp.status(), 502);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "upstream_unavailable");
    let ready = gw
        .http()
        .get(format!("{}/readyz", gw.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);

    // An upstream that accepts and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = silent.accept().await {
            held.push(sock);
        }
    });
    let gw = Stack::builder()
        .upstream(&format!("http://{addr}/mcp"))
        .read_timeout_ms(300)
        .start()
        .await;
    let token = gw.create_token("t").await.unwrap();
    let resp = gw.mcp(&token).initialize().await;
    assert_eq!(resp.status(), 504);
    hold.abort();
}

/// Microseconds since `base`, carried inside events so arrival can be compared with sending.
fn micros(base: Instant) -> u64 {
    base.elapsed().as_micros() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_events_pass_through_unbuffered_and_long_streams_survive_the_read_timeout() {
    use futures::StreamExt as _;
    const EVENTS: u64 = 10;
    const GAP: Duration = Duration::from_millis(150);
    let base = Instant::now();

    // A streaming upstream in this process: one event every 150 ms, stamped with its send time.
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move || async move {
            let stream = futures::stream::unfold(0u64, move |i| async move {
                if i == EVENTS {
                    return None;
                }
                if i > 0 {
                    tokio::time::sleep(GAP).await;
                }
                let event = format!("data: {{\"seq\":{i},\"sent\":{}}}\n\n", micros(base));
                Some((Ok::<_, std::io::Error>(bytes::Bytes::from(event)), i + 1))
            });
            (
                [
                    ("content-type", "text/event-stream"),
                    ("cache-control", "no-cache"),
                ],
                axum::body::Body::from_stream(stream),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let gw = Stack::builder()
        .upstream(&format!("http://{addr}/mcp"))
        // Shorter than the whole stream (1.35 s), longer than the gap between events.
        .read_timeout_ms(600)
        .start()
        .await;
    let token = gw.create_token("sse").await.unwrap();
    let resp = gw.mcp(&token).initialize().await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut buf = String::new();
    let mut lags = Vec::new();
    while let Some(chunk) = body.next().await {
        let now = micros(base);
        buf.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let json: Value =
                serde_json::from_str(event.trim().trim_start_matches("data: ")).unwrap();
            lags.push(now.saturating_sub(json["sent"].as_u64().unwrap()));
        }
    }
    assert_eq!(lags.len() as u64, EVENTS, "the stream was cut: {lags:?}");
    let worst = lags.iter().max().copied().unwrap_or_default();
    assert!(
        worst < 50_000,
        "an event took {worst} µs to pass the gateway: {lags:?}"
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_streams_and_delete_work_through_the_gateway() {
    let gw = Stack::start().await;
    let token = gw.create_token("session").await.unwrap();
    let mut client = gw.mcp(&token);
    let init = client.initialize().await;
    assert_eq!(init.status(), 200);
    assert!(init.headers().contains_key("mcp-session-id"));
    drop(init);
    let notified = client.notify("notifications/initialized").await;
    assert!(notified.status().is_success(), "{}", notified.status());

    let stream = client.stream().await;
    assert_eq!(stream.status(), 200);
    assert!(
        stream.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    drop(stream);

    let deleted = client.delete().await;
    assert!(deleted.status().is_success(), "{}", deleted.status());
    let after = client
        .post(&json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}))
        .await;
    assert_eq!(after.status(), 404, "a deleted session must be gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_supported_protocol_revision_works_through_the_gateway() {
    use rmcp::{
        ClientLifecycleMode, ClientServiceExt as _, ServiceExt as _,
        model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion},
        transport::{
            StreamableHttpClientTransport,
            streamable_http_client::StreamableHttpClientTransportConfig,
        },
    };
    let gw = Stack::start().await;
    let token = gw.create_token("versions").await.unwrap();
    for version in [
        ProtocolVersion::V_2025_03_26,
        ProtocolVersion::V_2025_06_18,
        ProtocolVersion::V_2025_11_25,
        ProtocolVersion::V_2026_07_28,
    ] {
        let config =
            StreamableHttpClientTransportConfig::with_uri(gw.mcp_url()).auth_header(token.clone());
        let transport = StreamableHttpClientTransport::with_client(gw.http(), config);
        let mut info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("versions", "1"),
        );
        info.protocol_version = version.clone();
        let client = if version == ProtocolVersion::V_2026_07_28 {
            // No initialize: server/discover, then per-request `_meta` on every call.
            let mode = ClientLifecycleMode::Discover {
                preferred_versions: vec![version.clone()],
            };
            info.serve_with_lifecycle(transport, mode).await
        } else {
            info.serve(transport).await
        }
        .unwrap_or_else(|e| panic!("{version}: {e}"));
        let me = whoami(&client).await;
        assert_eq!(me["protocolVersion"], version.to_string(), "{me}");
        assert_eq!(me["host"], "versions", "{version}: {me}");
        assert_eq!(me["subject"], "operator");
        client.cancel().await.unwrap();
    }
}

/// An oversize body announced with `Expect: 100-continue` gets its final 413 at once, never a
/// `100 Continue` followed by a closed connection (raw HTTP/1.1, so nothing answers for us).
#[tokio::test]
async fn oversize_bodies_with_expect_100_continue_get_413_not_100() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let gw = Stack::builder().plain_http().start().await;
    let token = gw.create_token("big").await.unwrap();
    let addr = gw.base.trim_start_matches("http://").to_owned();
    for auth in [format!("Authorization: Bearer {token}\r\n"), String::new()] {
        let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\n\
             Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
            5 * 1024 * 1024
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 512];
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
            .await
            .expect("an answer without the body")
            .unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    }
}
