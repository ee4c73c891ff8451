"""Early answers as the Python side reads them: httpx2 (the MCP Python SDK's HTTP client) and
the SDK's own session against a gateway whose `max_body_bytes` is below BIG_BYTES.

1. httpx2 on one kept-alive client POSTs a tools/call of 32 KiB without a token, then one of
   BIG_BYTES with TOKEN: it must read the 401 and the 413 (not a reset).
2. The SDK opens a session with TOKEN, calls `whoami` with an argument of BIG_BYTES (refused
   with 413), then calls `whoami` again in the same session: the session must survive.

Prints one JSON object on stdout: {"httpx": [401, 413], "big": "...", "after": true}.

Usage: python early_answers.py MCP_URL TOKEN BIG_BYTES
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url, token, big = sys.argv[1], sys.argv[2], int(sys.argv[3])
    out = {}
    def call(size: int) -> str:
        return json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "whoami", "arguments": {"pad": "x" * size}},
            }
        )

    statuses = []
    async with httpx2.AsyncClient(timeout=30) as http:
        for auth in (None, token):
            headers = {
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
            }
            if auth:
                headers["authorization"] = f"Bearer {auth}"
            try:
                body = call(big if auth else 32 * 1024)
                response = await http.post(url, content=body, headers=headers)
                statuses.append(response.status_code)
            except Exception as e:  # noqa: BLE001 - the test reports what the client saw
                statuses.append(f"{type(e).__name__}: {e}")
    out["httpx"] = statuses
    headers = {"authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                try:
                    await session.call_tool("whoami", {"pad": "x" * big})
                    out["big"] = "answered"
                except Exception as e:  # noqa: BLE001
                    out["big"] = f"{type(e).__name__}: {str(e)[:200]}"
                result = await session.call_tool("whoami", {})
                out["after"] = not result.is_error
    print(json.dumps(out))


asyncio.run(main())
