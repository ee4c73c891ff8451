//! A keep-alive reverse proxy in front of the gateway, as a deployment might put one: it listens
//! on 127.0.0.1 (a kernel-chosen port), adds `Authorization: Bearer $PFORTE_PROXY_TOKEN` to every
//! request and forwards it to $PFORTE_PROXY_TARGET (an http:// origin) through one node:http
//! Agent that keeps its connections alive and reuses them (across clients and sessions), request
//! and response bodies streamed (an event stream passes event by event). It prints
//! `pforte-proxy listening on 127.0.0.1:PORT` once it listens. A failed upstream request is
//! logged on stderr; with PFORTE_PROXY_LOG=1 every request is (its upstream connection's local
//! port, method, path, status, when the answer's head came and when it ended).
"use strict";

const http = require("node:http");

const token = process.env.PFORTE_PROXY_TOKEN;
const target = process.env.PFORTE_PROXY_TARGET;
if (!token || !target) {
  throw new Error("PFORTE_PROXY_TOKEN and PFORTE_PROXY_TARGET must be set");
}
const upstream = new URL(target);
const verbose = process.env.PFORTE_PROXY_LOG === "1";
const agent = new http.Agent({ keepAlive: true });

/** Headers about one connection (RFC 9110 §7.6.1), and the ones the proxy sets itself. */
const notForwarded = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
  "host",
  "authorization",
]);

/** `raw` (name, value, name, value, …) without the headers the proxy does not pass on. */
function forwarded(raw) {
  const out = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (!notForwarded.has(raw[i].toLowerCase())) out.push(raw[i], raw[i + 1]);
  }
  return out;
}

const server = http.createServer((req, res) => {
  const started = Date.now();
  const up = http.request({
    agent,
    host: upstream.hostname,
    port: upstream.port,
    method: req.method,
    path: req.url,
    headers: [...forwarded(req.rawHeaders), "Host", upstream.host, "Authorization", `Bearer ${token}`],
  });
  let port = "-";
  const line = (what) => `proxy ${port} ${req.method} ${req.url} ${what} +${Date.now() - started}ms`;
  up.on("socket", (s) => {
    if (s.localPort) port = s.localPort;
    else s.once("connect", () => (port = s.localPort));
  });
  up.on("response", (answer) => {
    if (verbose) console.error(line(`head ${answer.statusCode}`));
    res.writeHead(answer.statusCode, forwarded(answer.rawHeaders));
    res.flushHeaders();
    answer.on("data", (chunk) => res.write(chunk));
    answer.on("end", () => {
      res.end();
      if (verbose) console.error(line("end"));
    });
    answer.on("error", (e) => {
      // The client leaving its event stream aborts the answer: not a failure.
      if (!res.destroyed) console.error(line(`answer error ${e.message}`));
      res.destroy();
    });
  });
  up.on("error", (e) => {
    // A client that left (its event stream closed) destroys `up`: not a failure.
    if (res.destroyed) return;
    console.error(line(`error ${e.message}`));
    if (!res.headersSent) {
      res.writeHead(502, { "content-type": "text/plain" });
      res.end(`proxy: ${e.message}`);
    } else {
      res.destroy();
    }
  });
  // The client leaving (an event stream it closes) ends the upstream request too.
  res.on("close", () => {
    if (!res.writableFinished) up.destroy();
  });
  req.pipe(up);
});

server.listen(0, "127.0.0.1", () => {
  const a = server.address();
  console.log(`pforte-proxy listening on ${a.address}:${a.port}`);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => process.exit(0));
