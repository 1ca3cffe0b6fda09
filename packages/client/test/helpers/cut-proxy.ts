// A loopback TCP proxy that cuts every connection at a random moment after a request on it was
// forwarded whole to the bridge: the client's side is reset, the bridge's is ended (never while one is on its way: a cut request could not run,
// which is not the fault this stands for). Requests are told apart by their headers and
// `Content-Length` (the client sends no chunked bodies).
import { connect, createServer, type Server, type Socket } from "node:net";

export interface CutProxy {
  url: string;
  /** Connections cut so far. */
  readonly cuts: number;
  close(): Promise<void>;
}

const HEADERS_END = Buffer.from("\r\n\r\n");

/** Proxies to `upstreamPort`; each connection is cut `0..maxDelayMs` after a request went through. */
export async function startCutProxy(upstreamPort: number, maxDelayMs: number): Promise<CutProxy> {
  const sockets = new Set<Socket>();
  let cuts = 0;
  const server: Server = createServer((client) => {
    const upstream = connect(upstreamPort, "127.0.0.1");
    sockets.add(client);
    sockets.add(upstream);
    let pending = Buffer.alloc(0);
    /** Body bytes of the request being forwarded still to come; -1 while reading headers. */
    let bodyLeft = -1;
    let inRequest = false;
    let cutWhenForwarded = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let cutting = false;
    // The client sees a reset; the bridge gets the end of the request it has whole (FIN, so
    // nothing it received is dropped), then the connection closes.
    const cut = () => {
      if (cutting) return;
      cutting = true;
      cuts++;
      client.resetAndDestroy();
      upstream.end();
      setTimeout(() => upstream.destroy(), 200).unref();
    };
    const forwarded = () => {
      inRequest = false;
      if (cutWhenForwarded) {
        cut();
        return;
      }
      timer ??= setTimeout(() => {
        if (inRequest) cutWhenForwarded = true;
        else cut();
      }, Math.random() * maxDelayMs);
    };
    client.on("data", (chunk: Buffer) => {
      upstream.write(chunk);
      pending = Buffer.concat([pending, chunk]);
      for (;;) {
        if (bodyLeft < 0) {
          if (pending.length > 0) inRequest = true;
          const end = pending.indexOf(HEADERS_END);
          if (end < 0) return;
          const headers = pending.subarray(0, end).toString("latin1");
          const length = /\r\ncontent-length:\s*(\d+)/i.exec(headers);
          bodyLeft = length === null ? 0 : Number(length[1]);
          pending = pending.subarray(end + HEADERS_END.length);
        }
        const taken = Math.min(bodyLeft, pending.length);
        bodyLeft -= taken;
        pending = pending.subarray(taken);
        if (bodyLeft > 0) return;
        bodyLeft = -1;
        forwarded();
        if (pending.length === 0) return;
      }
    });
    upstream.on("data", (chunk: Buffer) => {
      if (!cutting) client.write(chunk);
    });
    client.on("close", () => {
      if (timer !== undefined) clearTimeout(timer);
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
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
