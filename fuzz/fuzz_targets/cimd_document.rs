//! Fuzzes client ID metadata documents: the `client_id` URL (`parse_client_id_url`), the
//! fetched document (`validate_document`) and its `Cache-Control` (`cache_lifetime`): no panic;
//! an accepted document names itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pforte_oauth::fuzzing::cimd;

const CLIENT_ID: &str = "https://app.example/client.json";

fuzz_target!(|data: &[u8]| {
    let named = serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .and_then(|v| {
            v.get("client_id")
                .and_then(|c| c.as_str())
                .map(str::to_owned)
        });
    for client_id in [Some(CLIENT_ID.to_owned()), named].into_iter().flatten() {
        let _ = cimd::is_document_client_id(&client_id);
        let _ = cimd::parse_client_id_url(&client_id);
        if let Ok(client) = cimd::validate_document(&client_id, data, &["authorization_code", "refresh_token"]) {
            assert_eq!(client.client_id, client_id);
            assert!(!client.redirect_uris.is_empty());
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = cimd::cache_lifetime(Some(text), &Default::default());
    }
});
