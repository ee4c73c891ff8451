//! `/metrics` end to end: after a scripted flow (a 401, a static-token `tools/call`, a failed
//! OAuth login, a 429) each relevant series has moved; the open-SSE gauge returns to 0 when the
//! client drops its stream; `metrics_listen` serves the same families; the text parses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeMap, time::Duration};

use pforte_tests::{
    Budget, Limits, Stack, eventually, free_port,
    oauth::{
        Browser, CLAUDE_CALLBACK, Pkce, access_token, authorize_url, discover, mcp_status,
        register_like_claude,
    },
};
use serde_json::json;

/// Every sample of an exposition: `name{labels}` → value. Panics on a line that is not
/// `name{labels} value` (or `name value`).
fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("value of {line:?}"));
        let name = series.split('{').next().unwrap();
        assert!(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':'),
            "name of {line:?}"
        );
        if let Some(labels) = series.strip_prefix(name) {
            assert!(
                labels.is_empty() || (labels.starts_with('{') && labels.ends_with('}')),
                "labels of {line:?}"
            );
        }
        samples.insert(series.to_owned(), value);
    }
    samples
}

/// The metric families named by `# TYPE` lines.
fn families(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

struct Scraper {
    http: reqwest::Client,
    url: String,
}

impl Scraper {
    async fn text(&self) -> String {
        let resp = self.http.get(&self.url).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain; version=0.0.4")
        );
        resp.text().await.unwrap()
    }
    async fn samples(&self) -> BTreeMap<String, f64> {
        parse(&self.text().await)
    }
    /// One series' value (absent: 0).
    async fn value(&self, series: &str) -> f64 {
        self.samples().await.get(series).copied().unwrap_or(0.0)
    }
}

fn get(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(0.0)
}

/// Scrapes until each series has grown past `before` (a request is counted when it ends, just
/// after its answer went out) and returns that scrape; fails naming the series that did not.
async fn moved(
    scrape: &Scraper,
    before: &BTreeMap<String, f64>,
    series: &[&str],
) -> BTreeMap<String, f64> {
    let grown = |after: &BTreeMap<String, f64>| {
        series
            .iter()
            .filter(|s| get(after, s) <= get(before, s))
            .map(|s| format!("{s}: {} → {}", get(before, s), get(after, s)))
            .collect::<Vec<_>>()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let after = scrape.samples().await;
        let stuck = grown(&after);
        if stuck.is_empty() {
            return after;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "did not move:\n{}",
            stuck.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

const OPEN_STREAMS: &str = "pforte_sse_streams_open";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_with_a_scripted_flow_and_metrics_listen_serves_them() {
    let metrics_port = free_port();
    let gw = Stack::builder()
        .metrics_listen(&format!("127.0.0.1:{metrics_port}"))
        // Eight requests per principal, then 429 (create_token's polling spends failed
        // authentications: the unauthenticated budget stays wide).
        .limits(
            Limits::default()
                .mcp(Budget::new(1, 3600, 8))
                .unauthenticated(Budget::new(600, 60, 200)),
        )
        .start()
        .await;
    let http = gw.http();
    let scrape = Scraper {
        http: http.clone(),
        url: format!("{}/metrics", gw.base),
    };
    let token = gw.create_token("metrics").await.unwrap();
    gw.add_user("alice", "correct horse battery").unwrap();
    let before = scrape.samples().await;

    // 1. A 401: no token.
    let resp = http.get(gw.mcp_url()).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let after = moved(
        &scrape,
        &before,
        &[
            "pforte_http_requests_total{endpoint=\"mcp\",route=\"mcp\",method=\"GET\",status=\"4xx\"}",
            "pforte_auth_total{kind=\"none\",reason=\"missing\"}",
            "pforte_http_request_duration_seconds_count{endpoint=\"mcp\",route=\"mcp\"}",
        ],
    )
    .await;
    let before = after;

    // 2. A 200: a static token's tools/call, through a session, then its event stream.
    let mut client = gw.mcp(&token).client_name("metrics-test");
    let init = client.initialize().await;
    assert_eq!(init.status(), 200);
    let session = client.session().expect("a session id").to_owned();
    init.bytes().await.unwrap();
    let note = client.notify("notifications/initialized").await;
    assert!(note.status().is_success(), "{}", note.status());
    let call = client.call_tool("whoami", json!({})).await;
    assert_eq!(call.status(), 200);
    let body = call.text().await.unwrap();
    assert!(body.contains("operator"), "{body}");
    let after = moved(
        &scrape,
        &before,
        &[
            "pforte_http_requests_total{endpoint=\"mcp\",route=\"mcp\",method=\"POST\",status=\"2xx\"}",
            "pforte_auth_total{kind=\"static\",reason=\"ok\"}",
            "pforte_tool_calls_total{route=\"mcp\",tool=\"whoami\",decision=\"allowed\"}",
            "pforte_upstream_first_byte_seconds_count{route=\"mcp\"}",
        ],
    )
    .await;
    assert!(
        !after
            .keys()
            .any(|k| k.contains(&session) || k.contains("operator")),
        "a session id or subject became a label"
    );
    // The live series: the session just opened, the route's instance up, the process.
    assert!(get(&after, "pforte_sessions_live") >= 1.0, "{after:?}");
    let up: Vec<f64> = after
        .iter()
        .filter(|(k, _)| {
            k.starts_with("pforte_upstream_up{route=\"mcp\",upstream=\"http://127.0.0.1:")
        })
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(up, [1.0], "{after:?}");
    assert!(get(&after, "process_resident_memory_bytes") > 0.0);
    assert!(get(&after, "process_open_fds") > 0.0);
    assert!(
        eventually(Duration::from_secs(5), || async {
            scrape.value(OPEN_STREAMS).await == 0.0
        })
        .await,
        "the POST answers' streams did not end"
    );
    let before = after;

    // The server-to-client stream stays open until the client lets go.
    let stream = client.stream().await;
    assert_eq!(stream.status(), 200);
    assert!(
        stream.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            scrape.value(OPEN_STREAMS).await == 1.0
        })
        .await,
        "the open stream is not counted"
    );
    drop(stream);
    assert!(
        eventually(Duration::from_secs(10), || async {
            scrape.value(OPEN_STREAMS).await == 0.0
        })
        .await,
        "the gauge did not return to 0 after the client dropped its stream"
    );

    // 3. A failed OAuth login: the wrong password on the login form.
    let browser = Browser::for_gateway(&gw);
    let d = discover(&browser.http, &gw.mcp_url()).await.unwrap();
    let client = register_like_claude(&browser.http, &d).await.unwrap();
    let pkce = Pkce::new("metrics");
    let auth = authorize_url(
        &d,
        &client.client_id,
        CLAUDE_CALLBACK,
        &pkce,
        "state",
        &[("resource", &d.resource), ("scope", "mcp:read")],
    )
    .unwrap();
    let page = browser.get(&auth).await.unwrap();
    assert_eq!(page.status, 200);
    let mut login = page.form().unwrap();
    login.set("username", "alice").unwrap();
    login.set("password", "not the password").unwrap();
    let refused = browser.submit(&login, None).await.unwrap();
    assert_eq!(refused.status, 401, "{}", refused.body);
    let after = moved(
        &scrape,
        &before,
        &[
            "pforte_oauth_events_total{event=\"registration\"}",
            "pforte_oauth_events_total{event=\"login_failed\"}",
            "pforte_http_requests_total{endpoint=\"oauth\",route=\"\",method=\"POST\",status=\"4xx\"}",
            "pforte_http_requests_total{endpoint=\"oauth\",route=\"\",method=\"GET\",status=\"2xx\"}",
            "pforte_http_requests_total{endpoint=\"well_known\",route=\"mcp\",method=\"GET\",status=\"2xx\"}",
        ],
    )
    .await;
    assert_eq!(
        get(&after, "pforte_oauth_events_total{event=\"login_ok\"}"),
        get(&before, "pforte_oauth_events_total{event=\"login_ok\"}")
    );
    let before = after;

    // The right password: a login, a code, tokens; two validations, the second from the cache.
    let access = access_token(&gw, "alice", "correct horse battery", "mcp:read")
        .await
        .unwrap();
    assert_eq!(mcp_status(&http, &gw.mcp_url(), &access).await, 200);
    assert_eq!(mcp_status(&http, &gw.mcp_url(), &access).await, 200);
    let after = moved(
        &scrape,
        &before,
        &[
            "pforte_oauth_events_total{event=\"login_ok\"}",
            "pforte_oauth_events_total{event=\"code_issued\"}",
            "pforte_oauth_events_total{event=\"tokens_issued\"}",
            "pforte_auth_total{kind=\"oauth\",reason=\"ok\"}",
            "pforte_token_validation_cache_total{result=\"miss\"}",
            "pforte_token_validation_cache_total{result=\"hit\"}",
        ],
    )
    .await;
    assert!(
        !after.keys().any(|k| k.contains("alice")),
        "a user became a label"
    );
    let before = after;

    // 4. A 429: the static token past its per-principal budget.
    let mut statuses = Vec::new();
    while statuses.last() != Some(&429) && statuses.len() < 10 {
        let resp = http
            .get(gw.mcp_url())
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    let after = moved(
        &scrape,
        &before,
        &[
            "pforte_ratelimit_refusals_total",
            "pforte_http_requests_total{endpoint=\"mcp\",route=\"mcp\",method=\"GET\",status=\"4xx\"}",
            "pforte_auth_total{kind=\"static\",reason=\"ok\"}",
        ],
    )
    .await;
    assert_eq!(get(&after, "pforte_ratelimit_degraded"), 0.0);

    // metrics_listen: the same families, /metrics only.
    let plain = reqwest::Client::new();
    let remote = Scraper {
        http: plain.clone(),
        url: format!("http://127.0.0.1:{metrics_port}/metrics"),
    };
    let remote_text = remote.text().await;
    let local_text = scrape.text().await;
    assert_eq!(families(&remote_text), families(&local_text));
    let remote_samples = parse(&remote_text);
    assert_eq!(
        get(
            &remote_samples,
            "pforte_oauth_events_total{event=\"login_failed\"}"
        ),
        get(&after, "pforte_oauth_events_total{event=\"login_failed\"}")
    );
    for family in [
        "pforte_http_requests_total",
        "pforte_http_request_duration_seconds",
        "pforte_upstream_first_byte_seconds",
        "pforte_auth_total",
        "pforte_oauth_events_total",
        "pforte_token_validation_cache_total",
        "pforte_upstream_errors_total",
        "pforte_sse_streams_open",
        "pforte_tool_calls_total",
        "pforte_ratelimit_degraded",
        "pforte_ratelimit_fallback_decisions_total",
        "pforte_ratelimit_refusals_total",
        "pforte_build_info",
        "pforte_upstream_up",
        "pforte_sessions_live",
        "pforte_stdio_children",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(
            families(&remote_text).iter().any(|f| f == family),
            "{family} missing from {remote_text}"
        );
    }
    let other = plain
        .get(format!("http://127.0.0.1:{metrics_port}/mcp"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_counts_as_a_connect_error() {
    let dead = free_port();
    let gw = Stack::builder()
        .upstream(&format!("http://127.0.0.1:{dead}/mcp"))
        .start()
        .await;
    let token = gw.create_token("dead").await.unwrap();
    let scrape = Scraper {
        http: gw.http(),
        url: format!("{}/metrics", gw.base),
    };
    let before = scrape.samples().await;
    let resp = gw
        .http()
        .get(gw.mcp_url())
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    let after = moved(
        &scrape,
        &before,
        &[
            "pforte_upstream_errors_total{route=\"mcp\",kind=\"connect\"}",
            "pforte_http_requests_total{endpoint=\"mcp\",route=\"mcp\",method=\"GET\",status=\"5xx\"}",
        ],
    )
    .await;
    // The route's one instance is down, by the URL as configured.
    let up =
        format!("pforte_upstream_up{{route=\"mcp\",upstream=\"http://127.0.0.1:{dead}/mcp\"}}");
    assert_eq!(after.get(&up), Some(&0.0), "{up} in {after:?}");
}

/// Every metric name an expression uses (`pforte_*`, `process_*`).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let word = (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_')
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
        if word {
            let end = bytes[i..]
                .iter()
                .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
                .map_or(bytes.len(), |n| i + n);
            let name = &expr[i..end];
            if name.starts_with("pforte_") || name.starts_with("process_") {
                names.push(name.to_owned());
            }
            i = end;
        } else {
            i += 1;
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_uses_only_exported_metrics() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/grafana-dashboard.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect();
    assert!(exprs.len() >= 15, "{exprs:?}");

    let gw = Stack::start().await;
    let token = gw.create_token("t").await.unwrap();
    assert_eq!(gw.mcp(&token).initialize().await.status(), 200);
    let scrape = Scraper {
        http: gw.http(),
        url: format!("{}/metrics", gw.base),
    };
    let text = scrape.text().await;
    // What the gateway exports: every sample's name and every family's.
    let mut exported: Vec<String> = parse(&text)
        .keys()
        .map(|k| k.split('{').next().unwrap().to_owned())
        .collect();
    exported.extend(families(&text));
    let mut used = 0;
    for expr in &exprs {
        for name in metric_names(expr) {
            assert!(
                exported.contains(&name),
                "the dashboard's {name} (in {expr}) is not exported:\n{text}"
            );
            used += 1;
        }
    }
    assert!(used >= exprs.len(), "every query names a metric");
    // Every label a query groups by is one the gateway sets on that metric, or one Prometheus
    // adds itself (`instance`, `job`: the scraped gateway) — a gateway label called `instance`
    // would collide with Prometheus's own.
    let samples = parse(&text);
    for expr in &exprs {
        let Some(rest) = expr.split(" by (").nth(1) else {
            continue;
        };
        let grouped: Vec<&str> = rest
            .split(')')
            .next()
            .unwrap()
            .split(',')
            .map(str::trim)
            .collect();
        for name in metric_names(expr) {
            let own: Vec<String> = samples
                .keys()
                .filter(|k| k.split('{').next() == Some(name.as_str()))
                .flat_map(|k| {
                    k.split_once('{')
                        .map(|(_, l)| l.trim_end_matches('}').to_owned())
                        .unwrap_or_default()
                        .split(',')
                        .filter_map(|p| p.split_once('=').map(|(k, _)| k.to_owned()))
                        .collect::<Vec<_>>()
                })
                .collect();
            if own.is_empty() {
                continue; // no sample of it in this run
            }
            assert!(
                !own.iter().any(|l| l == "instance"),
                "{name} sets `instance` itself"
            );
            for label in &grouped {
                assert!(
                    ["instance", "job", "le"].contains(label) || own.iter().any(|l| l == label),
                    "the dashboard groups {name} by {label:?}, which it does not carry ({own:?}): {expr}"
                );
            }
        }
    }
    // The families an SRE reads first are on the dashboard.
    for needed in [
        "pforte_http_requests_total",
        "pforte_http_request_duration_seconds_bucket",
        "pforte_upstream_up",
        "pforte_sessions_live",
        "pforte_stdio_children",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
    ] {
        assert!(
            exprs
                .iter()
                .any(|e| metric_names(e).iter().any(|n| n == needed)),
            "{needed} is on no panel"
        );
    }
}
