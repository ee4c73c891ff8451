// The TypeScript SDK's client reads files through the `read_text_file` tool (the filesystem
// server's) of the MCP server at argv[2] with `Authorization: Bearer argv[3]`, and prints, per
// path (argv[4]…), the length and SHA-256 of the text it got: {"files": [{"len", "sha256"}]}.
// Run with NODE_PATH naming the node_modules that hold @modelcontextprotocol/sdk.
"use strict";
const crypto = require("node:crypto");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

(async () => {
  const [url, token, ...paths] = process.argv.slice(2);
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "pforte-tests", version: "1" });
  await client.connect(transport);
  const files = [];
  for (const path of paths) {
    const result = await client.callTool({ name: "read_text_file", arguments: { path } }, undefined, {
      timeout: 120000,
    });
    if (result.isError) throw new Error(`read_text_file ${path}: ${JSON.stringify(result.content)}`);
    const text = result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
    const sha256 = crypto.createHash("sha256").update(text, "utf8").digest("hex");
    files.push({ len: text.length, sha256 });
  }
  await client.close();
  console.log(JSON.stringify({ files }));
  process.exit(0);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
