/**
 * Cloudflare containers through `@cloudflare/sandbox`, the only module that imports it (a move to
 * another SDK version touches this file alone): the `Sandbox` Durable Object class, a sandbox's
 * stub, starting and destroying its container, reading a command's event stream, and turning
 * what the SDK throws into the bridge's errors. The backend and the warm pool build on it.
 */
import {
  ContainerUnavailableError,
  type ExecEvent,
  getSandbox,
  parseSSEStream,
  type SandboxOptions,
  Sandbox as SdkSandbox,
} from "@cloudflare/sandbox";
import {
  BackendError,
  type ExecSpec,
  type OutputChunk,
  type RunningCommand,
} from "@remote-task/bridge";
import { CLOUDFLARE_TEXTS, redact, shorten } from "@remote-task/internal";
import { withinMs } from "./within.js";

/**
 * The SDK's `Sandbox` Durable Object, with the internet off unless a start asks for it. Every
 * start the Worker makes says which it wants (the call's network policy); a start the SDK makes
 * by itself (a request reaching a container that stopped) then gets no internet, where the SDK's
 * default would give it the internet whatever the call asked for.
 */
export class Sandbox extends SdkSandbox {
  override enableInternet: boolean | undefined = false;
}

/** The part of the SDK's sandbox stub the Worker uses (typed against the real SDK). */
export type SandboxHandle = Pick<
  Sandbox,
  "startAndWaitForPorts" | "execStream" | "writeFile" | "destroy" | "getState"
>;

/** The `Sandbox` Durable Object namespace binding (`env.Sandbox`). */
export type SandboxNamespace = DurableObjectNamespace<Sandbox>;

/** The network policies a Cloudflare container can be held to (README: "Network"). */
export type ContainerNetwork = "none" | "open";

/** The network policies a call's container can be held to: the internet off, or on. */
export const CONTAINER_NETWORK_MODES = ["none", "open"] as const;

/** What the SDK's container path sends as `Retry-After` when no instance is free. */
const DEFAULT_RETRY_AFTER_SECONDS = 10;
const MAX_SDK_MESSAGE_LENGTH = 300;
/** The container server's port, which the SDK sends every command to. */
const CONTROL_PORT = 3000;
/** The SDK's own defaults for placing a container and for its server to come up. */
const MAX_INSTANCE_WAIT_MS = 30_000;
const MAX_PORT_READY_MS = 90_000;
/** Longest a container start may take: the SDK's placement and readiness limits together. */
export const MAX_START_MS = MAX_INSTANCE_WAIT_MS + MAX_PORT_READY_MS;
const START_POLL_INTERVAL_MS = 300;
/** Longest wait for a container's state before it counts as dead. */
const STATE_TIMEOUT_MS = 5_000;

/** Lower-case fragments of the platform's messages when no container can be placed. */
const CAPACITY_SIGNATURES = [
  "there is no container instance that can be provided to this durable object",
  "there is no container instance available at this time",
  "maximum number of running container instances exceeded",
];
const CONTAINERS_DISABLED_SIGNATURE = "containers have not been enabled";

export const CONTAINERS_DISABLED_MESSAGE = CLOUDFLARE_TEXTS.containersDisabled;

/**
 * The SDK's stub for the sandbox `name`, configured for one sessionless command; `sleepAfter`
 * ends its container should every destroy fail.
 */
export function sandboxHandle(
  namespace: SandboxNamespace,
  name: string,
  sleepAfter?: string | number | undefined,
): SandboxHandle {
  const options: SandboxOptions = {
    // Ids are already lowercase-valid (protocol schema, or the Worker's own names), so no
    // normalisation is needed and the Durable Object key is exactly the name given.
    normalizeId: false,
    // One command per sandbox: run it as a fresh process rather than in a shared shell
    // session, so `exit 3` is an exit code and not a terminated session.
    enableDefaultSession: false,
  };
  if (sleepAfter !== undefined) options.sleepAfter = sleepAfter;
  return getSandbox(singleUse(namespace), name, options);
}

/**
 * Starts the sandbox's container on the control port with the internet on or off as `network`
 * says, and waits until its server answers; `budgetMs` bounds placement and readiness. The SDK's
 * own promise: the caller bounds the wait (and keeps it, to know when the start really ended).
 */
export function startContainer(
  sandbox: SandboxHandle,
  budgetMs: number,
  network: ContainerNetwork,
): Promise<void> {
  return sandbox.startAndWaitForPorts({
    ports: CONTROL_PORT,
    startOptions: { enableInternet: network === "open" },
    cancellationOptions: {
      // Half the budget for placement, so that "no instance" is reported (capacity) while
      // the call can still answer it.
      instanceGetTimeoutMS: Math.max(
        START_POLL_INTERVAL_MS,
        Math.min(MAX_INSTANCE_WAIT_MS, budgetMs / 2),
      ),
      portReadyTimeoutMS: Math.max(START_POLL_INTERVAL_MS, budgetMs),
      waitInterval: START_POLL_INTERVAL_MS,
    },
  });
}

/** Whether the sandbox's container is up and its server answered (the SDK's `healthy`). */
export async function isServing(sandbox: SandboxHandle): Promise<boolean> {
  try {
    const state = await withinMs(sandbox.getState(), STATE_TIMEOUT_MS, () => new Error("getState"));
    return state.status === "healthy";
  } catch {
    return false;
  }
}

/** One `destroy()` of the SDK, bounded: it coalesces destroys but never bounds them. */
export function destroySandbox(sandbox: SandboxHandle, timeoutMs: number): Promise<void> {
  // A stuck control plane must not keep the Worker's `waitUntil` alive forever.
  return withinMs(
    sandbox.destroy(),
    timeoutMs,
    () => new Error(`destroy() did not finish within ${timeoutMs} ms`),
  );
}

/**
 * A fresh view of the namespace for one `getSandbox` call. The SDK remembers each id's
 * configuration per namespace object for the life of the isolate; with a new id per call that
 * memory would only grow, so each call gets its own short-lived key instead.
 */
function singleUse(namespace: SandboxNamespace): SandboxNamespace {
  const view: Pick<SandboxNamespace, "idFromName" | "get"> = {
    idFromName: (name) => namespace.idFromName(name),
    get: (id, options) => namespace.get(id, options),
  };
  return view as SandboxNamespace;
}

/**
 * Turns the SDK's SSE stream into the bridge's output iterable and exit promise. `cwdMissing` is
 * what the task script prints, before any output, when it cannot enter the cwd.
 */
export function readCommand(
  stream: ReadableStream<Uint8Array>,
  spec: ExecSpec,
  cwdMissing: string,
): RunningCommand {
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
      let first = true;
      for await (const event of parseSSEStream<ExecEvent>(stream, spec.signal)) {
        if (event.type === "stdout" || event.type === "stderr") {
          if (first && event.type === "stderr" && event.data === cwdMissing) {
            settle({ error: missingCwdError(spec.cwd) });
            return;
          }
          first = false;
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
      settle({ error: spec.signal.aborted ? abortedError() : brokenStreamError(error, spec.env) });
    } finally {
      // Reached early when the reader stops (abort or a consumer that breaks out).
      if (!settled) settle({ error: abortedError() });
      stream.cancel().catch(() => {});
    }
  }

  return { output: output(), exit };
}

function missingCwdError(cwd: string): BackendError {
  return new BackendError("invalid_request", CLOUDFLARE_TEXTS.missingCwd(cwd.slice(0, 200)), {
    path: ["cwd"],
  });
}

/** The output stream failed mid-command: the SDK's words say how, not what it means. */
function brokenStreamError(error: unknown, env: Readonly<Record<string, string>>): BackendError {
  const mapped = toBackendError(error, env);
  if (mapped.code !== "sandbox_error") return mapped;
  return sandboxError(CLOUDFLARE_TEXTS.brokenStream(mapped.message), error);
}

/** The call was stopped (aborted) before its command ended. */
export function abortedError(): BackendError {
  return sandboxError(CLOUDFLARE_TEXTS.stopped);
}

/** A `sandbox_error` failure with `message`, which must be safe to show to the caller. */
export function sandboxError(message: string, cause?: unknown): BackendError {
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
