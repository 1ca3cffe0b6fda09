import { BackendError, type ExecSpec, type OutputChunk, type SandboxBackend } from "../backend.js";
import type { NetworkMode } from "../network.js";

/** One piece of scripted output. */
export interface FakeChunk {
  stream?: "stdout" | "stderr" | undefined;
  data: string | Uint8Array;
  /** Wait this long before emitting the chunk. */
  delayMs?: number | undefined;
}

/** What a fake command does. Everything is optional: the empty script exits 0 silently. */
export interface FakeScript {
  /** Output, in order. */
  chunks?: FakeChunk[] | undefined;
  /** `repeat` more copies of a chunk, for large outputs without large scripts. */
  repeat?: { chunk: FakeChunk; times: number } | undefined;
  /** Exit code once the output is done (default 0). */
  exitCode?: number | undefined;
  /** Extra wait after the output, before the exit (a quiet command). */
  exitDelayMs?: number | undefined;
  /** Never exits by itself; only abort or destroy ends it. */
  hang?: boolean | undefined;
  /** `start()` rejects with this (e.g. a `BackendError("capacity_exceeded", ...)`). */
  startError?: unknown;
  /** The exit promise rejects with this after the output (a backend dying mid-call). */
  exitError?: unknown;
  /** The output iteration throws this after the chunks. */
  outputError?: unknown;
  /** Ignore the abort signal (only destroy stops the command), like a backend with a lazy kill. */
  ignoreAbort?: boolean | undefined;
}

export type FakeScriptFor = (spec: ExecSpec) => FakeScript | Promise<FakeScript>;

export interface FakeBackendOptions {
  name?: string | undefined;
  isolation?: string | undefined;
  /** Per-command behaviour (default: {@link interpretCommand}, the conformance vocabulary). */
  script?: FakeScriptFor | undefined;
  /** Network policies the fake claims to enforce (it records them in `starts`; default: none). */
  networkModes?: readonly NetworkMode[] | undefined;
  /** Added before every start, like a cold start. */
  startLatencyMs?: number | undefined;
  /** Added before every destroy completes. */
  destroyLatencyMs?: number | undefined;
}

/** What the fake recorded; read it in assertions. */
export interface FakeBackend extends SandboxBackend {
  /** Specs passed to `start`, in order (the signal included). */
  readonly starts: ExecSpec[];
  /** Ids passed to `destroy`, in order (repeats included). */
  readonly destroys: string[];
  /** Sandboxes started and not yet destroyed. */
  liveSandboxes(): number;
  /** Ids of sandboxes started and not yet destroyed. */
  liveIds(): string[];
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (ms <= 0 || signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

const SIGTERM_STATUS = 143;
/** Why a destroyed fake sandbox's command stopped. */
const DESTROYED = new Error("the sandbox was destroyed");

/**
 * Interprets the conformance command vocabulary, statements joined by `; `:
 * `echo WORDS`, `echo WORDS >&2`, `exit N`, `sleep SECONDS`, `yes | head -c BYTES` (optionally
 * `>&2`), `pwd`, `true`, `false`, `cat` (writes `stdin`). Anything else writes
 * `fake: unsupported command` to stderr and exits 127.
 */
export function interpretCommand(
  command: string,
  cwd = "/workspace",
  stdin?: Uint8Array,
): FakeScript {
  const chunks: FakeChunk[] = [];
  let pendingDelay = 0;
  let exitCode = 0;
  for (const raw of command.split(/\s*;\s*/)) {
    const statement = raw.trim();
    if (statement === "") continue;
    const toStderr = /\s+>&2$/.test(statement);
    const stream = toStderr ? "stderr" : "stdout";
    const body = statement.replace(/\s+>&2$/, "");
    const push = (data: string | Uint8Array) => {
      chunks.push({ stream, data, delayMs: pendingDelay });
      pendingDelay = 0;
    };
    const echo = /^echo(?:\s+(.*))?$/.exec(body);
    const exit = /^exit\s+(\d+)$/.exec(body);
    const sleepFor = /^sleep\s+(\d+(?:\.\d+)?)$/.exec(body);
    const yes = /^yes\s*\|\s*head\s+-c\s+(\d+)$/.exec(body);
    exitCode = 0;
    if (echo) {
      push(`${(echo[1] ?? "").split(/\s+/).join(" ")}\n`);
    } else if (exit) {
      return { chunks, exitCode: Number(exit[1]) % 256, exitDelayMs: pendingDelay };
    } else if (sleepFor) {
      pendingDelay += Number(sleepFor[1]) * 1000;
    } else if (yes) {
      const block = "y\n".repeat(32_768);
      for (let remaining = Number(yes[1]); remaining > 0; remaining -= block.length) {
        push(block.slice(0, Math.min(remaining, block.length)));
      }
    } else if (body === "cat") {
      if (stdin !== undefined) push(stdin);
    } else if (body === "pwd") {
      push(`${cwd}\n`);
    } else if (body === "false") {
      exitCode = 1;
    } else if (body !== "true") {
      chunks.push({ stream: "stderr", data: `fake: unsupported command: ${body}\n` });
      return { chunks, exitCode: 127 };
    }
  }
  return { chunks, exitCode, exitDelayMs: pendingDelay };
}

/**
 * An in-memory, scriptable `SandboxBackend` that runs in any runtime. It records every start
 * and destroy and counts live sandboxes, so tests can assert that nothing is left behind.
 */
export function createFakeBackend(options: FakeBackendOptions = {}): FakeBackend {
  const starts: ExecSpec[] = [];
  const destroys: string[] = [];
  const live = new Map<string, AbortController>();
  const script =
    options.script ?? ((spec: ExecSpec) => interpretCommand(spec.command, spec.cwd, spec.stdin));

  return {
    name: options.name ?? "fake",
    isolation: options.isolation ?? "none",
    ...(options.networkModes === undefined ? {} : { networkModes: options.networkModes }),
    starts,
    destroys,
    liveSandboxes: () => live.size,
    liveIds: () => [...live.keys()],

    async start(spec) {
      starts.push(spec);
      if (live.has(spec.sandboxId)) {
        throw new BackendError("sandbox_error", `Sandbox ${spec.sandboxId} already exists.`);
      }
      const killed = new AbortController();
      live.set(spec.sandboxId, killed);
      await sleep(options.startLatencyMs ?? 0);
      const plan = await script(spec);
      if (plan.startError !== undefined) throw plan.startError;
      const stop = plan.ignoreAbort ? killed.signal : AbortSignal.any([killed.signal, spec.signal]);

      let resolveExit!: (code: number) => void;
      let rejectExit!: (error: unknown) => void;
      const exit = new Promise<number>((resolve, reject) => {
        resolveExit = resolve;
        rejectExit = reject;
      });
      async function* output(): AsyncGenerator<OutputChunk> {
        const chunks = [...(plan.chunks ?? [])];
        for (const chunk of chunks) {
          await sleep(chunk.delayMs ?? 0, stop);
          if (stop.aborted) return resolveExit(SIGTERM_STATUS);
          yield { stream: chunk.stream ?? "stdout", data: chunk.data };
        }
        if (plan.repeat !== undefined) {
          for (let i = 0; i < plan.repeat.times; i++) {
            if (stop.aborted) return resolveExit(SIGTERM_STATUS);
            yield { stream: plan.repeat.chunk.stream ?? "stdout", data: plan.repeat.chunk.data };
          }
        }
        if (plan.outputError !== undefined) throw plan.outputError;
        if (plan.hang) {
          await new Promise<void>((resolve) => stop.addEventListener("abort", () => resolve()));
          return resolveExit(SIGTERM_STATUS);
        }
        await sleep(plan.exitDelayMs ?? 0, stop);
        if (stop.aborted) return resolveExit(SIGTERM_STATUS);
        if (plan.exitError !== undefined) return rejectExit(plan.exitError);
        resolveExit(plan.exitCode ?? 0);
      }
      return { output: output(), exit };
    },

    async destroy(sandboxId) {
      destroys.push(sandboxId);
      const killed = live.get(sandboxId);
      if (killed === undefined) return;
      // With a reason: `abort()` alone builds a DOMException and its stack, CPU a benchmark
      // of the bridge would count as the bridge's.
      killed.abort(DESTROYED);
      await sleep(options.destroyLatencyMs ?? 0);
      live.delete(sandboxId);
    },
  };
}
