//! Benchmark: direct vs gateway request rates.
fn main() {}
