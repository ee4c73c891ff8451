//! The Werkbaum core through the engine (one test binary, one module per theme): the six example
//! plans give upstream's figures (`fixtures`), every case of `core/tests/*.json` (`vectors`),
//! every edit verb on random nodes (`edits`), hostile and huge plans and runaway bundles
//! (`robustness`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod edits;
mod fixtures;
mod robustness;
mod vectors;

use std::path::PathBuf;

/// The shared Werkbaum fixtures (`../shared/fixtures/werkbaum`); absent: a skip, or a failure
/// under CI.
fn fixtures_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/werkbaum");
    if dir.is_dir() {
        return Some(dir);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "fixtures folder {} is missing (required when CI=true)",
            dir.display()
        );
    }
    pforte_test_support::skip(&format!("fixtures folder {} is absent", dir.display()));
    None
}
