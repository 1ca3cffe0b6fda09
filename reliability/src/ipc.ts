import type { LocalBackendStats } from "@remote-task/bridge/local";

/** How the parent configures the bridge process (JSON in RT_BRIDGE_CONFIG). */
export interface BridgeProcessConfig {
  isolation: "none" | "bwrap";
  tmpRoot: string;
  token: string;
}

export type BridgeProcessRequest = { type: "stats" } | { type: "close" };

export type BridgeProcessReply =
  | { type: "ready"; url: string; isolation: string; pid: number }
  | { type: "log"; line: string }
  | {
      type: "stats";
      stats: LocalBackendStats;
      /** Bytes, after a full GC. */
      rss: number;
      heapUsed: number;
      /** V8 heap committed (used or not). */
      heapTotal: number;
      /** C++ objects bound to JS (buffers, handles). */
      external: number;
    };
