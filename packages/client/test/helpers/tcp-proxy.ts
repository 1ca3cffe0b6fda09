// A loopback TCP proxy to a bridge, the common part of the fault tests' proxies (cut-proxy.ts,
// gate-proxy.ts): each connection gets its own connection to the bridge, whose bytes go back to
// the client until the connection is cut; what goes on to the bridge, and when to cut, is the
// caller's. A cut resets the client's side and ends the bridge's (FIN, so nothing the bridge
// received is dropped), then closes it.
import { connect, createServer, type Server, type Socket } from "node:net";

/** One client connection and its connection to the bridge. */
export interface ProxiedConnection {
  client: Socket;
  upstream: Socket;
  /** Whether the connection has been cut. */
  readonly cutting: boolean;
  /** Cuts the connection (once). */
  cut(): void;
}

export interface TcpProxy {
  url: string;
  /** Connections cut so far. */
  readonly cuts: number;
  /** Cuts every open connection now. */
  cutAll(): void;
  close(): Promise<void>;
}

/** Proxies each new connection to port `target()` of 127.0.0.1; `onConnection` forwards its data. */
export async function startTcpProxy(
  target: () => number,
  onConnection: (connection: ProxiedConnection) => void,
): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  const open = new Set<ProxiedConnection>();
  let cuts = 0;
  const server: Server = createServer((client) => {
    const upstream = connect(target(), "127.0.0.1");
    sockets.add(client);
    sockets.add(upstream);
    let cutting = false;
    const connection: ProxiedConnection = {
      client,
      upstream,
      get cutting() {
        return cutting;
      },
      cut() {
        if (cutting) return;
        cutting = true;
        cuts++;
        client.resetAndDestroy();
        upstream.end();
        setTimeout(() => upstream.destroy(), 200).unref();
      },
    };
    open.add(connection);
    upstream.on("data", (chunk: Buffer) => {
      if (!cutting) client.write(chunk);
    });
    client.on("close", () => {
      open.delete(connection);
      sockets.delete(client);
      if (!cutting) upstream.destroy();
    });
    upstream.on("close", () => {
      sockets.delete(upstream);
      client.destroy();
    });
    client.on("error", () => {});
    upstream.on("error", () => {});
    onConnection(connection);
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
      for (const connection of [...open]) connection.cut();
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
