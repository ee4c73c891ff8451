//! Fuzzes the sign-in form of `POST /authorize`: the form body (`Params::parse`), its fields
//! (`authorize::login_fields`) and the authorization request it carries: no panic; the username
//! comes back trimmed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pforte_oauth::fuzzing::Params;
use pforte_oauth::fuzzing::authorize;

fuzz_target!(|data: &[u8]| {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    let form = Params::parse(body);
    let (username, _password) = authorize::login_fields(&form);
    assert_eq!(username, username.trim());
    let _ = form.single("csrf");
    let _ = form.single("step");
    if let Ok(Some(request)) = form.single("request") {
        let _ = authorize::client_id(&Params::parse(request));
    }
});
