//! Fuzzes the `Authorization` header parser (`pforte::auth::bearer_token`): no panic, and a
//! token it accepts is token68 and parses back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pforte::for_tests::bearer_token;

fuzz_target!(|data: &[u8]| {
    // One header value, or (after a NUL) two: more than one must be refused.
    let values: Vec<&[u8]> = data.splitn(2, |b| *b == 0).collect();
    let result = bearer_token(values.iter().copied());
    if values.len() > 1 {
        assert!(result.is_err(), "two Authorization headers accepted");
    }
    if let Ok(Some(token)) = result {
        assert!(!token.is_empty() && token.is_ascii());
        assert!(!token.contains(char::is_whitespace));
        let again = format!("Bearer {token}");
        assert_eq!(bearer_token([again.as_bytes()]).ok().flatten(), Some(token));
    }
});
