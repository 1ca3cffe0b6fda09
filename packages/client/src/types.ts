import type {
  CallStatus,
  HealthResponse,
  NetworkPolicy,
  Outcome,
  StreamEvent,
} from "@remote-task/protocol";
import type { RemoteTaskError } from "./errors.js";
import type { StdinInput } from "./stdin.js";

/**
 * An undici `Dispatcher` (`Agent`, `Pool`, `ProxyAgent`, ...), described by the one method the
 * client relies on, so these declarations need neither undici's types nor Node.js's (which
 * undici's pull in): a browser or Worker project typechecks them with its own lib.
 */
export interface UndiciDispatcher {
  dispatch(options: never, handler: never): boolean;
}

export interface RetryOptions {
  /** Most attempts in all, the first included (default 4). */
  maxAttempts?: number | undefined;
  /** First backoff in ms before jitter (default 250). */
  initialDelayMs?: number | undefined;
  /** Longest single backoff in ms (default 10_000). */
  maxDelayMs?: number | undefined;
  /** Most time spent waiting between attempts, in ms (default 30_000). */
  maxTotalMs?: number | undefined;
  /**
   * A call refused for capacity (HTTP 429, or 503 `capacity_exceeded`: the command did not run)
   * waits for room and tries again until its own deadline (timeout plus grace), outside the
   * attempt and time budget above (default true). The wait honours the bridge's `Retry-After`,
   * with jitter; once sent, the command gets its whole timeout. With `false`, such refusals
   * count against the budget like an unreachable bridge.
   */
  patient?: boolean | undefined;
  /** Called before each wait for another attempt (logging, metrics). */
  onRetry?: ((info: RetryInfo) => void) | undefined;
}

/** What {@link RetryOptions.onRetry} is told before the client waits and tries again. */
export interface RetryInfo {
  /** The attempt that just failed, 1 for the first. */
  attempt: number;
  /** How long the client waits before the next attempt. */
  delayMs: number;
  /** Why the attempt failed (a `ConnectionError` or `CapacityError`). */
  error: RemoteTaskError;
}

/** One bridge of a client with several (see {@link ClientOptions.bridges}). */
export interface BridgeOptions {
  /** Base URL of the bridge, e.g. `https://bridge.example.workers.dev`. */
  url: string | URL;
  /** Bearer token the bridge expects. */
  token?: string | undefined;
  /**
   * How an `AuthenticationError` names where `token` came from, e.g. `--token` for a command
   * line flag (default: the `token` option; `clientFromEnv` names the variable it read).
   */
  tokenSource?: string | undefined;
}

export interface ClientOptions extends Partial<BridgeOptions> {
  /**
   * Several bridges instead of `url` and `token`, in the order calls try them: a call refused
   * for capacity by one (so it did not run there) goes to the next at once; a call that may have
   * run is never sent elsewhere. `cancel()` reaches the bridge that took the call.
   */
  bridges?: ReadonlyArray<BridgeOptions> | undefined;
  /** Default working directory inside each sandbox (default `/workspace`). */
  cwd?: string | undefined;
  /** Prefix of generated sandbox ids (default `mikan-task`). */
  idPrefix?: string | undefined;
  /** Default per-task timeout in seconds (default 120). */
  timeoutSeconds?: number | undefined;
  /**
   * Extra client-side time beyond the task timeout before a call is abandoned; covers cold start
   * and transfer (default: the call's own timeout, at least 10 s and at most 30 s). `health()` and
   * `cancel()` are bounded by this alone (by default, the grace of the client's `timeoutSeconds`).
   */
  graceSeconds?: number | undefined;
  /**
   * In streaming mode, the longest silence (no event, heartbeats included) before the call is
   * abandoned with a `TimeoutError` (default 45 s; bridges send a heartbeat at least every 15 s).
   */
  idleTimeoutSeconds?: number | undefined;
  /** Most connections the client's own Agent opens per origin (default 128). */
  maxConnections?: number | undefined;
  /** Retry policy for what provably did not run; `false` disables retries. */
  retry?: RetryOptions | false | undefined;
  /**
   * undici dispatcher to send through, such as an undici `Agent` or `ProxyAgent` (default: a
   * keep-alive Agent owned by the client).
   */
  dispatcher?: UndiciDispatcher | undefined;
  /** A Fetch API implementation to use instead of undici (runtimes without undici, msw tests). */
  fetch?: typeof globalThis.fetch | undefined;
  /**
   * Largest health or cancel answer and largest stream event the client holds (default 16 MiB).
   * Exec results of any size are read: whole up to 4 MiB (or this, when lower), beyond that as
   * they arrive, keeping `maxOutputBytes` of each output.
   */
  maxResponseBytes?: number | undefined;
}

export interface OutputEvent {
  stream: "stdout" | "stderr";
  data: string;
  /**
   * Bytes of this stream the bridge skipped just before `data`, because this reader fell behind
   * (`data` may then be empty). The final result still holds them: its tail and byte totals are
   * whole. Absent when nothing was skipped.
   */
  skippedBytes?: number;
}

export interface RunOptions {
  /** Server-side deadline in seconds (default: the client's `timeoutSeconds`). */
  timeoutSeconds?: number | undefined;
  /** Working directory inside the sandbox. */
  cwd?: string | undefined;
  /** Extra environment for the command. Values never appear in errors. */
  env?: Readonly<Record<string, string>> | undefined;
  /** Aborts the call and sends a best-effort cancel for its sandbox. */
  signal?: AbortSignal | undefined;
  /** Receive output as it arrives (uses the streaming mode). */
  onOutput?: ((event: OutputEvent) => void) | undefined;
  /**
   * Keep at most this many bytes of the end of each output (default 1 MiB): asked of the bridge,
   * and kept by the client itself when a bridge sends more.
   */
  maxOutputBytes?: number | undefined;
  /**
   * Use this sandbox id instead of a fresh one (it must follow the protocol's id rules; upper-case
   * letters are lower-cased, as the reference bridge does).
   */
  sandboxId?: string | undefined;
  /**
   * Where the command may connect: `"none"`, `"open"` or `{allow: ["pypi.org", "*.example.com:443"]}`
   * (default: the bridge's default). More than the bridge's ceiling is a `ForbiddenError` (403).
   * Needs a protocol 2 bridge.
   */
  network?: NetworkPolicy | undefined;
  /**
   * The command's standard input, then end of input: a string is sent as UTF-8 text, bytes as
   * base64. Without it stdin is empty. Needs a protocol 2 bridge.
   */
  stdin?: StdinInput | undefined;
  /**
   * Secrets the command may use, by name, among those the bridge declares (its `/health` lists
   * them): the command sees a placeholder in `env` under each name, and the bridge puts the value
   * into request headers to the secret's hosts only. A name the bridge does not declare is a
   * `ForbiddenError` (403); a bridge that does not know the field refuses it (400).
   */
  secrets?: readonly string[] | undefined;
}

export interface TaskResult {
  sandboxId: string;
  /** The end of stdout, at most `maxOutputBytes` of it (the whole of it unless `stdoutTruncated`). */
  stdout: string;
  stderr: string;
  /** Exit code; 124 when `outcome` is `timeout`. */
  exitCode: number;
  outcome: Outcome;
  durationMs: number;
  /** Total bytes the command wrote, even when the retained text is only the tail. */
  stdoutBytes: number;
  stderrBytes: number;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
}

/** What `client.cancel()` did. */
export interface CancelResult {
  sandboxId: string;
  /** A running command was found and stopped (always false when `supported` is false). */
  cancelled: boolean;
  /**
   * False when the bridge has no `/cancel` (it answered 404 or 405 there, as the reference bridge
   * does): nothing was stopped, and a command still running ends at its own timeout.
   */
  supported: boolean;
}

export interface Task extends Omit<RunOptions, "signal" | "onOutput"> {
  command: string;
}

export type SettledTask =
  | { status: "fulfilled"; value: TaskResult; task: Task; index: number }
  | { status: "rejected"; reason: RemoteTaskError; task: Task; index: number };

export interface Progress {
  done: number;
  failed: number;
  total: number;
}

export interface RunManyOptions {
  /**
   * Most tasks in flight at once (default 64): a ceiling. Below it runMany runs as many as the
   * bridges can take: it starts from the free capacity their `/health` reports (8 when they report
   * none), grows on each success and halves when a bridge refuses a call for capacity.
   */
  concurrency?: number | undefined;
  signal?: AbortSignal | undefined;
  onProgress?: ((progress: Progress, settled: SettledTask) => void) | undefined;
}

/** How long a handle's call is waited for, and the caller's way to stop waiting. */
export interface HandleWaitOptions {
  signal?: AbortSignal | undefined;
  /**
   * Seconds the call may still run: the wait ends this long (plus the grace period) from now
   * with a `TimeoutError`; the call itself runs on. Default: the call's own timeout for a handle
   * from `start()`, the client's `timeoutSeconds` for one from `attach()`.
   */
  timeoutSeconds?: number | undefined;
}

/**
 * A durable call by its sandbox id (`client.start()`, `client.attach()`): nothing it does can
 * run the command again. Needs a bridge whose `/health` reports `durable` (protocol 3).
 */
export interface CallHandle {
  readonly sandboxId: string;
  /** The call's state now (or after up to `waitSeconds` for its end): queued, running, finished, expired or unknown. */
  status(options?: HandleWaitOptions & { waitSeconds?: number | undefined }): Promise<CallStatus>;
  /** Waits for the call to end and returns its result, as `run()` would have. */
  result(options?: HandleWaitOptions): Promise<TaskResult>;
  /**
   * The call's events from byte offsets of each output (default 0: what the bridge retains),
   * then its live output and `exit`; re-attached by itself when the connection drops.
   */
  stream(
    options?: HandleWaitOptions & {
      from?: { stdout?: number | undefined; stderr?: number | undefined } | undefined;
    },
  ): AsyncIterable<StreamEvent>;
  /** Stops the command and destroys its sandbox. */
  cancel(options?: { signal?: AbortSignal | undefined }): Promise<CancelResult>;
}

export interface RemoteTaskClient {
  run(command: string, options?: RunOptions): Promise<TaskResult>;
  /** The streamed protocol events of one call (`start`, `stdout`, `stderr`, `heartbeat`, `exit`). */
  stream(command: string, options?: Omit<RunOptions, "onOutput">): AsyncIterable<StreamEvent>;
  runMany(tasks: ReadonlyArray<string | Task>, options?: RunManyOptions): Promise<SettledTask[]>;
  /**
   * Starts a detached call and returns its handle once the bridge took it: the command runs to
   * its own deadline whatever happens to this client (durable calls; the bridge must report
   * `durable` in `/health`, else an `InvalidRequestError` and nothing is sent).
   */
  start(command: string, options?: Omit<RunOptions, "onOutput">): Promise<CallHandle>;
  /** A handle on the call `sandboxId`, from any process (the first bridge that knows it). */
  attach(sandboxId: string): CallHandle;
  health(options?: { signal?: AbortSignal | undefined }): Promise<HealthResponse>;
  /**
   * Stops the command of the call with this sandbox id and destroys its sandbox. Resolves with
   * `supported: false` (and throws nothing) when the bridge has no `/cancel`, as the reference
   * bridge has none.
   */
  cancel(sandboxId: string, options?: { signal?: AbortSignal | undefined }): Promise<CancelResult>;
  /** Closes the client's own connection pool (not an injected dispatcher). */
  close(): Promise<void>;
}
