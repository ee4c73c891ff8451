//! Fuzzes the HTTP/1 head reader's decision (`pforte::runtime::http1::classify`, through
//! `classify_head`): no panic; a head sent to the relay is a whole `GET` of HTTP/1.1 without a
//! body, an upgrade or an `Expect`; a head is never decided before its bytes make one; and more
//! bytes never take back a whole head's decision.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pforte::for_tests::classify_head;

fuzz_target!(|data: &[u8]| {
    let verdict = classify_head(data);
    if verdict == "relay" {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        assert!(matches!(req.parse(data), Ok(httparse::Status::Complete(_))));
        assert_eq!(req.method, Some("GET"));
        assert_eq!(req.version, Some(1));
        for h in req.headers.iter() {
            let name = h.name.to_ascii_lowercase();
            assert!(
                !matches!(name.as_str(), "transfer-encoding" | "upgrade" | "expect"),
                "relayed with {name}"
            );
            if name == "content-length" {
                assert_eq!(h.value, b"0");
            }
        }
    }
    // Every prefix: partial, or the same decision as the whole once it is decided.
    if verdict == "relay" || verdict == "proxy" {
        if let Some(cut) = data.len().checked_sub(1) {
            let before = classify_head(&data[..cut]);
            assert!(
                before == "partial" || before == "proxy" || before == verdict,
                "{before} then {verdict}"
            );
        }
    }
});
