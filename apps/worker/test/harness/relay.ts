/**
 * Runs inside each harness container, in the container's own network namespace: the host side
 * cannot open a TCP connection into that namespace, but it can reach this relay through a unix
 * socket in a directory shared with the host. Each connection starts with the port wanted and a
 * newline; the relay answers `+` and then carries bytes both ways, or `-` when nothing listens
 * on that port (which the harness reports to workerd as "not listening", as the real sidecar does).
 *
 * A connection may instead start with `exec ` and a JSON line `{ argv, env, cwd }`: the relay runs
 * that command inside the container, answers `+` once it runs (or `-` and the reason), takes the
 * bytes that follow as its stdin (the end of the connection's input closes it), and sends its
 * output as Docker's multiplexed frames (`execFrame`: stream 1 stdout, 2 stderr), then one frame
 * of stream `EXIT_STREAM` holding the exit code as a 32-bit integer (128 + the signal's number
 * when a signal ended it), and ends.
 *
 * Outbound: the relay also listens on 127.0.0.1:`EGRESS_PORT` inside the container (an HTTP
 * proxy address the engine gives commands while outbound interception is on) and carries each
 * connection to the unix socket `egress.sock` beside its own, where the engine answers.
 *
 * Runs on Node's type stripping: plain TypeScript, node: modules only.
 */
import { spawn } from "node:child_process";
import { createConnection, createServer, type Socket } from "node:net";
import { constants } from "node:os";

/** The frame stream that carries the exit code (Docker uses 0, 1 and 2). */
const EXIT_STREAM = 3;
/** Where commands reach the engine's outbound proxy (engine.ts: `EGRESS_PROXY`). */
const EGRESS_PORT = 3128;

const socketPath = process.argv[2];
if (socketPath === undefined) {
  process.stderr.write("usage: relay.ts <unix socket path>\n");
  process.exit(2);
}

/** One Docker multiplexed-stream frame: stream, three zero bytes, the length, the payload. */
function execFrame(stream: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(8);
  header[0] = stream;
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}

interface ExecSpec {
  argv: string[];
  env?: string[];
  cwd?: string;
}

function execute(client: Socket, spec: ExecSpec, stdin: Buffer): void {
  const env: Record<string, string | undefined> = { ...process.env };
  for (const entry of spec.env ?? []) {
    const equals = entry.indexOf("=");
    if (equals > 0) env[entry.slice(0, equals)] = entry.slice(equals + 1);
  }
  const [file, ...args] = spec.argv;
  const child = spawn(file ?? "", args, {
    ...(spec.cwd ? { cwd: spec.cwd } : {}),
    env,
    stdio: ["pipe", "pipe", "pipe"],
  });
  child.once("error", (error) => client.end(`-${error.message.replaceAll("\n", " ")}\n`));
  child.once("spawn", () => {
    client.write("+\n");
    child.stdout.on("data", (chunk: Buffer) => client.write(execFrame(1, chunk)));
    child.stderr.on("data", (chunk: Buffer) => client.write(execFrame(2, chunk)));
    child.stdin.on("error", () => {});
    if (stdin.length > 0) child.stdin.write(stdin);
    client.pipe(child.stdin);
    client.resume();
  });
  child.once("close", (code, signal) => {
    const status = Buffer.alloc(4);
    status.writeInt32BE(code ?? 128 + (signal === null ? 0 : constants.signals[signal]));
    client.end(execFrame(EXIT_STREAM, status));
  });
  client.once("error", () => child.kill("SIGKILL"));
}

function relay(client: Socket): void {
  let header = "";
  const onData = (chunk: Buffer) => {
    header += chunk.toString("latin1");
    const newline = header.indexOf("\n");
    if (newline === -1) {
      if (header.length > (header.startsWith("exec ") ? 1_048_576 : 16)) client.destroy();
      return;
    }
    client.off("data", onData);
    client.pause();
    const rest = Buffer.from(header.slice(newline + 1), "latin1");
    if (header.startsWith("exec ")) {
      const line = Buffer.from(header.slice(5, newline), "latin1").toString("utf8");
      execute(client, JSON.parse(line) as ExecSpec, rest);
      return;
    }
    const port = Number(header.slice(0, newline));
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

// Half-open: an exec's stdin may end while its output still flows.
createServer({ allowHalfOpen: true }, relay).listen(socketPath);

const egressSocket = socketPath.replace(/[^/]*$/, "egress.sock");
createServer((client) => {
  const upstream = createConnection(egressSocket);
  client.pipe(upstream);
  upstream.pipe(client);
  client.once("error", () => upstream.destroy());
  upstream.once("error", () => client.destroy());
}).listen(EGRESS_PORT, "127.0.0.1");
