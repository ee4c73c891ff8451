"""One tool call with the official MCP Python SDK (`mcp`) through Pforte, for approvals.

With `--elicit` the client session has an elicitation callback, so the SDK declares
`capabilities.elicitation` with `form` and `url` on initialize; without it, none. The call is
made once; what came back is printed as one JSON object on stdout: the capabilities the SDK
declared, and either the tool result (`is_error`, the text, `_meta`) or the JSON-RPC error
(`code`, `message`, `data`) — a held call's link is in one of them.

Usage: python approval_client.py MCP_URL TOKEN CA_FILE TOOL ARGS_JSON [--elicit]
"""

from __future__ import annotations

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


async def elicit(context, params):  # noqa: ANN001 - the SDK's callback shape
    """Declares elicitation; a held call's link comes back as an error, not a request."""
    raise RuntimeError(f"unexpected elicitation request: {params}")


async def main() -> None:
    url, token, ca, tool, args = sys.argv[1:6]
    with_elicitation = "--elicit" in sys.argv[6:]
    out: dict = {"elicit": with_elicitation}
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, verify=ca, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            session = ClientSession(
                streams[0],
                streams[1],
                elicitation_callback=elicit if with_elicitation else None,
            )
            async with session:
                await session.initialize()
                caps = session._build_capabilities("2025-11-25")
                out["capabilities"] = caps.model_dump(by_alias=True, exclude_none=True)
                try:
                    result = await session.call_tool(tool, json.loads(args))
                    out["result"] = {
                        "is_error": bool(result.is_error),
                        "text": " ".join(c.text for c in result.content if getattr(c, "text", None)),
                        "meta": result.model_dump(by_alias=True, exclude_none=True).get("_meta"),
                    }
                except MCPError as e:
                    out["error"] = {"code": e.error.code, "message": e.error.message, "data": e.error.data}
    print(json.dumps(out, default=str))


asyncio.run(main())
