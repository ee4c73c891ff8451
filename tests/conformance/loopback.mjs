//! Preloaded into the npm everything server (`node --import`): a listen on a bare port binds
//! 127.0.0.1 instead of every interface, and the bound address is printed for the tests.
//
// `@modelcontextprotocol/server-everything` calls `app.listen(process.env.PORT)` with no host,
// which would listen on all interfaces; the tests bind on loopback only and start it with
// PORT=0, so they need the port the kernel chose: one line
// `pforte-loopback listening on 127.0.0.1:PORT` on stdout.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const [port, host] = args;
  const barePort =
    (typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port))) &&
    typeof host !== "string";
  if (barePort) {
    args.splice(1, 0, "127.0.0.1");
    this.once("listening", () => {
      const a = this.address();
      console.log(`pforte-loopback listening on ${a.address}:${a.port}`);
    });
  }
  return listen.apply(this, args);
};
