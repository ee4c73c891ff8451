#!/usr/bin/env bash
# Runs every test: builds the binaries the end-to-end tests start, then the whole workspace's
# tests. Needs cmake (pingora) and redis-server (the redis-backed suites) installed.
set -euo pipefail
cd "$(dirname "$0")"
cargo build --workspace --bins --locked
cargo test --workspace --locked "$@"
