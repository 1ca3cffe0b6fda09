/**
 * The sandbox's side of its egress proxy. A sandbox has its own network namespace with only a
 * loopback interface; this relay listens there on 127.0.0.1:{@link RELAY_PORT} and carries every
 * connection to the bridge's proxy socket, bind-mounted into the sandbox at
 * {@link SANDBOX_PROXY_SOCKET}. It runs on the bridge's own Node binary (bind-mounted read-only at
 * {@link SANDBOX_NODE}), so nothing needs installing. It says `ready` on its stdout once it
 * listens, then points stdout and stderr at /dev/null: the sandbox's shell reads that word
 * through a command substitution, which ends when the relay's stdout closes, before it runs the
 * command. It carries at most as many connections at once as the proxy takes from one sandbox
 * ({@link RELAY_MAX_CONNECTIONS}) and closes more as they arrive: the docker backend's relay runs
 * on the host, in the bridge's cgroup and with its descriptor limit.
 */
import { DEFAULT_EGRESS_LIMITS } from "./egress.js";

/** The port the relay listens on inside the sandbox (the proxy address its commands are given). */
const RELAY_PORT = 3128;
/** Connections the relay carries at once. */
export const RELAY_MAX_CONNECTIONS = DEFAULT_EGRESS_LIMITS.maxConnections;
/** Where the proxy's socket and the Node binary appear inside the sandbox. */
export const SANDBOX_PROXY_SOCKET = "/run/remote-task/proxy.sock";
export const SANDBOX_NODE = "/run/remote-task/node";

// Plain CommonJS for `node -e`; double quotes only (it travels in single quotes).
const RELAY_SOURCE = `
const net = require("node:net");
const fs = require("node:fs");
const [port, path] = process.argv.slice(1);
const server = net.createServer({ allowHalfOpen: true }, (client) => {
  const upstream = net.connect({ path, allowHalfOpen: true });
  const end = () => { client.destroy(); upstream.destroy(); };
  for (const socket of [client, upstream]) { socket.on("error", end); socket.on("close", end); }
  client.pipe(upstream);
  upstream.pipe(client);
});
server.maxConnections = ${RELAY_MAX_CONNECTIONS};
server.on("error", (error) => { fs.writeSync(1, error.message); process.exit(1); });
server.listen(Number(port), "127.0.0.1", () => {
  fs.writeSync(1, "ready");
  for (const fd of [1, 2]) { fs.closeSync(fd); fs.openSync("/dev/null", "w"); }
});
`
  .trim()
  .replace(/\n\s*/g, " ");

/** The proxy variables a command is given; NO_PROXY is empty (loopback goes through it too). */
export function proxyEnvironment(): Record<string, string> {
  const url = `http://127.0.0.1:${RELAY_PORT}`;
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    ALL_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    all_proxy: url,
    NO_PROXY: "",
    no_proxy: "",
  };
}

/** The relay's arguments after the Node binary: it listens on 127.0.0.1 and carries to `socketPath`. */
export function relayArgs(socketPath: string): string[] {
  return ["-e", RELAY_SOURCE, String(RELAY_PORT), socketPath];
}

/**
 * Shell lines that start the relay and wait until it listens, or end the sandbox (exit 125) with
 * a clear message when it cannot start.
 */
export function relayPrelude(): string[] {
  if (RELAY_SOURCE.includes("'")) throw new Error("the relay source must not contain '");
  return [
    `_rt=$(NODE_OPTIONS= ${SANDBOX_NODE} -e '${RELAY_SOURCE}' ${RELAY_PORT} ${SANDBOX_PROXY_SOCKET} </dev/null 2>&1 &)`,
    `[ "$_rt" = ready ] || { printf 'remote-task: the sandbox network relay did not start: %s\\n' "$_rt" >&2; exit 125; }`,
    "unset _rt",
  ];
}
