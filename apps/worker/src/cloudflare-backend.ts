/**
 * The only module that imports `@cloudflare/sandbox`: a move to another SDK version touches
 * this file alone.
 */
import {
  ContainerUnavailableError,
  type ExecEvent,
  getSandbox,
  parseSSEStream,
  type Sandbox,
  type SandboxOptions,
} from "@cloudflare/sandbox";
import {
  BackendError,
  type ExecSpec,
  type OutputChunk,
  type RunningCommand,
  type SandboxBackend,
} from "@remote-task/bridge";
import { CLOUDFLARE_TEXTS, raceAbort, redact, shorten } from "@remote-task/internal";

export { Sandbox } from "@cloudflare/sandbox";

/** The part of the SDK's sandbox stub this backend uses (typed against the real SDK). */
export type SandboxHandle = Pick<Sandbox, "execStream" | "destroy">;

export interface CloudflareSandboxBackendOptions {
  /** The `Sandbox` Durable Object namespace binding (`env.Sandbox`). */
  namespace: DurableObjectNamespace<Sandbox>;
  /** Passed to `getSandbox` as `sleepAfter`; a backstop, since every sandbox is destroyed. */
  sleepAfter?: string | number | undefined;
  /** Longest wait for one `destroy()` before it fails (default 30 s). */
  destroyTimeoutMs?: number | undefined;
}

/** Extra time given to the SDK's own command timeout so the bridge's deadline always fires first. */
const SDK_TIMEOUT_GRACE_MS = 5_000;
/** What the SDK's container path sends as `Retry-After` when no instance is free. */
const DEFAULT_RETRY_AFTER_SECONDS = 10;
const DEFAULT_DESTROY_TIMEOUT_MS = 30_000;
const MAX_SDK_MESSAGE_LENGTH = 300;

/** Lower-case fragments of the platform's messages when no container can be placed. */
const CAPACITY_SIGNATURES = [
  "there is no container instance that can be provided to this durable object",
  "there is no container instance available at this time",
  "maximum number of running container instances exceeded",
];
const CONTAINERS_DISABLED_SIGNATURE = "containers have not been enabled";

export const CONTAINERS_DISABLED_MESSAGE = CLOUDFLARE_TEXTS.containersDisabled;

/**
 * Runs each command in a fresh Cloudflare container (one `Sandbox` Durable Object per
 * sandbox id) and streams its output, so the Worker holds only what the bridge retains.
 */
export class CloudflareSandboxBackend implements SandboxBackend {
  readonly name = "cloudflare";
  readonly isolation = "container";
  readonly #options: CloudflareSandboxBackendOptions;

  constructor(options: CloudflareSandboxBackendOptions) {
    this.#options = options;
  }

  async start(spec: ExecSpec): Promise<RunningCommand> {
    if (spec.signal.aborted) throw abortedError();
    let stream: ReadableStream<Uint8Array>;
    try {
      const sandbox = this.#sandbox(spec.sandboxId);
      // The signal is not passed over RPC (an AbortSignal cannot cross it); aborting while
      // the container starts is handled by racing it, and `destroy()` follows in every case.
      const pending = sandbox.execStream(spec.command, {
        timeout: spec.timeoutMs + SDK_TIMEOUT_GRACE_MS,
        cwd: spec.cwd,
        env: { ...spec.env },
      });
      // A stream that arrives after the abort is released at once.
      pending.then(
        (late) => {
          if (spec.signal.aborted) late.cancel().catch(() => {});
        },
        () => {},
      );
      stream = await raceAbort(pending, spec.signal, { abortError: abortedError });
    } catch (error) {
      throw toBackendError(error, spec.env);
    }
    return readCommand(stream, spec);
  }

  /**
   * A failure (or a destroy stuck past `destroyTimeoutMs`) rejects, and the bridge logs it; the
   * container then stops by itself once its `sleepAfter` expires.
   */
  async destroy(sandboxId: string): Promise<void> {
    const timeoutMs = this.#options.destroyTimeoutMs ?? DEFAULT_DESTROY_TIMEOUT_MS;
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      const destroyed = this.#sandbox(sandboxId).destroy();
      // The SDK coalesces destroys but never bounds them; a stuck control plane must not keep
      // the Worker's `waitUntil` alive forever.
      const timedOut = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`destroy() did not finish within ${timeoutMs} ms`)),
          timeoutMs,
        );
      });
      await Promise.race([destroyed, timedOut]);
    } finally {
      if (timer !== undefined) clearTimeout(timer);
    }
  }

  #sandbox(sandboxId: string): SandboxHandle {
    const options: SandboxOptions = {
      // Ids are already lowercase-valid (protocol schema), so no normalisation is needed and
      // the Durable Object key is exactly the id the caller chose.
      normalizeId: false,
      // One command per sandbox: run it as a fresh process rather than in a shared shell
      // session, so `exit 3` is an exit code and not a terminated session.
      enableDefaultSession: false,
    };
    if (this.#options.sleepAfter !== undefined) options.sleepAfter = this.#options.sleepAfter;
    return getSandbox(singleUse(this.#options.namespace), sandboxId, options);
  }
}

/**
 * A fresh view of the namespace for one `getSandbox` call. The SDK remembers each id's
 * configuration per namespace object for the life of the isolate; with a new id per call that
 * memory would only grow, so each call gets its own short-lived key instead.
 */
function singleUse(namespace: DurableObjectNamespace<Sandbox>): DurableObjectNamespace<Sandbox> {
  const view: Pick<DurableObjectNamespace<Sandbox>, "idFromName" | "get"> = {
    idFromName: (name) => namespace.idFromName(name),
    get: (id, options) => namespace.get(id, options),
  };
  return view as DurableObjectNamespace<Sandbox>;
}

/** Turns the SDK's SSE stream into the bridge's output iterable and exit promise. */
function readCommand(stream: ReadableStream<Uint8Array>, spec: ExecSpec): RunningCommand {
  let settled = false;
  let settle!: (outcome: { code: number } | { error: unknown }) => void;
  const exit = new Promise<number>((resolve, reject) => {
    settle = (outcome) => {
      if (settled) return;
      settled = true;
      if ("code" in outcome) resolve(outcome.code);
      else reject(outcome.error);
    };
  });
  // The bridge may stop listening after an abort; a late rejection must not go unhandled.
  exit.catch(() => {});

  async function* output(): AsyncGenerator<OutputChunk> {
    try {
      for await (const event of parseSSEStream<ExecEvent>(stream, spec.signal)) {
        if (event.type === "stdout" || event.type === "stderr") {
          if (event.data) yield { stream: event.type, data: event.data };
        } else if (event.type === "complete") {
          const code = event.exitCode ?? event.result?.exitCode;
          if (typeof code === "number" && Number.isInteger(code)) settle({ code });
          else settle({ error: sandboxError(CLOUDFLARE_TEXTS.noExitCode) });
          return;
        } else if (event.type === "error") {
          const reason = event.error ?? event.data ?? "the command could not be run";
          settle({
            error: sandboxError(CLOUDFLARE_TEXTS.failed(undefined, safeText(reason, spec.env))),
          });
          return;
        }
      }
      settle({
        error: spec.signal.aborted ? abortedError() : sandboxError(CLOUDFLARE_TEXTS.closedEarly),
      });
    } catch (error) {
      settle({ error: spec.signal.aborted ? abortedError() : toBackendError(error, spec.env) });
    } finally {
      // Reached early when the reader stops (abort or a consumer that breaks out).
      if (!settled) settle({ error: abortedError() });
      stream.cancel().catch(() => {});
    }
  }

  return { output: output(), exit };
}

function abortedError(): BackendError {
  return sandboxError(CLOUDFLARE_TEXTS.stopped);
}

function sandboxError(message: string, cause?: unknown): BackendError {
  return new BackendError("sandbox_error", message, cause === undefined ? {} : { cause });
}

/**
 * Maps anything the SDK throws to a `BackendError` whose message is safe to show: capacity
 * problems become `capacity_exceeded` (retryable), everything else `sandbox_error`.
 * Errors cross the Durable Object RPC boundary as plain errors, so classes are matched by
 * name, code and the platform's message as well as by `instanceof`.
 */
export function toBackendError(error: unknown, env: Readonly<Record<string, string>> = {}) {
  if (BackendError.isInstance(error)) return error;
  const message = messageOf(error);
  const lower = message.toLowerCase();
  if (isCapacityError(error, lower)) {
    return new BackendError("capacity_exceeded", CLOUDFLARE_TEXTS.noContainer, {
      retryAfterSeconds: retryAfterSeconds(error),
      cause: error,
    });
  }
  if (lower.includes(CONTAINERS_DISABLED_SIGNATURE)) {
    return sandboxError(CONTAINERS_DISABLED_MESSAGE, error);
  }
  return sandboxError(CLOUDFLARE_TEXTS.failed(sdkCode(error), safeText(message, env)), error);
}

function isCapacityError(error: unknown, lowerMessage: string): boolean {
  if (error instanceof ContainerUnavailableError) return true;
  if (isRecord(error)) {
    if (error.name === "ContainerUnavailableError") return true;
    if (sdkCode(error) === "CONTAINER_UNAVAILABLE") return true;
  }
  return CAPACITY_SIGNATURES.some((signature) => lowerMessage.includes(signature));
}

function retryAfterSeconds(error: unknown): number {
  const ms =
    error instanceof ContainerUnavailableError
      ? error.retryAfterMs
      : isRecord(error) && isRecord(error.context)
        ? error.context.retryAfterMs
        : undefined;
  return typeof ms === "number" && Number.isFinite(ms) && ms > 0
    ? Math.ceil(ms / 1000)
    : DEFAULT_RETRY_AFTER_SECONDS;
}

function sdkCode(error: unknown): string | undefined {
  if (!isRecord(error)) return undefined;
  const code = error.code;
  return typeof code === "string" && /^[A-Z][A-Z0-9_]{1,63}$/.test(code) ? code : undefined;
}

function messageOf(error: unknown): string {
  if (isRecord(error) && typeof error.message === "string") return error.message;
  return typeof error === "string" ? error : "";
}

/** Shortens an SDK message and removes any env value the caller sent. */
function safeText(text: string, env: Readonly<Record<string, string>>): string {
  return shorten(redact(text, Object.values(env)), MAX_SDK_MESSAGE_LENGTH);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}
