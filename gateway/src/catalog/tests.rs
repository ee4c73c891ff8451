//! Tests of the tool catalog: the refresh throttle, reading pages and answers, an empty catalog.

use super::*;
use super::{
    answer::{answer_server_request, client_capabilities},
    follow::is_list_changed,
};

#[test]
fn miss_refresh_throttle() {
    let five = Duration::from_secs(5);
    assert!(miss_may_refresh(None, 0, five));
    assert!(!miss_may_refresh(Some(1_000), 5_999, five));
    assert!(miss_may_refresh(Some(1_000), 6_000, five));
    // A clock that went backwards does not refresh.
    assert!(!miss_may_refresh(Some(9_000), 1_000, five));
}

#[test]
fn pages_take_name_and_read_only_hint() {
    let mut tools = Snapshot::default();
    let page = json!({
        "tools": [
            { "name": "r", "annotations": { "readOnlyHint": true } },
            { "name": "w", "annotations": { "readOnlyHint": false } },
            { "name": "plain" },
            { "name": "odd", "annotations": { "readOnlyHint": "yes" } },
            { "title": "nameless" },
        ],
        "nextCursor": "c2",
    });
    assert_eq!(
        read_tools_page(&page, &mut tools).unwrap().as_deref(),
        Some("c2")
    );
    assert_eq!(tools.len(), 4);
    let tools_map = &tools.tools;
    assert_eq!(lookup(tools_map.get("r").copied()), Lookup::ReadOnly);
    assert_eq!(lookup(tools_map.get("w").copied()), Lookup::Writes);
    assert_eq!(lookup(tools_map.get("plain").copied()), Lookup::Writes);
    assert_eq!(lookup(tools_map.get("odd").copied()), Lookup::Writes);
    assert_eq!(lookup(tools_map.get("nope").copied()), Lookup::Unknown);
    assert!(tools.params.is_empty());
    let last = json!({ "tools": [] });
    assert_eq!(read_tools_page(&last, &mut tools).unwrap(), None);
    assert!(read_tools_page(&json!({}), &mut tools).is_err());
}

#[test]
fn results_and_errors() {
    let ok = json!({ "jsonrpc": "2.0", "id": 1, "result": { "a": 1 } });
    assert_eq!(into_result(ok).unwrap(), json!({ "a": 1 }));
    let err = json!({ "jsonrpc": "2.0", "id": 1, "error": { "code": -32601, "message": "m" } });
    assert!(matches!(
        into_result(err),
        Err(CatalogError::JsonRpc { code: -32601, .. })
    ));
    assert!(is_list_changed(
        br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#
    ));
    assert!(!is_list_changed(b""));
}

#[tokio::test]
async fn empty_catalog_answers_unknown_within_the_bound() {
    // Nothing listens on this port: the refresh fails fast, the answer is Unknown.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let opts = CatalogOptions {
        miss_wait: Duration::from_millis(500),
        ..CatalogOptions::default()
    };
    let catalog = Arc::new(Catalog::new(format!("http://127.0.0.1:{port}/mcp"), opts).unwrap());
    assert_eq!(catalog.tool("x"), Lookup::Unknown);
    let started = Instant::now();
    assert_eq!(catalog.tool_or_refresh("x").await, Lookup::Unknown);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(catalog.generation(), 0);
}

#[test]
fn the_servers_requests_get_minimal_answers() {
    let ask = |method: &str| json!({ "jsonrpc": "2.0", "id": 7, "method": method });
    let roots = answer_server_request(&ask("roots/list")).unwrap();
    assert_eq!(
        roots,
        json!({ "jsonrpc": "2.0", "id": 7, "result": { "roots": [] } })
    );
    assert_eq!(
        answer_server_request(&ask("ping")).unwrap()["result"],
        json!({})
    );
    assert_eq!(
        answer_server_request(&ask("elicitation/create")).unwrap()["result"]["action"],
        "decline"
    );
    assert_eq!(
        answer_server_request(&ask("sampling/createMessage")).unwrap()["error"]["code"],
        -1
    );
    assert_eq!(
        answer_server_request(&ask("tools/call")).unwrap()["error"]["code"],
        -32601
    );
    // Notifications and answers are no requests.
    let note = json!({ "jsonrpc": "2.0", "method": "notifications/tools/list_changed" });
    assert_eq!(answer_server_request(&note), None);
    assert_eq!(
        answer_server_request(&json!({ "jsonrpc": "2.0", "id": 1, "result": {} })),
        None
    );
}

#[test]
fn the_catalog_declares_roots_sampling_and_elicitation() {
    let caps = client_capabilities();
    for capability in ["roots", "sampling", "elicitation"] {
        assert!(caps.get(capability).is_some(), "{capability}: {caps}");
    }
}

/// A lender whose people are fixed and whose credentials are the person's name as a key.
#[derive(Debug)]
struct Fixed(Vec<&'static str>);

#[async_trait]
impl Lender for Fixed {
    async fn people(&self) -> Result<Vec<String>, String> {
        Ok(self.0.iter().map(|p| (*p).to_owned()).collect())
    }
    async fn headers(
        &self,
        person: &str,
    ) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, String> {
        let value = http::HeaderValue::from_str(person).map_err(|e| e.to_string())?;
        Ok(vec![(http::HeaderName::from_static("x-api-key"), value)])
    }
}

#[tokio::test]
async fn without_anyone_connected_the_catalog_waits_and_says_so() {
    let opts = CatalogOptions {
        lender: Some(Arc::new(Fixed(Vec::new()))),
        ..CatalogOptions::default()
    };
    let catalog = Catalog::new("http://127.0.0.1:9/mcp".into(), opts).unwrap();
    assert!(catalog.awaits_person());
    assert!(matches!(
        catalog.refresh().await,
        Err(CatalogError::NoLender)
    ));
    assert!(catalog.awaits_person());
    assert!(catalog.is_empty());
}
