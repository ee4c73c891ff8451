//! Fuzzes the gateway's config: TOML text parsed (`GatewayConfig::parse`) and validated
//! (`GatewayConfig::validate`), as `pforte check` and `pforte serve` do: no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pforte::for_tests::GatewayConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cfg) = GatewayConfig::parse(text, "fuzz.toml") {
        let _ = cfg.validate();
    }
});
