//! A conformance target for the MCP conformance runner's active server suite, written for
//! Pforte's tests from the suite's published server requirements (tool, resource and prompt
//! names and contents as the scenarios expect them), on the TypeScript SDK from npm.
//
// The suite's own reference server is not published on npm, so the tests run this one behind
// the gateway. It binds 127.0.0.1 on a kernel-chosen port and prints
// `pforte-everything listening on 127.0.0.1:PORT`. It does no Host/Origin checking of its own:
// DNS-rebinding protection is the gateway's job in front of it.
//
// With `--stdio` it serves one MCP connection on stdin/stdout instead (StdioServerTransport),
// for a stdio route of the gateway.
//
// With `--elicit-on-session-stream`, `test_elicitation` sends its `elicitation/create` as the
// suite's reference server does: on the session's standalone stream (the client's GET), with no
// related request, so that it is dropped when that stream is not open yet (issue 36 point 9).
//
// Run with NODE_PATH naming the node_modules that hold @modelcontextprotocol/sdk.
"use strict";

const http = require("node:http");
const { randomUUID } = require("node:crypto");
const { Server } = require("@modelcontextprotocol/sdk/server/index.js");
const { StreamableHTTPServerTransport } = require("@modelcontextprotocol/sdk/server/streamableHttp.js");
const {
  CallToolRequestSchema,
  CompleteRequestSchema,
  CreateMessageResultSchema,
  ElicitResultSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} = require("@modelcontextprotocol/sdk/types.js");

// A 1x1 PNG and a tiny WAV (44-byte header, two silent samples), made here.
const PNG =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
function wav() {
  const samples = Buffer.alloc(4);
  const h = Buffer.alloc(44);
  h.write("RIFF", 0);
  h.writeUInt32LE(36 + samples.length, 4);
  h.write("WAVE", 8);
  h.write("fmt ", 12);
  h.writeUInt32LE(16, 16);
  h.writeUInt16LE(1, 20); // PCM
  h.writeUInt16LE(1, 22); // mono
  h.writeUInt32LE(8000, 24);
  h.writeUInt32LE(16000, 28);
  h.writeUInt16LE(2, 32);
  h.writeUInt16LE(16, 34);
  h.write("data", 36);
  h.writeUInt32LE(samples.length, 40);
  return Buffer.concat([h, samples]).toString("base64");
}
const WAV = wav();

const noArgs = { type: "object", properties: {} };
const onSessionStream = process.argv.includes("--elicit-on-session-stream");

const TOOLS = [
  { name: "test_simple_text", description: "Returns simple text content", inputSchema: noArgs },
  { name: "test_image_content", description: "Returns image content", inputSchema: noArgs },
  { name: "test_audio_content", description: "Returns audio content", inputSchema: noArgs },
  { name: "test_embedded_resource", description: "Returns an embedded resource", inputSchema: noArgs },
  { name: "test_multiple_content_types", description: "Returns text, image and resource", inputSchema: noArgs },
  { name: "test_tool_with_logging", description: "Logs three messages while it runs", inputSchema: noArgs },
  { name: "test_tool_with_progress", description: "Reports progress while it runs", inputSchema: noArgs },
  { name: "test_error_handling", description: "Always fails", inputSchema: noArgs },
  {
    name: "test_sampling",
    description: "Asks the client's LLM",
    inputSchema: { type: "object", properties: { prompt: { type: "string" } }, required: ["prompt"] },
  },
  {
    name: "test_elicitation",
    description: "Asks the user",
    inputSchema: { type: "object", properties: { message: { type: "string" } }, required: ["message"] },
  },
  { name: "test_elicitation_sep1034_defaults", description: "Elicitation with defaults", inputSchema: noArgs },
  { name: "test_elicitation_sep1330_enums", description: "Elicitation with every enum form", inputSchema: noArgs },
];

const RESOURCES = [
  {
    uri: "test://static-text",
    name: "Static Text Resource",
    description: "A static text resource for testing",
    mimeType: "text/plain",
  },
  {
    uri: "test://static-binary",
    name: "Static Binary Resource",
    description: "A static binary resource (image) for testing",
    mimeType: "image/png",
  },
  {
    uri: "test://watched-resource",
    name: "Watched Resource",
    description: "A resource that can be subscribed to",
    mimeType: "text/plain",
  },
];

const PROMPTS = [
  { name: "test_simple_prompt", description: "A simple prompt without arguments" },
  {
    name: "test_prompt_with_arguments",
    description: "A prompt with required arguments",
    arguments: [
      { name: "arg1", description: "First test argument", required: true },
      { name: "arg2", description: "Second test argument", required: true },
    ],
  },
  {
    name: "test_prompt_with_embedded_resource",
    description: "A prompt with an embedded resource",
    arguments: [{ name: "resourceUri", description: "URI of the resource to embed", required: true }],
  },
  { name: "test_prompt_with_image", description: "A prompt with an image" },
];

const text = (t) => ({ type: "text", text: t });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function callTool(name, args, extra) {
  const log = (data) =>
    extra.sendNotification({
      method: "notifications/message",
      params: { level: "info", logger: "pforte-everything", data },
    });
  switch (name) {
    case "test_simple_text":
      return { content: [text("This is a simple text response for testing.")] };
    case "test_image_content":
      return { content: [{ type: "image", data: PNG, mimeType: "image/png" }] };
    case "test_audio_content":
      return { content: [{ type: "audio", data: WAV, mimeType: "audio/wav" }] };
    case "test_embedded_resource":
      return {
        content: [
          {
            type: "resource",
            resource: {
              uri: "test://embedded-resource",
              mimeType: "text/plain",
              text: "This is an embedded resource content.",
            },
          },
        ],
      };
    case "test_multiple_content_types":
      return {
        content: [
          text("Multiple content types test:"),
          { type: "image", data: PNG, mimeType: "image/png" },
          {
            type: "resource",
            resource: {
              uri: "test://mixed-content-resource",
              mimeType: "application/json",
              text: JSON.stringify({ test: "data", value: 123 }),
            },
          },
        ],
      };
    case "test_tool_with_logging":
      await log("Tool execution started");
      await sleep(50);
      await log("Tool processing data");
      await sleep(50);
      await log("Tool execution completed");
      return { content: [text("Tool with logging executed successfully")] };
    case "test_tool_with_progress": {
      const token = extra._meta?.progressToken;
      for (const progress of [0, 50, 100]) {
        if (token !== undefined) {
          await extra.sendNotification({
            method: "notifications/progress",
            params: { progressToken: token, progress, total: 100 },
          });
        }
        if (progress < 100) await sleep(50);
      }
      return { content: [text("Tool with progress executed successfully")] };
    }
    case "test_error_handling":
      return { isError: true, content: [text("This tool intentionally returns an error for testing")] };
    case "test_sampling": {
      const r = await extra.sendRequest(
        {
          method: "sampling/createMessage",
          params: { messages: [{ role: "user", content: text(String(args.prompt ?? "")) }], maxTokens: 100 },
        },
        CreateMessageResultSchema,
      );
      const answer = r.content?.type === "text" ? r.content.text : JSON.stringify(r.content);
      return { content: [text(`LLM response: ${answer}`)] };
    }
    case "test_elicitation": {
      // The suite's reference server sends this request on the session's own stream (the GET),
      // not the call's: with --elicit-on-session-stream, so does this one.
      const send = onSessionStream ? (req, schema) => extra.server.request(req, schema) : extra.sendRequest;
      const r = await send(
        {
          method: "elicitation/create",
          params: {
            message: String(args.message ?? ""),
            requestedSchema: {
              type: "object",
              properties: { response: { type: "string", description: "User's response" } },
              required: ["response"],
            },
          },
        },
        ElicitResultSchema,
      );
      return { content: [text(`User response: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`)] };
    }
    case "test_elicitation_sep1034_defaults":
      return elicit(extra, "Please confirm your details", {
        name: { type: "string", description: "Name", default: "John Doe" },
        age: { type: "integer", description: "Age", default: 30 },
        score: { type: "number", description: "Score", default: 95.5 },
        status: { type: "string", description: "Status", enum: ["active", "inactive", "pending"], default: "active" },
        verified: { type: "boolean", description: "Verified", default: true },
      });
    case "test_elicitation_sep1330_enums":
      return elicit(extra, "Please pick", {
        untitledSingle: { type: "string", enum: ["option1", "option2", "option3"] },
        titledSingle: {
          type: "string",
          oneOf: [
            { const: "value1", title: "First Option" },
            { const: "value2", title: "Second Option" },
            { const: "value3", title: "Third Option" },
          ],
        },
        legacyEnum: {
          type: "string",
          enum: ["opt1", "opt2", "opt3"],
          enumNames: ["Option One", "Option Two", "Option Three"],
        },
        untitledMulti: { type: "array", items: { type: "string", enum: ["option1", "option2", "option3"] } },
        titledMulti: {
          type: "array",
          items: {
            anyOf: [
              { const: "value1", title: "First Choice" },
              { const: "value2", title: "Second Choice" },
              { const: "value3", title: "Third Choice" },
            ],
          },
        },
      });
    default:
      throw new McpError(-32602, `Tool ${name} not found`);
  }
}

async function elicit(extra, message, properties) {
  const r = await extra.sendRequest(
    { method: "elicitation/create", params: { message, requestedSchema: { type: "object", properties } } },
    ElicitResultSchema,
  );
  return { content: [text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`)] };
}

function readResource(uri) {
  if (uri === "test://static-text") {
    return [{ uri, mimeType: "text/plain", text: "This is the content of the static text resource." }];
  }
  if (uri === "test://static-binary") return [{ uri, mimeType: "image/png", blob: PNG }];
  if (uri === "test://watched-resource") return [{ uri, mimeType: "text/plain", text: "Watched resource content" }];
  const m = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
  if (m) {
    const id = decodeURIComponent(m[1]);
    return [
      {
        uri,
        mimeType: "application/json",
        text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }),
      },
    ];
  }
  throw new McpError(-32002, `Resource not found: ${uri}`);
}

function getPrompt(name, args) {
  switch (name) {
    case "test_simple_prompt":
      return { messages: [{ role: "user", content: text("This is a simple prompt for testing.") }] };
    case "test_prompt_with_arguments":
      return {
        messages: [{ role: "user", content: text(`Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'`) }],
      };
    case "test_prompt_with_embedded_resource":
      return {
        messages: [
          {
            role: "user",
            content: {
              type: "resource",
              resource: { uri: args.resourceUri, mimeType: "text/plain", text: "Embedded resource content for testing." },
            },
          },
          { role: "user", content: text("Please process the embedded resource above.") },
        ],
      };
    case "test_prompt_with_image":
      return {
        messages: [
          { role: "user", content: { type: "image", data: PNG, mimeType: "image/png" } },
          { role: "user", content: text("Please analyze the image above.") },
        ],
      };
    default:
      throw new McpError(-32602, `Prompt ${name} not found`);
  }
}

/** One MCP server per session, as the SDK's low-level Server serves one transport. */
function newServer() {
  const server = new Server(
    { name: "pforte-everything", version: "1.0.0" },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        logging: {},
        completions: {},
      },
    },
  );
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) =>
    callTool(req.params.name, req.params.arguments ?? {}, { ...extra, _meta: req.params._meta, server }),
  );
  server.setRequestHandler(ListResourcesRequestSchema, async () => ({ resources: RESOURCES }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      {
        uriTemplate: "test://template/{id}/data",
        name: "Resource Template",
        description: "A resource template with parameter substitution",
        mimeType: "application/json",
      },
    ],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => ({ contents: readResource(req.params.uri) }));
  server.setRequestHandler(SubscribeRequestSchema, async () => ({}));
  server.setRequestHandler(UnsubscribeRequestSchema, async () => ({}));
  server.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts: PROMPTS }));
  server.setRequestHandler(GetPromptRequestSchema, async (req) => getPrompt(req.params.name, req.params.arguments ?? {}));
  server.setRequestHandler(SetLevelRequestSchema, async () => ({}));
  server.setRequestHandler(CompleteRequestSchema, async (req) => {
    const prefix = String(req.params.argument?.value ?? "");
    const values = ["paris", "park", "party"].filter((v) => v.startsWith(prefix));
    return { completion: { values, total: values.length, hasMore: false } };
  });
  return server;
}

const transports = new Map();

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

function jsonError(res, status, message) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message }, id: null }));
}

async function handle(req, res) {
  if (new URL(req.url, "http://x").pathname !== "/mcp") return jsonError(res, 404, "not found");
  const sid = req.headers["mcp-session-id"];
  if (req.method === "POST") {
    const raw = await readBody(req);
    let body;
    try {
      body = JSON.parse(raw.toString("utf8"));
    } catch {
      return jsonError(res, 400, "Parse error");
    }
    let transport = sid ? transports.get(sid) : undefined;
    if (!transport) {
      if (sid || body?.method !== "initialize") return jsonError(res, sid ? 404 : 400, "Invalid or missing session ID");
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
      await newServer().connect(transport);
    }
    return transport.handleRequest(req, res, body);
  }
  const transport = sid && transports.get(sid);
  if (!transport) return jsonError(res, sid ? 404 : 400, "Invalid or missing session ID");
  return transport.handleRequest(req, res);
}

if (process.argv.includes("--stdio")) {
  // One MCP connection over stdin/stdout (a stdio route of the gateway runs one per session);
  // nothing else may be written to stdout. It ends with its input.
  const { StdioServerTransport } = require("@modelcontextprotocol/sdk/server/stdio.js");
  const transport = new StdioServerTransport();
  transport.onclose = () => process.exit(0);
  process.stdin.on("end", () => process.exit(0));
  newServer()
    .connect(transport)
    .then(() => console.error("pforte-everything serving stdio"))
    .catch((e) => {
      console.error(`pforte-everything: ${e}`);
      process.exit(1);
    });
} else {
  const httpServer = http.createServer((req, res) => {
    handle(req, res).catch((e) => {
      if (!res.headersSent) jsonError(res, 500, String(e));
    });
  });
  httpServer.listen(0, "127.0.0.1", () => {
    const a = httpServer.address();
    console.log(`pforte-everything listening on ${a.address}:${a.port}`);
  });
}
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => process.exit(0));
