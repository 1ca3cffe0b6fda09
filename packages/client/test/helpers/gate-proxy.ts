// A loopback TCP proxy that passes requests through whole, except the first `cutBodies`
// `POST /exec` requests: their headers go on to the bridge, then the connection is cut just
// before the body (the client's side is reset, the bridge's ended), so the bridge never has the
// request whole and nothing of it runs; and the first `cutAnswers` (after those) go on whole,
// then the connection is cut before their answer. `cutAll()` cuts every open connection now, and
// `retarget(port)` sends new connections to another bridge (one that took the old one's place).
// Requests are told apart by their headers and `Content-Length` (the client sends no chunked
// bodies).
import { startTcpProxy, type TcpProxy } from "./tcp-proxy.js";

export interface GateProxy extends TcpProxy {
  /** New connections go to `port` from now on. */
  retarget(port: number): void;
}

const HEADERS_END = Buffer.from("\r\n\r\n");

export async function startGateProxy(
  upstreamPort: number,
  options: { cutBodies?: number; cutAnswers?: number } = {},
): Promise<GateProxy> {
  let port = upstreamPort;
  let cutBodies = options.cutBodies ?? 0;
  let cutAnswers = options.cutAnswers ?? 0;
  const proxy = await startTcpProxy(
    () => port,
    (connection) => {
      const { client, upstream } = connection;
      let pending = Buffer.alloc(0);
      /** Body bytes of the request being forwarded still to come (0: reading headers). */
      let bodyLeft = 0;
      /** The request being forwarded is a `POST /exec` whose answer is to be cut. */
      let cutAnswer = false;
      client.on("data", (chunk: Buffer) => {
        if (connection.cutting) return;
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
              connection.cut();
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
            connection.cut();
            return;
          }
        }
      });
    },
  );
  return Object.assign(proxy, {
    retarget(next: number) {
      port = next;
    },
  });
}
