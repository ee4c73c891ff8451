//! Fuzzes the token request: the form body (`Params::parse`), its grant type, the client
//! credentials from the form and a `Basic` header, and the code / refresh checks: no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pforte_oauth::fuzzing::{CodeRecord, RefreshRecord, TokenRecord};
use pforte_oauth::fuzzing::{Params, token};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // First line: an Authorization header value; the rest: the form body.
    let (authorization, body) = match text.split_once('\n') {
        Some((h, b)) => (Some(h), b),
        None => (None, text),
    };
    let params = Params::parse(body);
    let _ = token::grant_type(&params);
    let Ok(presented) = token::presented_credentials(&params, authorization) else {
        return;
    };
    let code = CodeRecord {
        code_hash: "h".into(),
        client_id: presented.client_id.clone(),
        username: "admin".into(),
        redirect_uri: "http://127.0.0.1/callback".into(),
        redirect_uri_explicit: false,
        code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM".into(),
        scopes: vec!["mcp".into()],
        resource: "https://gw.example/mcp".into(),
        family_id: "f".into(),
        issued_at: 0,
        expires_at: 100,
        used: false,
    };
    let _ = token::check_code(&code, &presented.client_id, &params, 50);
    let refresh = RefreshRecord {
        token: TokenRecord {
            token_hash: "h".into(),
            family_id: "f".into(),
            client_id: presented.client_id.clone(),
            username: "admin".into(),
            scopes: vec!["mcp".into()],
            resource: "https://gw.example/mcp".into(),
            issued_at: 0,
            expires_at: 100,
        },
        rotated_at: None,
    };
    let _ = token::check_refresh(&refresh, &presented.client_id, &params, 50);
});
