#!/usr/bin/env bash
# Runs every test: builds the binaries the end-to-end tests start, then the whole workspace's
# tests. Needs cmake (pingora) and redis-server (the redis-backed suites) installed.
# A test that skips itself for a missing tool (outside CI) says so in target/skipped.txt; the
# list is printed at the end, so a skip is never silent.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p target
export PFORTE_SKIP_LOG="$PWD/target/skipped.txt"
: > "$PFORTE_SKIP_LOG"
cargo build --workspace --bins --locked
rc=0
cargo test --workspace --locked "$@" || rc=$?
if [ -s "$PFORTE_SKIP_LOG" ]; then
  echo "test.sh: $(wc -l < "$PFORTE_SKIP_LOG") test(s) skipped for a missing tool or input:"
  sort "$PFORTE_SKIP_LOG" | sed 's/^/  /'
else
  echo "test.sh: no test skipped"
fi
exit "$rc"
