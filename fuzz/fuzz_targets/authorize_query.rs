//! Fuzzes the authorization request: the query string parsed (`Params::parse`) and validated
//! for a known client (`protocol::authorize`), and the redirect built from it: no panic; the
//! parameters survive re-encoding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pforte_oauth::OAuthConfig;
use pforte_oauth::fuzzing::AuthMethod;
use pforte_oauth::fuzzing::authorize::{self, AuthorizeFailure};
use pforte_oauth::fuzzing::{Client, ClientKind, Params};

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    let params = Params::parse(query);
    assert_eq!(Params::parse(&params.encode()), params);
    let Ok(cfg) = OAuthConfig::new("https://gw.example") else {
        return;
    };
    let client_id = match authorize::client_id(&params) {
        Ok(id) => id.to_owned(),
        Err(_) => "c1".to_owned(),
    };
    let client = Client {
        client_id,
        name: None,
        redirect_uris: vec![
            "https://app.example/callback".into(),
            "http://127.0.0.1/callback".into(),
        ],
        auth_method: AuthMethod::None,
        secret_hash: None,
        kind: ClientKind::Registered,
    };
    match authorize::validate(&params, &client, &cfg) {
        Ok(req) => {
            let location =
                authorize::code_location(&req.redirect_uri, "code", req.state.as_deref(), "iss");
            assert!(url::Url::parse(&location).is_ok());
        }
        Err(AuthorizeFailure::Redirect { location, .. }) => {
            assert!(url::Url::parse(&location).is_ok());
        }
        Err(AuthorizeFailure::ErrorPage(_)) => {}
    }
});
