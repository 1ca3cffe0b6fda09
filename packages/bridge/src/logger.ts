import type { ErrorCode, Outcome } from "@remote-task/protocol";

/** Why a call ended before its command exited by itself. */
export type EndReason = "timeout" | "cancel" | "disconnect" | "shutdown";

/** One line per `/exec` call. Never carries `env` values or the token. */
export interface ExecLogEntry {
  event: "exec";
  level: "info" | "error";
  sandboxId: string;
  /** `error` when the call failed before producing a result (see `errorCode`). */
  outcome: Outcome | "error";
  code?: number;
  errorCode?: ErrorCode;
  endedBy?: EndReason;
  /** Since acceptance, the time in the queue included. */
  durationMs: number;
  /** Ms from asking for the sandbox until the command was running (cold or warm start, queue excluded); absent if it never ran. */
  startMs?: number;
  /** Only for a call that waited for a slot: how long it waited. */
  queuedMs?: number;
  /** `false` only for a call that ended while it waited: its command never ran. */
  started?: false;
  stdoutBytes: number;
  stderrBytes: number;
  streamed: boolean;
  /** Whether the sandbox came from a warm pool (started ahead of the call), when the backend keeps one. */
  warm?: boolean;
  /** For unexpected backend failures: the failure's message, with env values and the token redacted. */
  detail?: string;
}

/** Something went wrong outside a call (a bug, or a failed cleanup). */
export interface ProblemLogEntry {
  event: "internal_error" | "destroy_failed";
  level: "error";
  sandboxId?: string;
  detail: string;
}

/** Something the deployer should know about how the bridge or its backend runs (once, at start). */
export interface WarningLogEntry {
  event: "warning";
  level: "warn";
  detail: string;
}

export type BridgeLogEntry = ExecLogEntry | ProblemLogEntry | WarningLogEntry;

/** Receives structured log entries; write them wherever you like (one JSON line each is typical). */
export type BridgeLogger = (entry: BridgeLogEntry) => void;

/** One entry as a JSON line (without the newline), with its time first. */
function jsonLine(entry: BridgeLogEntry): string {
  return JSON.stringify({ time: new Date().toISOString(), ...entry });
}

/** Writes each entry as one JSON line: info to `console.log`, warnings and errors to `console.error`. */
export const jsonLineLogger: BridgeLogger = (entry) => {
  if (entry.level === "info") console.log(jsonLine(entry));
  else console.error(jsonLine(entry));
};

/**
 * Writes each entry as one JSON line to the process's stderr, so the stdout of a program that
 * embeds a bridge carries only its own output. The Node host's default (Node only).
 */
export const stderrLogger: BridgeLogger = (entry) => {
  process.stderr.write(`${jsonLine(entry)}\n`);
};

/** Drops every entry. */
export const silentLogger: BridgeLogger = () => {};
