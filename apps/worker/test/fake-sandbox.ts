/**
 * A stand-in for the SDK's `Sandbox` Durable Object, bound as `Sandbox` in the test Worker.
 * It implements the SDK surface the backend uses, typed against the real SDK so that API drift
 * breaks the typecheck. What a command does is driven by the command text: `fake <json>` runs
 * a {@link FakeScenario}; anything else is read as the bridge's conformance vocabulary (`echo`,
 * `pwd`, `sleep`, `exit`, `yes | head -c`). Everything the Worker did to it is recorded.
 */

import { DurableObject } from "cloudflare:workers";
import { ContainerUnavailableError, type ExecEvent, type Sandbox } from "@cloudflare/sandbox";
import { interpretCommand } from "@remote-task/bridge/testing";
import { INJECTED_FAILURES } from "./expected-runtime-logs.js";

type SandboxSurface = Pick<
  Sandbox,
  | "configure"
  | "startAndWaitForPorts"
  | "writeFile"
  | "execStream"
  | "execStreamWithSessionToken"
  | "destroy"
  | "getState"
>;
type ContainerState = Awaited<ReturnType<Sandbox["getState"]>>;
type StreamOptions = NonNullable<Parameters<Sandbox["execStream"]>[1]>;
type Configuration = Parameters<Sandbox["configure"]>[0];

interface FakeStep {
  stream?: "stdout" | "stderr";
  /** Text of each chunk (repeated `width` times). */
  data: string;
  width?: number;
  /** How many times the chunk is sent (default 1). */
  repeat?: number;
  /** Wait before the step (ms). */
  delayMs?: number;
}

export interface FakeScenario {
  steps?: FakeStep[];
  /** Exit code sent in the `complete` event (default 0). */
  exitCode?: number;
  /** Quiet time after the steps, before the exit. */
  exitDelayMs?: number;
  /** After the steps: never complete (the stream stays open until cancelled). */
  hang?: boolean;
  /** After the steps: send this chunk (`data` repeated `width` times) on stdout forever. */
  endless?: { data: string; width?: number };
  /** `execStream` rejects before any output. */
  startError?: "capacity" | "sdk";
  /** After the steps: an SSE `error` event, or the stream itself errors. */
  failMidStream?: "event" | "throw";
  /** After the steps: the stream closes without a `complete` event. */
  closeWithoutExit?: boolean;
  /** `destroy()` rejects. */
  destroyFails?: boolean;
  /** `destroy()` finishes only once `releaseDestroy()` is called (a slow teardown). */
  destroyWaits?: boolean;
}

export interface FakeState {
  configurations: Configuration[];
  /**
   * Explicit container starts (`startAndWaitForPorts`): the port, the time limits and the
   * internet access asked for.
   */
  starts: Array<{
    ports?: number;
    instanceGetTimeoutMS?: number;
    portReadyTimeoutMS?: number;
    enableInternet?: boolean;
  }>;
  /** Files written with `writeFile`: path, encoding, and the bytes they hold. */
  files: Array<{ path: string; encoding?: string; sessionId?: string; bytes: number[] }>;
  execs: Array<{
    command: string;
    /** The file the task script gave the command as its stdin, if any. */
    stdinFile?: string;
    sessionId: string | null;
    cwd?: string;
    envNames: string[];
    timeout?: number;
  }>;
  destroyCalls: number;
  destroyed: boolean;
  /** The container as `getState()` reports it: started, then stopped by a destroy or a kill. */
  container: "never started" | "healthy" | "stopped";
  streamCancelled: boolean;
  bytesSent: number;
}

/** Builds the command text that makes the fake run `scenario`. */
export function fakeCommand(scenario: FakeScenario): string {
  return `fake ${JSON.stringify(scenario)}`;
}

const STATE_KEY = "state";
const encoder = new TextEncoder();

function frame(event: Omit<ExecEvent, "timestamp">): Uint8Array {
  const full: ExecEvent = { ...event, timestamp: new Date().toISOString() };
  return encoder.encode(`event: ${event.type}\ndata: ${JSON.stringify(full)}\n\n`);
}

/** Resolves after `ms`, or as soon as `signal` aborts (the stream was cancelled). */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = Number.isFinite(ms) ? setTimeout(resolve, ms) : undefined;
    signal.addEventListener("abort", () => {
      if (timer !== undefined) clearTimeout(timer);
      resolve();
    });
  });
}

export class FakeSandbox extends DurableObject implements SandboxSurface {
  #scenario: FakeScenario = {};
  /** Stops the running command's output, as destroying a real container does. */
  #running = new AbortController();

  #state: FakeState = {
    configurations: [],
    starts: [],
    files: [],
    execs: [],
    destroyCalls: 0,
    destroyed: false,
    container: "never started",
    streamCancelled: false,
    bytesSent: 0,
  };

  constructor(ctx: DurableObjectState, env: Cloudflare.Env) {
    super(ctx, env);
    void ctx.blockConcurrencyWhile(async () => {
      this.#state = (await ctx.storage.get<FakeState>(STATE_KEY)) ?? this.#state;
    });
  }

  async fakeState(): Promise<FakeState> {
    return this.#state;
  }

  /** Changes the state in memory at once (no lost updates), then persists it. */
  async #update(change: (state: FakeState) => void): Promise<void> {
    change(this.#state);
    await this.ctx.storage.put(STATE_KEY, this.#state);
  }

  async configure(configuration: Configuration): Promise<void> {
    await this.#update((state) => {
      state.configurations.push(configuration);
    });
  }

  async startAndWaitForPorts(...args: Parameters<Sandbox["startAndWaitForPorts"]>): Promise<void> {
    const options = args[0];
    const start: FakeState["starts"][number] = {};
    if (typeof options === "object" && !Array.isArray(options)) {
      if (typeof options.ports === "number") start.ports = options.ports;
      const limits = options.cancellationOptions;
      if (limits?.instanceGetTimeoutMS !== undefined)
        start.instanceGetTimeoutMS = limits.instanceGetTimeoutMS;
      if (limits?.portReadyTimeoutMS !== undefined)
        start.portReadyTimeoutMS = limits.portReadyTimeoutMS;
      if (options.startOptions?.enableInternet !== undefined)
        start.enableInternet = options.startOptions.enableInternet;
    }
    await this.#update((state) => {
      state.starts.push(start);
      state.container = "healthy";
    });
  }

  async writeFile(
    ...[path, content, options]: Parameters<Sandbox["writeFile"]>
  ): Promise<Awaited<ReturnType<Sandbox["writeFile"]>>> {
    if (typeof content !== "string") throw new Error("fake: writeFile takes text only");
    const text = options?.encoding === "base64" ? atob(content) : content;
    const bytes =
      options?.encoding === "base64"
        ? Array.from(text, (char) => char.charCodeAt(0))
        : Array.from(encoder.encode(text));
    const sessionId = (options as { sessionId?: string } | undefined)?.sessionId;
    await this.#update((state) => {
      state.files.push({
        path,
        ...(options?.encoding === undefined ? {} : { encoding: options.encoding }),
        ...(sessionId === undefined ? {} : { sessionId }),
        bytes,
      });
    });
    return { success: true, path, timestamp: new Date().toISOString() };
  }

  async getState(): Promise<ContainerState> {
    const status = this.#state.container === "healthy" ? "healthy" : "stopped";
    return { status, lastChange: Date.now() };
  }

  /** The container dies by itself (as a crash or the platform would end it). */
  async kill(): Promise<void> {
    this.#running.abort();
    await this.#update((state) => {
      state.container = "stopped";
    });
  }

  #releaseDestroy: () => void = () => {};
  #destroyReleased = new Promise<void>((resolve) => {
    this.#releaseDestroy = resolve;
  });

  /** Lets a `destroyWaits` teardown finish. */
  async releaseDestroy(): Promise<void> {
    this.#releaseDestroy();
  }

  async destroy(): Promise<void> {
    this.#running.abort();
    await this.#update((state) => {
      state.destroyCalls++;
    });
    if (this.#scenario.destroyWaits) await this.#destroyReleased;
    await this.#update((state) => {
      if (!this.#scenario.destroyFails) {
        state.destroyed = true;
        state.container = "stopped";
      }
    });
    if (this.#scenario.destroyFails) throw new Error(INJECTED_FAILURES.destroy);
  }

  execStream(command: string, options?: StreamOptions): Promise<ReadableStream<Uint8Array>> {
    return this.#start(command, null, options);
  }

  execStreamWithSessionToken(
    command: string,
    sessionId: string,
    options?: StreamOptions,
  ): Promise<ReadableStream<Uint8Array>> {
    return this.#start(command, sessionId, options);
  }

  async #start(
    script: string,
    sessionId: string | null,
    options: StreamOptions | undefined,
  ): Promise<ReadableStream<Uint8Array>> {
    // The backend sends the caller's command inside its task script; read the command and the
    // cwd back out of it (anything else is taken as sent).
    const task = readTaskScript(script);
    const command = task?.command ?? script;
    const cwd = task?.cwd ?? options?.cwd;
    const stdinFile = task?.stdinFile;
    // The command reads the file the task script opened as its stdin (the fake's `cat`).
    const stdin = this.#state.files.findLast((file) => file.path === stdinFile)?.bytes;
    this.#scenario = scenarioOf(
      command,
      cwd,
      stdin === undefined ? undefined : new Uint8Array(stdin),
    );
    await this.#update((state) => {
      state.execs.push({
        command,
        ...(stdinFile === undefined ? {} : { stdinFile }),
        sessionId,
        ...(cwd === undefined ? {} : { cwd }),
        envNames: Object.keys(options?.env ?? {}),
        ...(options?.timeout === undefined ? {} : { timeout: options.timeout }),
      });
    });
    const scenario = this.#scenario;
    if (scenario.startError === "capacity") {
      throw new ContainerUnavailableError({
        code: "CONTAINER_UNAVAILABLE",
        message: INJECTED_FAILURES.capacity,
        context: {
          reason: "max_container_instances_exceeded",
          retryable: true,
          retryAfterMs: 7_000,
        },
        httpStatus: 503,
        timestamp: new Date().toISOString(),
      });
    }
    if (scenario.startError === "sdk") throw new Error(INJECTED_FAILURES.start);
    return this.#stream(scenario);
  }

  #stream(scenario: FakeScenario): ReadableStream<Uint8Array> {
    const stop = new AbortController();
    this.#running = stop;
    const frames = this.#frames(scenario, stop.signal);
    let sent = 0;
    const record = () =>
      this.#update((state) => {
        state.bytesSent += sent;
        sent = 0;
      });
    return new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        const next = await frames.next();
        if (next.done) {
          await record();
          controller.close();
          return;
        }
        if (next.value === "throw") {
          await record();
          controller.error(new Error(INJECTED_FAILURES.connectionLost));
          return;
        }
        sent += next.value.payloadBytes;
        controller.enqueue(next.value.bytes);
      },
      cancel: async () => {
        stop.abort();
        await record();
        await this.#update((state) => {
          state.streamCancelled = true;
        });
      },
    });
  }

  async *#frames(
    scenario: FakeScenario,
    signal: AbortSignal,
  ): AsyncGenerator<{ bytes: Uint8Array; payloadBytes: number } | "throw"> {
    yield { bytes: frame({ type: "start" }), payloadBytes: 0 };
    for (const step of scenario.steps ?? []) {
      if (step.delayMs) await sleep(step.delayMs, signal);
      const data = step.data.repeat(step.width ?? 1);
      const payloadBytes = encoder.encode(data).byteLength;
      const bytes = frame({ type: step.stream ?? "stdout", data });
      for (let i = 0; i < (step.repeat ?? 1); i++) yield { bytes: bytes.slice(), payloadBytes };
    }
    if (scenario.endless !== undefined) {
      const data = scenario.endless.data.repeat(scenario.endless.width ?? 1);
      const bytes = frame({ type: "stdout", data });
      const payloadBytes = encoder.encode(data).byteLength;
      while (!signal.aborted) {
        await sleep(1, signal);
        yield { bytes: bytes.slice(), payloadBytes };
      }
      return;
    }
    if (scenario.hang) await sleep(Number.POSITIVE_INFINITY, signal);
    if (signal.aborted) return;
    if (scenario.failMidStream === "event") {
      yield { bytes: frame({ type: "error", error: "fake command crashed" }), payloadBytes: 0 };
      return;
    }
    if (scenario.failMidStream === "throw") {
      yield "throw";
      return;
    }
    if (scenario.closeWithoutExit) return;
    if (scenario.exitDelayMs) await sleep(scenario.exitDelayMs, signal);
    if (signal.aborted) return;
    yield { bytes: frame({ type: "complete", exitCode: scenario.exitCode ?? 0 }), payloadBytes: 0 };
  }
}

/** The quoted shell word at the start of `text`, unquoted. */
function unquote(word: string): string {
  return word.slice(1, -1).replaceAll(`'\\''`, "'");
}

/**
 * The caller's command and cwd in a script of src/task-script.ts, and the file it gives the
 * command as stdin (if any), or `undefined`.
 */
export function readTaskScript(
  script: string,
): { command: string; cwd: string; stdinFile?: string } | undefined {
  const quoted = `('(?:[^']|'\\\\'')*')`;
  const cwd = new RegExp(`^cd -- ${quoted} `, "m").exec(script)?.[1];
  const command = new RegExp(`^/usr/bin/setsid /bin/bash -c ${quoted}(?: <&3 3<&-)? &$`, "m").exec(
    script,
  )?.[1];
  const stdinFile = new RegExp(`^exec 3<${quoted}$`, "m").exec(script)?.[1];
  if (cwd === undefined || command === undefined) return undefined;
  return {
    command: unquote(command),
    cwd: unquote(cwd),
    ...(stdinFile === undefined ? {} : { stdinFile: unquote(stdinFile) }),
  };
}

function scenarioOf(
  command: string,
  cwd: string | undefined,
  stdin: Uint8Array | undefined,
): FakeScenario {
  if (command.startsWith("fake ")) return JSON.parse(command.slice(5)) as FakeScenario;
  const script = interpretCommand(command, cwd ?? "/workspace", stdin);
  const scenario: FakeScenario = {
    steps: (script.chunks ?? []).map((chunk) => ({
      stream: chunk.stream ?? "stdout",
      data: typeof chunk.data === "string" ? chunk.data : new TextDecoder().decode(chunk.data),
      ...(chunk.delayMs ? { delayMs: chunk.delayMs } : {}),
    })),
    exitCode: script.exitCode ?? 0,
  };
  if (script.exitDelayMs) scenario.exitDelayMs = script.exitDelayMs;
  if (script.hang) scenario.hang = true;
  return scenario;
}
