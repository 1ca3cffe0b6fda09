import { type BridgeLogger, stderrLogger } from "@remote-task/bridge";

/**
 * The log of a bridge `serve` runs: one JSON line per call on stderr, so stdout carries only the
 * banner; its warnings as text.
 */
export const serveLogger: BridgeLogger = (entry) => {
  // A warning is for the person who started serve (e.g. a short token): a line of text.
  if (entry.event === "warning" && entry.detail !== undefined) {
    process.stderr.write(`remote-task: warning: ${entry.detail}\n`);
  } else stderrLogger(entry);
};

/**
 * The log of the bridge embedded for one run (`run --local`, `mcp --local`...): the client already
 * reports each call's failure, so only what it cannot see is shown, as one readable line on
 * stderr: an unexpected backend failure's detail, or a problem outside a call.
 */
export const embeddedLogger: BridgeLogger = (entry) => {
  if (entry.detail === undefined) return;
  const what = entry.event === "exec" ? `call ${entry.sandboxId} failed` : entry.event;
  process.stderr.write(`remote-task: embedded bridge: ${what}: ${entry.detail}\n`);
};
