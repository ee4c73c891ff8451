#!/usr/bin/env bash
# build.sh: the quick start's first command. Checks what building Pforte needs (a Rust toolchain,
# a C compiler, cmake for pingora's zlib), installs the missing system packages on Debian/Ubuntu
# (as root or with sudo), then builds `pforte` and `mcp-service` in release mode.
#   ./build.sh              check/install, then cargo build --release
#   ./build.sh --test       also install the packages ./test.sh needs (redis-server, chromium, git,
#                           pebble: a real ACME CA with pebble-challtestsrv for the TLS tests)
#   ./build.sh --deps-only  check/install only (.ci/run uses this before its own builds)
set -euo pipefail
cd "$(dirname "$0")"

test_deps=false
build=true
for arg in "$@"; do
  case "$arg" in
    --test) test_deps=true ;;
    --deps-only) build=false ;;
    *) echo "build.sh: unknown argument $arg (use --test, --deps-only)" >&2; exit 64 ;;
  esac
done

if ! command -v cargo >/dev/null; then
  echo "build.sh: no Rust toolchain (cargo) on PATH. Install it with" >&2
  echo "  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh" >&2
  echo "then open a new shell (or 'source ~/.cargo/env') and run ./build.sh again." >&2
  exit 1
fi

need=()
command -v cc >/dev/null || need+=(build-essential)
command -v cmake >/dev/null || need+=(cmake)
if $test_deps; then
  command -v redis-server >/dev/null || need+=(redis-server)
  command -v chromium >/dev/null || need+=(chromium)
  command -v git >/dev/null || need+=(git)
  command -v pebble-challtestsrv >/dev/null || need+=(pebble)
fi
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "build.sh: missing ${need[*]}; install them with your package manager and run again." >&2
    exit 1
  fi
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then
      sudo=(sudo)
    else
      echo "build.sh: missing ${need[*]}; as root run: apt-get install -y ${need[*]}" >&2
      exit 1
    fi
  fi
  echo "build.sh: installing ${need[*]}"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if $build; then
  cargo build --release --locked -p pforte -p mcp-service
  echo "build.sh: built target/release/pforte and target/release/mcp-service"
fi
