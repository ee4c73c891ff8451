"""The official MCP Python SDK (`mcp`) lists the tools of the MCP server at MCP_URL.

tests/tests/state/service_resume.rs runs it through a relay that cuts its first request stream
after the priming event, so the answer only comes by resuming with Last-Event-ID. Prints one
JSON object on stdout: {"tools": N}.

Usage: python list_tools.py MCP_URL
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    async with streamable_http_client(sys.argv[1]) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            tools = await session.list_tools()
    print(json.dumps({"tools": len(tools.tools)}))


asyncio.run(main())
