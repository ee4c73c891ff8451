//! Preloaded into the MCP conformance runner (`node --import`): adds `Authorization: Bearer
//! $PFORTE_CONFORMANCE_TOKEN` to every request the runner sends to $PFORTE_CONFORMANCE_URL's origin.
//
// The runner (`@modelcontextprotocol/conformance server`) has no option for request headers
// (upstream issue modelcontextprotocol/conformance#453), and its scenarios send through both the
// built-in fetch (the SDK transport, the SSE checks) and undici's `request` (the DNS-rebinding
// checks). Both go through undici's global dispatcher, so one interceptor on it covers every
// request, in the runner's own process: no proxy sits between the runner and the gateway, and the
// token stays out of the runner's arguments and output.
import http from "node:http";
import { createRequire } from "node:module";

// The undici the runner itself imports, resolved from the runner's script (argv[1]).
const { Agent, setGlobalDispatcher } = createRequire(process.argv[1])("undici");

const token = process.env.PFORTE_CONFORMANCE_TOKEN;
const target = process.env.PFORTE_CONFORMANCE_URL;
if (!token || !target) {
  throw new Error("PFORTE_CONFORMANCE_TOKEN and PFORTE_CONFORMANCE_URL must be set");
}
const targetOrigin = new URL(target).origin;

/** The request's headers as [name, value] pairs, whatever form undici got them in. */
function headerPairs(headers) {
  if (headers == null) return [];
  if (Array.isArray(headers)) {
    const pairs = [];
    for (let i = 0; i + 1 < headers.length; i += 2) pairs.push([String(headers[i]), headers[i + 1]]);
    return pairs;
  }
  if (typeof headers[Symbol.iterator] === "function") return [...headers];
  return Object.entries(headers);
}

function withBearer(dispatch) {
  return (opts, handler) => {
    const origin = typeof opts.origin === "string" ? opts.origin : opts.origin?.origin;
    if (origin !== targetOrigin) return dispatch(opts, handler);
    const headers = headerPairs(opts.headers).filter(([k]) => k.toLowerCase() !== "authorization");
    headers.push(["authorization", `Bearer ${token}`]);
    return dispatch({ ...opts, headers: headers.flat() }, handler);
  };
}

setGlobalDispatcher(new Agent().compose(withBearer));

// The 2026-07-28 runner's header-validation scenarios send raw `node:http` requests (to control
// every header), past undici: the same bearer goes on those, for the same origin only.

const plainRequest = http.request;
http.request = function request(options, ...rest) {
  if (options && typeof options === "object" && !(options instanceof URL)) {
    const origin = `http://${options.hostname ?? options.host}:${options.port ?? 80}`;
    if (origin === targetOrigin) {
      const headers = Object.fromEntries(
        Object.entries(options.headers ?? {}).filter(([k]) => k.toLowerCase() !== "authorization"),
      );
      headers.authorization = `Bearer ${token}`;
      return plainRequest.call(this, { ...options, headers }, ...rest);
    }
  }
  return plainRequest.call(this, options, ...rest);
};
