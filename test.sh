#!/usr/bin/env bash
# Runs every test: installs the tools the tests use (tests/prepare.sh), builds the binaries the
# end-to-end tests start, then runs the whole workspace's tests.
# A test that skips itself for a missing tool (outside CI) says so in target/skipped.txt; the
# list is printed at the end, so a skip is never silent.
# The end-to-end tests are five test binaries by theme (tests/tests/{gateway,oauth,stdio,state,tls}/,
# one module per file); each runs its tests in parallel threads like any test binary. One theme:
# ./test.sh --test stdio; one test: ./test.sh --test gateway skeleton::rmcp_client_over_tls.
set -euo pipefail
cd "$(dirname "$0")"
# The tools the tests use, installed when missing (tests/prepare.sh). Where that cannot be done
# (no root, no network) the tests that need them skip and are listed below; under CI=true it
# is a failure.
if ! tests/prepare.sh; then
  if [ "${CI:-}" = "true" ]; then
    echo "test.sh: tests/prepare.sh failed" >&2
    exit 1
  fi
  echo "test.sh: could not install every test tool; the tests that need one will skip" >&2
fi
# As root, the gateway runs `command` routes as `nobody` (stdio_user), and the tests' stdio
# servers live in this checkout: every directory above it must let other users through (a clone
# under /root, mode 0700, does not). CI's machine is its own: there the bit is added.
if [ "$(id -u)" = 0 ]; then
  closed=()
  d="$PWD"
  while :; do
    [ $(( 0$(stat -c %a "$d") & 1 )) -eq 1 ] || closed+=("$d")
    [ "$d" = / ] && break
    d="$(dirname "$d")"
  done
  if [ ${#closed[@]} -gt 0 ]; then
    if [ "${CI:-}" = "true" ]; then
      echo "test.sh: letting other users through ${closed[*]} (o+x), so nobody reaches the checkout" >&2
      chmod o+x "${closed[@]}"
    else
      echo "test.sh: as root the tests run stdio servers as nobody, who cannot pass ${closed[*]};" >&2
      echo "  clone somewhere others may pass (e.g. /srv), or: chmod o+x ${closed[*]}" >&2
      exit 1
    fi
  fi
fi
mkdir -p target
export PFORTE_SKIP_LOG="$PWD/target/skipped.txt"
: > "$PFORTE_SKIP_LOG"
# The binaries the tests start; the benchmarks (bench/, pforte-bench) are no test's, so not built.
cargo build --workspace --exclude pforte-bench --bins --locked
rc=0
cargo test --workspace --locked --no-fail-fast "$@" || rc=$?
if [ -s "$PFORTE_SKIP_LOG" ]; then
  echo "test.sh: $(wc -l < "$PFORTE_SKIP_LOG") test(s) skipped for a missing tool or input:"
  sort "$PFORTE_SKIP_LOG" | sed 's/^/  /'
else
  echo "test.sh: no test skipped"
fi
exit "$rc"
