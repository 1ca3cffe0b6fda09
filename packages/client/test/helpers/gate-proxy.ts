// A loopback TCP proxy that passes requests through whole, except the first `cutBodies`
// `POST /exec` requests: their headers go on to the bridge, then the connection is cut just
// before the body (the client's side is reset, the bridge's ended), so the bridge never has the
// request whole and nothing of it runs; and the first `cutAnswers` (after those) go on whole,
// then the connection is cut before their answer. `cutAll()` cuts every open connection now, and
// `retarget(port)` sends new connections to another bridge (one that took the old one's place).
// Requests are told apart by their headers and `Content-Length` (the client sends no chunked
// bodies).
import { connect, createServer, type Server, type Socket } from "node:net";

export interface GateProxy {
  url: string;
  /** Connections cut so far. */
  readonly cuts: number;
  /** Cuts every open connection now. */
  cutAll(): void;
  /** New connections go to `port` from now on. */
  retarget(port: number): void;
  close(): Promise<void>;
}

const HEADERS_END = Buffer.from("\r\n\r\n");

export async function startGateProxy(
  upstreamPort: number,
  options: { cutBodies?: number; cutAnswers?: number } = {},
): Promise<GateProxy> {
  let port = upstreamPort;
  let cutBodies = options.cutBodies ?? 0;
  let cutAnswers = options.cutAnswers ?? 0;
  let cuts = 0;
  const sockets = new Set<Socket>();
  const cutters = new Set<() => void>();
  const server: Server = createServer((client) => {
    const upstream = connect(port, "127.0.0.1");
    sockets.add(client);
    sockets.add(upstream);
    let pending = Buffer.alloc(0);
    /** Body bytes of the request being forwarded still to come (0: reading headers). */
    let bodyLeft = 0;
    /** The request being forwarded is a `POST /exec` whose answer is to be cut. */
    let cutAnswer = false;
    let cutting = false;
    const cut = () => {
      if (cutting) return;
      cutting = true;
      cuts++;
      client.resetAndDestroy();
      upstream.end();
      setTimeout(() => upstream.destroy(), 200).unref();
    };
    cutters.add(cut);
    client.on("data", (chunk: Buffer) => {
      if (cutting) return;
      pending = Buffer.concat([pending, chunk]);
      while (pending.length > 0) {
        if (bodyLeft === 0) {
          const end = pending.indexOf(HEADERS_END);
          if (end < 0) return;
          const head = pending.subarray(0, end + HEADERS_END.length);
          const text = head.toString("latin1");
          const length = /\r\ncontent-length:\s*(\d+)/i.exec(text);
          bodyLeft = length === null ? 0 : Number(length[1]);
          pending = pending.subarray(head.length);
          upstream.write(head);
          if (text.startsWith("POST /exec ") && bodyLeft > 0 && cutBodies > 0) {
            cutBodies--;
            cut();
            return;
          }
          if (text.startsWith("POST /exec ") && bodyLeft > 0 && cutAnswers > 0) {
            cutAnswers--;
            cutAnswer = true;
          }
        }
        const taken = Math.min(bodyLeft, pending.length);
        upstream.write(pending.subarray(0, taken));
        bodyLeft -= taken;
        pending = pending.subarray(taken);
        if (bodyLeft === 0 && cutAnswer) {
          cut();
          return;
        }
      }
    });
    upstream.on("data", (chunk: Buffer) => {
      if (!cutting) client.write(chunk);
    });
    client.on("close", () => {
      cutters.delete(cut);
      sockets.delete(client);
      if (!cutting) upstream.destroy();
    });
    upstream.on("close", () => {
      sockets.delete(upstream);
      client.destroy();
    });
    client.on("error", () => {});
    upstream.on("error", () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no proxy address");
  return {
    url: `http://127.0.0.1:${address.port}`,
    get cuts() {
      return cuts;
    },
    cutAll() {
      for (const cut of [...cutters]) cut();
    },
    retarget(next: number) {
      port = next;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
