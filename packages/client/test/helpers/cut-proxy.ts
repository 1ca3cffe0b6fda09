// A loopback TCP proxy that cuts every connection at a random moment after a request on it was
// forwarded whole to the bridge: the client's side is reset, the bridge's is ended (never while one is on its way: a cut request could not run,
// which is not the fault this stands for). Requests are told apart by their headers and
// `Content-Length` (the client sends no chunked bodies).
import { startTcpProxy, type TcpProxy } from "./tcp-proxy.js";

export type CutProxy = Pick<TcpProxy, "url" | "cuts" | "close">;

const HEADERS_END = Buffer.from("\r\n\r\n");

/** Proxies to `upstreamPort`; each connection is cut `0..maxDelayMs` after a request went through. */
export function startCutProxy(upstreamPort: number, maxDelayMs: number): Promise<CutProxy> {
  return startTcpProxy(
    () => upstreamPort,
    ({ client, upstream, cut }) => {
      let pending = Buffer.alloc(0);
      /** Body bytes of the request being forwarded still to come; -1 while reading headers. */
      let bodyLeft = -1;
      let inRequest = false;
      let cutWhenForwarded = false;
      let timer: ReturnType<typeof setTimeout> | undefined;
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
      client.on("close", () => {
        if (timer !== undefined) clearTimeout(timer);
      });
    },
  );
}
