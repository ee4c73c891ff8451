// The TypeScript SDK's client on a virtual server (issue 42) at argv[2] with `Authorization:
// Bearer argv[3]`: it lists the tools, calls each tool named in argv[4] (a JSON object: shown
// name → arguments) and ends its session. Prints {"server": serverInfo.name, "tools": [names],
// "calls": {name: {"error": bool, "text": "..."}}}.
// Run with NODE_PATH naming the node_modules that hold @modelcontextprotocol/sdk.
"use strict";
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

(async () => {
  const [url, token, callsJson] = process.argv.slice(2);
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "pforte-tests", version: "1" });
  await client.connect(transport);
  const out = { server: client.getServerVersion().name, calls: {} };
  const { tools } = await client.listTools();
  out.tools = tools.map((t) => t.name);
  for (const [name, args] of Object.entries(JSON.parse(callsJson))) {
    const result = await client.callTool({ name, arguments: args });
    const text = result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
    out.calls[name] = { error: Boolean(result.isError), text };
  }
  await transport.terminateSession();
  await client.close();
  console.log(JSON.stringify(out));
  process.exit(0);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
