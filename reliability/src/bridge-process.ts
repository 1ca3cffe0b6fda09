/**
 * A bridge in a process of its own, so the soak can read its RSS and its children. Bundled by
 * test/support/bridge-process.ts; configured through RT_BRIDGE_CONFIG; talks over IPC.
 */
import type { BridgeLogEntry } from "@remote-task/bridge";
import { createLocalBackend } from "@remote-task/bridge/local";
import { startEmbeddedBridge } from "@remote-task/bridge/node";
import type { BridgeProcessConfig, BridgeProcessReply, BridgeProcessRequest } from "./ipc.js";

const config = JSON.parse(process.env.RT_BRIDGE_CONFIG ?? "{}") as BridgeProcessConfig;
const backend = createLocalBackend({ isolation: config.isolation, tmpRoot: config.tmpRoot });
const gc = (globalThis as { gc?: () => void }).gc;

const send = (reply: BridgeProcessReply) => process.send?.(reply);
const bridge = await startEmbeddedBridge({
  backend,
  token: config.token,
  logger: (entry: BridgeLogEntry) => send({ type: "log", line: JSON.stringify(entry) }),
  // What the soak measures is the bridge without durable calls: kept outcomes (bounded by
  // maxKeptBytes) would show as heap held for their ten minutes.
  durable: false,
});

function memory(): { rss: number; heapUsed: number; heapTotal: number; external: number } {
  gc?.();
  const { rss, heapUsed, heapTotal, external } = process.memoryUsage();
  return { rss, heapUsed, heapTotal, external };
}

process.on("message", (message: BridgeProcessRequest) => {
  if (message.type === "stats") {
    send({ type: "stats", stats: backend.stats(), ...memory() });
  } else if (message.type === "close") {
    void bridge
      .close()
      .then(() => backend.close())
      .then(() => process.exit(0));
  }
});

send({ type: "ready", url: bridge.url, isolation: backend.isolation, pid: process.pid });
