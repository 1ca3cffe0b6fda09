/**
 * The Worker's side of a call's `TaskContainer` (task-container.ts): a container's stub, starting
 * and destroying it, reading a command's frames into the bridge's output, and turning what the
 * platform throws into the bridge's errors. The backend and the warm pool build on it.
 */
import {
  BackendError,
  type CallSecret,
  type ExecSpec,
  type OutputChunk,
  type RunningCommand,
} from "@remote-task/bridge";
import { CLOUDFLARE_TEXTS, redact, shorten } from "@remote-task/internal";
import type { NetworkPolicy } from "@remote-task/protocol";
import { readFrames } from "./exec-frames.js";
import { CAPACITY_SIGNATURES, type TaskContainer } from "./task-container.js";
import { withinMs } from "./within.js";

/** The part of a `TaskContainer` stub the Worker uses. */
export type ContainerHandle = Pick<
  DurableObjectStub<TaskContainer>,
  "start" | "run" | "ready" | "destroy"
>;

/** The `TaskContainer` Durable Object namespace binding (`env.TaskContainer`). */
export type ContainerNamespace = DurableObjectNamespace<TaskContainer>;

/** The network policies a call's container can be held to: none, an allowlist, or open. */
export const CONTAINER_NETWORK_MODES = ["none", "allow", "open"] as const;

/** What the platform is taken to mean as `Retry-After` when no instance is free. */
const DEFAULT_RETRY_AFTER_SECONDS = 10;
const MAX_PLATFORM_MESSAGE_LENGTH = 300;
/** Longest a container start may take: placement and its first command together. */
export const MAX_START_MS = 60_000;
/** Longest wait for whether a container is ready before it counts as dead. */
const STATE_TIMEOUT_MS = 5_000;

/** The platform's words when a class has no containers (and this Worker's own, after RPC). */
const CONTAINERS_DISABLED_SIGNATURE = "containers have not been enabled";

export const CONTAINERS_DISABLED_MESSAGE = CLOUDFLARE_TEXTS.containersDisabled;

/** The stub of the container object `name`. */
export function containerHandle(namespace: ContainerNamespace, name: string): ContainerHandle {
  return namespace.get(namespace.idFromName(name));
}

/**
 * Starts the container with the internet as `network` says, and waits until it runs commands;
 * `budgetMs` bounds placement and readiness; `backstopMs` is when the object destroys it by
 * itself should every destroy fail; `secrets` are the call's, for its egress gate. The caller
 * bounds the wait (and keeps the promise, to know when the start really ended).
 */
export function startContainer(
  handle: ContainerHandle,
  budgetMs: number,
  network: NetworkPolicy,
  backstopMs: number,
  secrets: readonly CallSecret[] = [],
): Promise<void> {
  return handle.start({
    network,
    budgetMs,
    backstopMs,
    ...(secrets.length === 0 ? {} : { secrets: [...secrets] }),
  });
}

/** Whether the container is up and has run nothing yet. */
export async function isServing(handle: ContainerHandle): Promise<boolean> {
  try {
    return await withinMs(handle.ready(), STATE_TIMEOUT_MS, () => new Error("ready"));
  } catch {
    return false;
  }
}

/** One `destroy()` of a container object, bounded. */
export function destroyContainer(handle: ContainerHandle, timeoutMs: number): Promise<void> {
  // A stuck control plane must not keep the Worker's `waitUntil` alive forever.
  return withinMs(
    handle.destroy(),
    timeoutMs,
    () => new Error(`destroy() did not finish within ${timeoutMs} ms`),
  );
}

/**
 * Turns a command's frames (exec-frames.ts) into the bridge's output iterable and exit promise.
 * `cwdMissing` is what the task script prints on stderr, before any output, when it cannot
 * enter the cwd.
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
  const marker = new TextEncoder().encode(cwdMissing);

  async function* output(): AsyncGenerator<OutputChunk> {
    const reader = stream.getReader();
    const stopReading = () => {
      reader.cancel().catch(() => {});
    };
    spec.signal.addEventListener("abort", stopReading, { once: true });
    const chunks = async function* () {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        yield value;
      }
    };
    try {
      let first = true;
      for await (const frame of readFrames(chunks())) {
        if (spec.signal.aborted) break;
        if (frame.type === "stdout" || frame.type === "stderr") {
          if (first && frame.type === "stderr" && sameBytes(frame.data, marker)) {
            settle({ error: missingCwdError(spec.cwd) });
            return;
          }
          first = false;
          yield { stream: frame.type, data: frame.data };
        } else if (frame.type === "exit") {
          settle({ code: frame.code });
          return;
        } else if (frame.type === "error") {
          settle({
            error: sandboxError(CLOUDFLARE_TEXTS.brokenStream(safeText(frame.message, spec.env))),
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
      spec.signal.removeEventListener("abort", stopReading);
      // Reached early when the reader stops (abort or a consumer that breaks out).
      if (!settled) settle({ error: abortedError() });
      stopReading();
    }
  }

  return { output: output(), exit };
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.byteLength === b.byteLength && a.every((byte, index) => byte === b[index]);
}

function missingCwdError(cwd: string): BackendError {
  return new BackendError("invalid_request", CLOUDFLARE_TEXTS.missingCwd(cwd.slice(0, 200)), {
    path: ["cwd"],
  });
}

/** The output stream failed mid-command: the platform's words say how, not what it means. */
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
 * Maps anything the platform throws to a `BackendError` whose message is safe to show: capacity
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
  if (
    lower.includes(CONTAINERS_DISABLED_SIGNATURE) ||
    message.includes(CONTAINERS_DISABLED_MESSAGE)
  ) {
    return sandboxError(CONTAINERS_DISABLED_MESSAGE, error);
  }
  return sandboxError(CLOUDFLARE_TEXTS.failed(errorCode(error), safeText(message, env)), error);
}

function isCapacityError(error: unknown, lowerMessage: string): boolean {
  if (isRecord(error) && errorCode(error) === "CONTAINER_UNAVAILABLE") return true;
  return CAPACITY_SIGNATURES.some((signature) => lowerMessage.includes(signature));
}

function retryAfterSeconds(error: unknown): number {
  const ms = isRecord(error) && isRecord(error.context) ? error.context.retryAfterMs : undefined;
  return typeof ms === "number" && Number.isFinite(ms) && ms > 0
    ? Math.ceil(ms / 1000)
    : DEFAULT_RETRY_AFTER_SECONDS;
}

function errorCode(error: unknown): string | undefined {
  if (!isRecord(error)) return undefined;
  const code = error.code;
  return typeof code === "string" && /^[A-Z][A-Z0-9_]{1,63}$/.test(code) ? code : undefined;
}

function messageOf(error: unknown): string {
  if (isRecord(error) && typeof error.message === "string") return error.message;
  return typeof error === "string" ? error : "";
}

/** Shortens a platform message and removes any env value the caller sent. */
function safeText(text: string, env: Readonly<Record<string, string>>): string {
  return shorten(redact(text, Object.values(env)), MAX_PLATFORM_MESSAGE_LENGTH);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}
