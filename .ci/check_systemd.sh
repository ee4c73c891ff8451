#!/usr/bin/env bash
# Checks deploy/pforte.service with `systemd-analyze verify` when it is installed: the unit with
# its binary pointed at the built one (verify requires an executable); any complaint fails,
# since verify reports a bad value as a warning with exit status 0.
set -euo pipefail
cd "$(dirname "$0")/.."
unit="${1:-deploy/pforte.service}"
if ! command -v systemd-analyze > /dev/null; then
  echo "systemd-analyze not installed: $unit not verified"
  exit 0
fi
bin="$PWD/target/debug/pforte"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
sed "s#/usr/local/bin/pforte#$bin#g" "$unit" > "$tmp/pforte.service"
if ! out="$(systemd-analyze verify "$tmp/pforte.service" 2>&1)" || [ -n "$out" ]; then
  echo "$unit: systemd-analyze verify:" >&2
  echo "$out" >&2
  exit 1
fi
echo "$unit: systemd-analyze verify found nothing to report"
