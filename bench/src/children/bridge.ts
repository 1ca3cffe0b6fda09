// A bridge in its own process, so its memory and CPU are measured apart from the client's.
// argv[2]: JSON BridgeChildConfig. Answers `url` with {url, token}.
import { silentLogger } from "@remote-task/bridge";
import { createLocalBackend } from "@remote-task/bridge/local";
import { startEmbeddedBridge } from "@remote-task/bridge/node";
import { createFakeBackend } from "@remote-task/bridge/testing";
import type { BridgeChildConfig } from "../lib/bridges.ts";
import { gcClock, serveRpc } from "../lib/proc.ts";

const config = JSON.parse(process.argv[2] ?? "{}") as BridgeChildConfig;
const backend =
  config.backend === "local"
    ? createLocalBackend({ isolation: config.isolation ?? "none" })
    : createFakeBackend({ startLatencyMs: config.startLatencyMs ?? 0 });
const gcMs = gcClock();
// The fake backend holds nothing on this machine, so it is not held to the machine's admission:
// the items that use it measure the bridge and the client at any concurrency.
const admission =
  config.admission ??
  (config.backend === "fake" ? { maxConcurrent: 100_000, maxQueued: 0 } : undefined);
const bridge = await startEmbeddedBridge({ backend, logger: silentLogger, admission });

serveRpc({
  url: () => ({ url: bridge.url, token: bridge.token, isolation: backend.isolation }),
  live: () => backend.liveSandboxes(),
  /** The sandbox ids the fake backend started, in order (each is one run of a command). */
  starts: () => ("starts" in backend ? backend.starts.map((spec) => spec.sandboxId) : []),
  gc: () => gcMs(),
});
process.on("SIGTERM", () => {
  void bridge.close().then(() => process.exit(0));
});
