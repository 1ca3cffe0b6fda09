import { connect, createServer, type Server, type Socket } from "node:net";

/** What the proxy does to one connection, decided from the first request line it carries. */
export type Fault =
  /** Forward both ways untouched. */
  | { kind: "pass" }
  /** Read the request, forward nothing, answer with a TCP reset. */
  | { kind: "reset-before-forward" }
  /** Forward the request, wait for `after()` (e.g. "the bridge started the sandbox"), then reset both sides. */
  | { kind: "reset-after-forward"; after: () => Promise<void> }
  /** Forward the request; forward the response up to `marker` plus `extra` bytes, then go silent. */
  | { kind: "stall"; marker: string; extra: number }
  /** Like `stall`, but close the connection (FIN) instead of going silent. */
  | { kind: "truncate"; marker: string; extra: number }
  /** Never reach the bridge; answer with these bytes and close. */
  | { kind: "garbage"; bytes: Uint8Array }
  /** Forward the response one byte every `delayMs`. */
  | { kind: "trickle"; delayMs: number };

export interface ProxiedConnection {
  index: number;
  /** First request line, e.g. `POST /exec HTTP/1.1` (empty if the client sent nothing). */
  requestLine: string;
  fault: Fault["kind"];
  /** Request bytes written to the bridge. */
  forwardedBytes: number;
  /** Response bytes written to the client. */
  deliveredBytes: number;
}

export type FaultRule = (requestLine: string) => Fault;

/** Answers the first HTTP response headers end, plus this many bytes. */
export const HEADERS_END = "\r\n\r\n";

/**
 * A loopback TCP proxy in front of a bridge that injects one fault per connection. It counts
 * every connection and how many request bytes reached the bridge, so a test can tell whether
 * the client re-sent a request and whether the bridge could have run it.
 */
export class FaultProxy {
  readonly connections: ProxiedConnection[] = [];
  #rule: FaultRule = () => ({ kind: "pass" });
  readonly #sockets = new Set<Socket>();
  readonly #timers = new Set<ReturnType<typeof setInterval>>();

  private constructor(
    private readonly server: Server,
    readonly port: number,
    private readonly upstreamPort: number,
  ) {}

  /** Listens on `port` (default: a free one) of 127.0.0.1 and forwards to `upstreamUrl`. */
  static async start(upstreamUrl: string, port = 0): Promise<FaultProxy> {
    const upstreamPort = Number(new URL(upstreamUrl).port);
    let proxy: FaultProxy | undefined;
    const server = createServer((socket) => proxy?.accept(socket));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => resolve());
    });
    const address = server.address();
    if (address === null || typeof address === "string") throw new Error("no proxy address");
    proxy = new FaultProxy(server, address.port, upstreamPort);
    return proxy;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Sets the fault for connections accepted from now on. */
  setRule(rule: FaultRule): void {
    this.#rule = rule;
  }

  /** Connections whose first request line matches `pattern` (e.g. /^POST \/exec /). */
  matching(pattern: RegExp): ProxiedConnection[] {
    return this.connections.filter((connection) => pattern.test(connection.requestLine));
  }

  async close(): Promise<void> {
    for (const timer of this.#timers) clearInterval(timer);
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private track(socket: Socket): Socket {
    this.#sockets.add(socket);
    socket.once("close", () => this.#sockets.delete(socket));
    socket.on("error", () => {});
    return socket;
  }

  private accept(client: Socket): void {
    this.track(client);
    const record: ProxiedConnection = {
      index: this.connections.length,
      requestLine: "",
      fault: "pass",
      forwardedBytes: 0,
      deliveredBytes: 0,
    };
    this.connections.push(record);
    client.once("data", (first: Buffer) => {
      client.pause();
      record.requestLine = first.toString("latin1").split("\r\n", 1)[0] ?? "";
      const fault = this.#rule(record.requestLine);
      record.fault = fault.kind;
      this.apply(fault, client, first, record);
    });
  }

  private apply(fault: Fault, client: Socket, first: Buffer, record: ProxiedConnection): void {
    if (fault.kind === "reset-before-forward") {
      client.resetAndDestroy();
      return;
    }
    if (fault.kind === "garbage") {
      client.end(fault.bytes);
      return;
    }
    const upstream = this.track(connect(this.upstreamPort, "127.0.0.1"));
    const forward = (chunk: Buffer) => {
      record.forwardedBytes += chunk.length;
      upstream.write(chunk);
    };
    forward(first);
    client.on("data", forward);
    client.resume();
    // The client gave up or broke: the bridge must see the disconnect.
    client.once("close", () => upstream.destroy());

    const deliver = (chunk: Buffer) => {
      if (chunk.length === 0 || client.destroyed) return;
      record.deliveredBytes += chunk.length;
      client.write(chunk);
    };

    switch (fault.kind) {
      case "pass":
        upstream.on("data", deliver);
        upstream.once("end", () => client.end());
        upstream.once("close", () => client.destroy());
        return;
      case "reset-after-forward":
        upstream.on("data", deliver);
        void fault.after().then(() => {
          client.resetAndDestroy();
          upstream.destroy();
        });
        return;
      case "stall":
      case "truncate": {
        let seen = Buffer.alloc(0);
        let cut = false;
        upstream.on("data", (chunk: Buffer) => {
          if (cut) return;
          const before = seen.length;
          seen = Buffer.concat([seen, chunk]);
          const at = seen.indexOf(fault.marker);
          if (at < 0) {
            deliver(chunk);
            return;
          }
          const limit = at + Buffer.byteLength(fault.marker) + fault.extra;
          if (seen.length < limit) {
            deliver(chunk);
            return;
          }
          deliver(seen.subarray(before, limit));
          cut = true;
          if (fault.kind === "truncate") client.end();
        });
        // A stalled client hears nothing more, even if the bridge finishes or closes.
        if (fault.kind === "truncate") upstream.once("close", () => client.end());
        return;
      }
      case "trickle": {
        const queue: number[] = [];
        let upstreamDone = false;
        upstream.on("data", (chunk: Buffer) => queue.push(...chunk));
        upstream.once("close", () => {
          upstreamDone = true;
        });
        const timer = setInterval(() => {
          const byte = queue.shift();
          if (byte !== undefined) deliver(Buffer.of(byte));
          else if (upstreamDone) {
            clearInterval(timer);
            this.#timers.delete(timer);
            client.end();
          }
        }, fault.delayMs);
        this.#timers.add(timer);
        client.once("close", () => {
          clearInterval(timer);
          this.#timers.delete(timer);
        });
        return;
      }
    }
  }
}

/** A loopback port with nothing listening on it (bound once, then released). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("no address");
  return address.port;
}
