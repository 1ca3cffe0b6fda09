/**
 * Runs inside each harness container, in the container's own network namespace: the host side
 * cannot open a TCP connection into that namespace, but it can reach this relay through a unix
 * socket in a directory shared with the host. Each connection starts with the port wanted and a
 * newline; the relay answers `+` and then carries bytes both ways, or `-` when nothing listens
 * on that port (which the harness reports to workerd as "not listening", as the real sidecar does).
 *
 * Runs on Node's type stripping: plain TypeScript, node: modules only.
 */
import { createConnection, createServer, type Socket } from "node:net";

const socketPath = process.argv[2];
if (socketPath === undefined) {
  process.stderr.write("usage: relay.ts <unix socket path>\n");
  process.exit(2);
}

function relay(client: Socket): void {
  let header = "";
  const onData = (chunk: Buffer) => {
    header += chunk.toString("latin1");
    const newline = header.indexOf("\n");
    if (newline === -1) {
      if (header.length > 16) client.destroy();
      return;
    }
    client.off("data", onData);
    client.pause();
    const port = Number(header.slice(0, newline));
    const rest = Buffer.from(header.slice(newline + 1), "latin1");
    const upstream = createConnection({ host: "127.0.0.1", port });
    let connected = false;
    upstream.once("connect", () => {
      connected = true;
      client.write("+\n");
      if (rest.length > 0) upstream.write(rest);
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
    });
    upstream.once("error", () => {
      if (!connected) client.end("-\n");
      else client.destroy();
    });
    client.once("error", () => upstream.destroy());
    client.once("close", () => upstream.destroy());
    upstream.once("close", () => client.destroy());
  };
  client.on("data", onData);
  client.once("error", () => {});
}

createServer(relay).listen(socketPath);
