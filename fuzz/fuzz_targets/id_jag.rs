//! Fuzzes the ID-JAG checks of the `jwt-bearer` grant: the JOSE `typ` comparison and the claim
//! checks on any JSON (the signature is `jsonwebtoken`'s; what it hands over is arbitrary JSON
//! an identity provider signed): no panic, and nothing accepted that names another audience.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pforte_oauth::fuzzing::id_jag::{Expected, check, typ_ok};
use pforte_oauth::{EnterpriseIdp, ResourceEntry};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = typ_ok(Some(text));
    let Ok(claims) = serde_json::from_str::<serde_json::Value>(text) else {
        return;
    };
    let idp = EnterpriseIdp {
        issuer: "https://idp.example".into(),
        ..EnterpriseIdp::default()
    };
    let resources = [ResourceEntry {
        url: "https://gw.example/mcp".into(),
        name: "mcp".into(),
        title: None,
    }];
    let cap = ["mcp:read".to_owned(), "mcp:write".to_owned()];
    let expected = Expected {
        idp: &idp,
        audience: "https://gw.example",
        client_id: "c1",
        resources: &resources,
        requested_resources: &[],
        requested_scope: None,
        scope_cap: &cap,
        now: 1_800_000_000,
    };
    if let Ok(terms) = check(&claims, &expected) {
        assert_eq!(terms.issuer, "https://idp.example");
        assert!(!terms.scopes.is_empty());
    }
});
