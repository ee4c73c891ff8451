"""The official MCP Python SDK (`mcp`) on a virtual server (issue 42) at MCP_URL with TOKEN,
calling the tools of a member that talks back during a call (tests/fixtures/stdio/server.py,
shown with the prefix PREFIX): `progress` with a progress callback, `log` with a logging
callback, `sample` and `elicit` answered by the callbacks here. The session keeps the
handshake (`mode="legacy"`), so the member's requests reach this client on the call's stream
and its answers go back on the session. Then, with the SDK's default negotiation (`server/discover`:
MCP 2026-07-28, no session), `progress` and `echo` again.

Prints one JSON object on stdout: {"progress": text, "progress_seen": [values], "log": text,
"logs_seen": [data], "sample": text, "elicit": text, "sampled_prompts": [texts],
"auto_version": version, "auto_progress": text, "auto_progress_seen": [values],
"auto_echo": text}.

Usage: python virtual_stream_client.py MCP_URL TOKEN PREFIX
"""

from __future__ import annotations

import asyncio
import json
import sys

import httpx2
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client


def text(result) -> str:
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def main(url: str, token: str, prefix: str) -> None:
    out: dict = {"sampled_prompts": [], "logs_seen": []}
    progress: list[float] = []

    async def sampling(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked = getattr(params.messages[0].content, "text", "?")
        out["sampled_prompts"].append(asked)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"echo of {asked}"),
            model="pforte-test",
        )

    async def elicitation(context, params) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Grace"})

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        out["logs_seen"].append(params.data)

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    headers = {"authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with Client(
            streamable_http_client(url, http_client=http),
            mode="legacy",
            sampling_callback=sampling,
            elicitation_callback=elicitation,
            logging_callback=on_log,
        ) as client:
            out["progress"] = text(
                await client.call_tool(
                    f"{prefix}progress", {"steps": 3}, progress_callback=on_progress
                )
            )
            out["progress_seen"] = progress
            out["log"] = text(await client.call_tool(f"{prefix}log", {"text": "a note"}))
            out["sample"] = text(await client.call_tool(f"{prefix}sample", {"prompt": "hello"}))
            out["elicit"] = text(await client.call_tool(f"{prefix}elicit", {}))
    stateless: list[float] = []

    async def on_stateless_progress(value: float, total: float | None, message: str | None) -> None:
        stateless.append(value)

    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            out["auto_version"] = client.protocol_version
            out["auto_progress"] = text(
                await client.call_tool(
                    f"{prefix}progress", {"steps": 2}, progress_callback=on_stateless_progress
                )
            )
            out["auto_progress_seen"] = stateless
            out["auto_echo"] = text(await client.call_tool(f"{prefix}echo", {"text": "stateless"}))
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
