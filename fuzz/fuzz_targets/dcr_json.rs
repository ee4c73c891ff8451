//! Fuzzes dynamic client registration (RFC 7591): the JSON body validated
//! (`protocol::registration::validate`) and the answer built from it: no panic; every accepted
//! redirect URI is registrable, and the answer carries the client id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pforte_oauth::fuzzing::{redirect, registration};

fuzz_target!(|data: &[u8]| {
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(reg) = registration::validate(&body, &["authorization_code", "refresh_token"]) else {
        return;
    };
    assert!(!reg.redirect_uris.is_empty());
    for uri in &reg.redirect_uris {
        assert!(redirect::check_registrable(uri).is_ok());
    }
    let answer = registration::response("c1", 0, Some("s"), &reg.metadata);
    assert_eq!(answer["client_id"], "c1");
});
