"""The official MCP Python SDK (`mcp`) on a virtual server (issue 42) at MCP_URL with TOKEN: it
lists the tools, calls each tool named in CALLS (a JSON object: shown name → arguments) and an
unknown name, then ends its session (the SDK's DELETE).

Prints one JSON object on stdout: {"tools": [names], "calls": {name: {"error": bool, "text":
"..."}}, "unknown": "the error's message", "server": serverInfo.name}.

Usage: python virtual_client.py MCP_URL TOKEN CALLS_JSON
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url, token, calls = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    out = {"calls": {}}
    headers = {"authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                init = await session.initialize()
                out["server"] = init.server_info.name
                listed = await session.list_tools()
                out["tools"] = [t.name for t in listed.tools]
                for name, arguments in calls.items():
                    result = await session.call_tool(name, arguments)
                    text = "".join(c.text for c in result.content if c.type == "text")
                    out["calls"][name] = {"error": bool(result.is_error), "text": text}
                try:
                    await session.call_tool("no_such_tool", {})
                    out["unknown"] = "answered"
                except Exception as e:  # noqa: BLE001 - the test reports what the client saw
                    out["unknown"] = str(e)[:300]
    print(json.dumps(out))


asyncio.run(main())
