/**
 * The one seam between the bridge core and a sandbox technology. A backend starts one command in
 * a fresh sandbox per sandbox id, streams its output, reports its exit, and destroys the sandbox.
 * The bridge core owns deadlines, output caps, cancellation and the destroy-on-every-path rule.
 */

import { brandClass } from "@remote-task/internal";
import type { HealthResponse, NetworkPolicy } from "@remote-task/protocol";
import type { NetworkMode } from "./network.js";
import type { CallSecret } from "./secrets.js";

/** What the bridge asks a backend to run. */
export interface ExecSpec {
  /** Valid per the protocol's `sandboxIdSchema`; the bridge refuses a second concurrent call for it. */
  sandboxId: string;
  /** Run as `/bin/sh -c <command>` (or the platform's equivalent). */
  command: string;
  /** Absolute working directory inside the sandbox (default `/workspace`). */
  cwd: string;
  /** Extra environment for the command; never log or echo the values. */
  env: Readonly<Record<string, string>>;
  /**
   * Where the command may connect, already checked against the deployer's ceiling and the
   * backend's {@link SandboxBackend.networkModes}; undefined for a backend that controls none.
   */
  network?: NetworkPolicy | undefined;
  /**
   * True when `network` is an allowlist the caller chose under an `open` ceiling: its IP literals
   * are then the caller's, and get no exemption from the rules that keep non-public addresses and
   * the host's own out of reach (only the deployer's literals do).
   */
  callersAllowlist?: boolean | undefined;
  /**
   * The secrets the call asked for (only for a backend with {@link SandboxBackend.injectsSecrets}):
   * `env` already holds each one's placeholder; the backend's egress proxy puts the value into
   * request headers to the secret's hosts (`network` already allows them). Never log a value.
   */
  secrets?: readonly CallSecret[] | undefined;
  /**
   * Bytes for the command's standard input, then end of input; undefined: empty input. A command
   * that does not read it must not be held up by it.
   */
  stdin?: Uint8Array | undefined;
  /** The bridge's deadline in ms; a backend may pass it on as a hint, the bridge enforces it. */
  timeoutMs: number;
  /**
   * Aborted when the call ends early (timeout, cancel, client disconnect, bridge shutdown). The
   * backend must then stop the command promptly; `destroy()` follows in every case.
   */
  signal: AbortSignal;
}

/** One piece of output, in the order the backend saw it. */
export interface OutputChunk {
  stream: "stdout" | "stderr";
  /** Raw bytes, or text for backends that only see decoded text. */
  data: Uint8Array | string;
}

/** A command that has started. */
export interface RunningCommand {
  /** Output of both streams; ends when the command's output is closed. Consumed exactly once. */
  output: AsyncIterable<OutputChunk>;
  /** Settles with the exit code once the command ended by itself; rejects on backend failure. */
  exit: Promise<number>;
  /**
   * Whether the sandbox was started ahead of the call (a warm pool) rather than for it, when the
   * backend keeps such a pool; logged with the call as `warm`.
   */
  warm?: boolean | undefined;
}

/** What a backend may add to `GET /health`: the fields the bridge does not fill itself. */
export type BackendHealth = Pick<HealthResponse, "warmPool" | "sandbox">;

/** A sandbox technology as the bridge uses it (see the top of this file). */
export interface SandboxBackend {
  /** Reported by `/health` as `backend`, e.g. `local`, `cloudflare`. */
  readonly name: string;
  /** Isolation actually in force, reported by `/health`: `container`, `bwrap` or `none`. */
  readonly isolation: string;
  /**
   * The network policies this backend enforces for a call (`none`, `allow`, `open`); absent or
   * empty when it controls no network access (the bridge then refuses `network` with 403).
   */
  readonly networkModes?: readonly NetworkMode[] | undefined;
  /**
   * True when the backend's egress proxy injects {@link ExecSpec.secrets}; the bridge refuses a
   * `secrets` option (and a call's `secrets`) otherwise.
   */
  readonly injectsSecrets?: boolean | undefined;
  /** Creates a fresh sandbox for `spec.sandboxId` and starts the command in it. */
  start(spec: ExecSpec): Promise<RunningCommand>;
  /**
   * Stops everything in the sandbox and removes it. Idempotent; safe for a never-started id.
   * A failure rejects (with a message safe to log); the bridge logs it as `destroy_failed`.
   */
  destroy(sandboxId: string): Promise<void>;
  /**
   * Optional: fields this backend adds to `GET /health` (e.g. its warm pool). Should answer
   * quickly; a rejection leaves the fields out and is logged as `internal_error`.
   */
  health?(): Promise<BackendHealth>;
  /**
   * Optional, for a backend whose calls may reach the network: never let a sandbox connect to
   * `endpoint` (where the bridge itself listens: its port on any address of this machine). The
   * Node host (`startEmbeddedBridge`) calls it with its own address.
   */
  excludeFromEgress?(endpoint: { host: string; port: number }): void;
}

export type BackendErrorCode = "invalid_request" | "capacity_exceeded" | "sandbox_error";

/**
 * The only error a backend should throw on purpose. `message` must be safe to show to the
 * caller (no env values, no secrets); anything else thrown becomes a generic `sandbox_error`.
 */
export class BackendError extends Error {
  static readonly isInstance = brandClass(this, "remote-task.BackendError");
  override readonly name = "BackendError";

  constructor(
    readonly code: BackendErrorCode,
    message: string,
    readonly details: {
      /** For `invalid_request`: the request field at fault, e.g. `["cwd"]`. */
      path?: ReadonlyArray<string | number>;
      /** For `capacity_exceeded`: when to try again. */
      retryAfterSeconds?: number;
      cause?: unknown;
    } = {},
  ) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
  }
}
