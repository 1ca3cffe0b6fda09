import { ChildRpc } from "./proc.ts";

export interface BridgeChildConfig {
  /** `fake`: createFakeBackend (commands are interpreted, nothing runs); `local`: real processes. */
  backend: "fake" | "local";
  /** Fake backend: added before every start, like a container cold start. */
  startLatencyMs?: number;
  /** Local backend isolation (default `none`). */
  isolation?: "none" | "bwrap";
  /** Node/V8 flags for the bridge process (e.g. `--max-semi-space-size=1`). */
  nodeFlags?: string[];
  /** Admission limits (default: unbounded for the fake backend, the machine's for the local). */
  admission?: { maxConcurrent: number; maxQueued: number };
}

/** A bridge served from its own Node process on loopback. */
export interface BridgeProcess {
  url: string;
  token: string;
  isolation: string;
  rpc: ChildRpc;
  pid: number;
  stop(): Promise<void>;
}

export async function startBridgeProcess(config: BridgeChildConfig): Promise<BridgeProcess> {
  const rpc = await ChildRpc.start("bridge", [JSON.stringify(config)], config.nodeFlags ?? []);
  const { url, token, isolation } = await rpc.call<{
    url: string;
    token: string;
    isolation: string;
  }>("url");
  return { url, token, isolation, rpc, pid: rpc.pid, stop: () => rpc.stop() };
}
