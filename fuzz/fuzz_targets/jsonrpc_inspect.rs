//! Fuzzes the JSON-RPC request inspection of `POST /mcp` bodies (`pforte::mcp::inspect`) and
//! the `Mcp-Method`/`Mcp-Name` header decoding: no panic; an inspected id is JSON text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pforte::for_tests::{Kind, decode_header, inspect};

fuzz_target!(|data: &[u8]| {
    if let Ok(message) = inspect(data) {
        assert!(serde_json::from_str::<serde_json::Value>(&message.id).is_ok());
        // A response has no method; a request may name an empty one (JSON-RPC allows any
        // string), so the kind, not the method, says which it is.
        if message.kind == Kind::Response {
            assert!(message.method.is_empty());
        }
        if message.tool().is_some() {
            assert_eq!(message.method, "tools/call");
        }
    }
    let _ = decode_header(data);
});
