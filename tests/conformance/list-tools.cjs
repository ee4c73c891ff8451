// The TypeScript SDK's client lists the tools of the MCP server at argv[2] and prints
// {"tools": N} (tests/tests/state/service_resume.rs runs it through a relay that cuts its first
// request stream after the priming event, so the answer only comes by resuming with
// Last-Event-ID). Run with NODE_PATH naming the node_modules that hold @modelcontextprotocol/sdk.
"use strict";
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

(async () => {
  const transport = new StreamableHTTPClientTransport(new URL(process.argv[2]));
  const client = new Client({ name: "pforte-tests", version: "1" });
  await client.connect(transport);
  const { tools } = await client.listTools();
  await client.close();
  console.log(JSON.stringify({ tools: tools.length }));
  process.exit(0);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
