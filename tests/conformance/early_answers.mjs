// Early answers as Node's fetch (undici, the TypeScript SDK's transport) reads them: on one
// kept-alive agent, ROUNDS times a tools/call POST of 32 KiB without a token (401) and one of
// BIG_BYTES with TOKEN (413, the gateway's max_body_bytes is below BIG_BYTES). Prints one JSON object:
// {"statuses": [...]} — a number per answer read, the error's text where fetch failed.
// Usage: node early_answers.mjs MCP_URL TOKEN BIG_BYTES ROUNDS
const [url, token, big, rounds] = process.argv.slice(2);
const call = (size) =>
  JSON.stringify({
    jsonrpc: "2.0",
    id: 1,
    method: "tools/call",
    params: { name: "whoami", arguments: { pad: "x".repeat(size) } },
  });
const [small, large] = [call(32 * 1024), call(Number(big))];
const statuses = [];
for (let i = 0; i < Number(rounds); i++) {
  for (const auth of [null, token]) {
    const headers = {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
    };
    if (auth) headers.authorization = `Bearer ${auth}`;
    try {
      const body = auth ? large : small;
      const response = await fetch(url, { method: "POST", headers, body });
      await response.arrayBuffer();
      statuses.push(response.status);
    } catch (e) {
      statuses.push(`${e.name}: ${e.cause?.code ?? e.message}`);
    }
  }
}
console.log(JSON.stringify({ statuses }));
