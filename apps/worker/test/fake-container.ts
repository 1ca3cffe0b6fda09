/**
 * A fake of the platform's container (`ctx.container`) for the workerd tests, and the real
 * `TaskContainer` Durable Object running on it (`TestTaskContainer`, bound as `TaskContainer`),
 * so the tests run the Worker's own Durable Object code. The fake implements the `Container`
 * surface the object uses (start, exec with streams and an exit code, destroy, outbound
 * interception), typed against @cloudflare/workers-types so that API drift breaks the typecheck.
 * What a command does is driven by its text: `fake <json>` runs a {@link FakeScenario}; anything
 * else is read as the bridge's conformance vocabulary (`echo`, `pwd`, `sleep`, `exit`, `cat`,
 * `yes | head -c`). Everything the Worker did to it is recorded.
 */

import { interpretCommand } from "@remote-task/bridge/testing";
import { EgressGate, type EgressProps } from "../src/egress-gate.js";
import { TaskContainer } from "../src/task-container.js";
import { readTaskArgv } from "../src/task-script.js";
import { INJECTED_FAILURES } from "./expected-runtime-logs.js";

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
  /** Exit code (default 0). */
  exitCode?: number;
  /** Quiet time after the steps, before the exit. */
  exitDelayMs?: number;
  /** After the steps: never exit (until the container is destroyed). */
  hang?: boolean;
  /** After the steps: send this chunk (`data` repeated `width` times) on stdout forever. */
  endless?: { data: string; width?: number };
  /** `exec` of the command fails before any output: no instance, or another failure. */
  startError?: "capacity" | "platform";
  /** After the steps: the exit code is lost ("event"), or the output stream errors ("throw"). */
  failMidStream?: "event" | "throw";
  /** After the steps: the output closes and the exit code never comes (the container is gone). */
  closeWithoutExit?: boolean;
  /** `destroy()` rejects. */
  destroyFails?: boolean;
  /** `destroy()` finishes only once `releaseDestroy()` is called (a slow teardown). */
  destroyWaits?: boolean;
}

export interface FakeState {
  /** Container starts: the internet access and entrypoint asked for. */
  starts: Array<{ enableInternet?: boolean; entrypoint?: string[] }>;
  /** Readiness probes run (trivial execs before any command). */
  probes: number;
  execs: Array<{
    command: string;
    cwd: string;
    /** Names of the env the command was given (exec's `env`). */
    envNames: string[];
    /** The env itself. */
    env: Record<string, string>;
    /** The stdin bytes the command was given, if any. */
    stdin?: number[];
    user?: string;
  }>;
  /** Outbound interceptions registered: `all-http`, or `https <addr>`. */
  intercepts: string[];
  destroyCalls: number;
  destroyed: boolean;
  container: "never started" | "running" | "stopped";
  streamCancelled: boolean;
  bytesSent: number;
}

/** Builds the command text that makes the fake run `scenario`. */
export function fakeCommand(scenario: FakeScenario): string {
  return `fake ${JSON.stringify(scenario)}`;
}

const STATE_KEY = "fake-state";
const encoder = new TextEncoder();

/** Resolves after `ms`, or as soon as `signal` aborts. */
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

function freshState(): FakeState {
  return {
    starts: [],
    probes: 0,
    execs: [],
    intercepts: [],
    destroyCalls: 0,
    destroyed: false,
    container: "never started",
    streamCancelled: false,
    bytesSent: 0,
  };
}

/** The fake `ctx.container` of one object; `update` persists its state. */
class FakeContainer implements Container {
  state: FakeState = freshState();
  scenario: FakeScenario = {};
  /** Stops the running command's output, as destroying a real container does. */
  command = new AbortController();
  gate: Fetcher | undefined;
  #releaseDestroy: () => void = () => {};
  readonly #destroyReleased = new Promise<void>((resolve) => {
    this.#releaseDestroy = resolve;
  });

  constructor(readonly update: (change: (state: FakeState) => void) => Promise<void>) {}

  get running(): boolean {
    return this.state.container === "running";
  }

  get images(): Record<string, string> {
    return {};
  }

  start(options?: ContainerStartupOptions): void {
    this.state.container = "running";
    this.#whenStopped = new Promise((resolve) => {
      this.#stopped = resolve;
    });
    void this.update((state) => {
      state.starts.push({
        ...(options?.enableInternet === undefined
          ? {}
          : { enableInternet: options.enableInternet }),
        ...(options?.entrypoint === undefined ? {} : { entrypoint: [...options.entrypoint] }),
      });
      state.container = "running";
    });
  }

  #stopped: () => void = () => {};
  #whenStopped: Promise<void> = new Promise(() => {});

  /** Settles when the container stops (a kill or a destroy), as the platform's does. */
  monitor(): Promise<void> {
    if (this.state.container !== "running") {
      return Promise.reject(new Error("fake container: not running"));
    }
    return this.#whenStopped;
  }

  releaseDestroy(): void {
    this.#releaseDestroy();
  }

  async destroy(): Promise<void> {
    this.command.abort();
    await this.update((state) => {
      state.destroyCalls++;
    });
    if (this.scenario.destroyWaits) await this.#destroyReleased;
    await this.update((state) => {
      if (!this.scenario.destroyFails) {
        state.destroyed = true;
        state.container = "stopped";
      }
    });
    if (!this.scenario.destroyFails) this.#stopped();
    if (this.scenario.destroyFails) throw new Error(INJECTED_FAILURES.destroy);
  }

  /** The container dies by itself (as a crash or the platform would end it). */
  async kill(): Promise<void> {
    this.command.abort();
    await this.update((state) => {
      state.container = "stopped";
    });
    this.#stopped();
  }

  signal(): void {}

  getTcpPort(): Fetcher {
    throw new Error("fake container: getTcpPort is not used by the Worker");
  }

  async setInactivityTimeout(): Promise<void> {}

  async interceptOutboundHttp(addr: string, binding: Fetcher): Promise<void> {
    this.gate = binding;
    await this.update((state) => {
      state.intercepts.push(`http ${addr}`);
    });
  }

  async interceptAllOutboundHttp(binding: Fetcher): Promise<void> {
    this.gate = binding;
    await this.update((state) => {
      state.intercepts.push("all-http");
    });
  }

  async interceptOutboundHttps(addr: string, binding: Fetcher): Promise<void> {
    this.gate = binding;
    await this.update((state) => {
      state.intercepts.push(`https ${addr}`);
    });
  }

  async snapshotContainer(): Promise<ContainerSnapshot> {
    throw new Error("fake container: snapshots are not used by the Worker");
  }

  async inspect(): Promise<ContainerInfo | null> {
    return null;
  }

  async exec(cmd: string[], options?: ContainerExecOptions): Promise<ExecProcess> {
    if (this.state.container !== "running") throw new Error("fake container: not running");
    const task = readTaskArgv(cmd);
    if (task === undefined) {
      // The object's readiness probe.
      await this.update((state) => {
        state.probes++;
      });
      return this.#process({ exitCode: 0 }, new AbortController());
    }
    this.scenario = scenarioOf(task.command, task.cwd, undefined);
    await this.update((state) => {
      state.execs.push({
        command: task.command,
        cwd: task.cwd,
        envNames: Object.keys(options?.env ?? {}),
        env: { ...options?.env },
      });
    });
    if (this.scenario.startError === "capacity") throw new Error(INJECTED_FAILURES.capacity);
    if (this.scenario.startError === "platform") throw new Error(INJECTED_FAILURES.start);
    const stop = new AbortController();
    this.command = stop;
    options?.signal?.addEventListener("abort", () => stop.abort());
    if (options?.stdin !== "pipe") return this.#process(this.scenario, stop);
    // The command's stdin: read to its end (the fake's `cat` needs all of it), then it runs.
    const input = new TransformStream<Uint8Array, Uint8Array>();
    const scenario = bytesOf(input.readable).then(async (stdin) => {
      await this.update((state) => {
        const exec = state.execs.at(-1);
        if (exec !== undefined) exec.stdin = [...stdin];
      });
      this.scenario = scenarioOf(task.command, task.cwd, stdin);
      return this.scenario;
    });
    return { ...this.#process(scenario, stop), stdin: input.writable };
  }

  #process(pending: FakeScenario | Promise<FakeScenario>, stop: AbortController): ExecProcess {
    let sent = 0;
    const record = () =>
      this.update((state) => {
        state.bytesSent += sent;
        sent = 0;
      });
    let exited!: (code: number) => void;
    let lost!: (error: Error) => void;
    const exitCode = new Promise<number>((resolve, reject) => {
      exited = resolve;
      lost = reject;
    });
    exitCode.catch(() => {});
    stop.signal.addEventListener("abort", () => lost(new Error(INJECTED_FAILURES.connectionLost)));
    let scenario: FakeScenario = {};
    const streams = {
      stdout: new TransformStream<Uint8Array>(),
      stderr: new TransformStream<Uint8Array>(),
    };
    const out = streams.stdout.writable.getWriter();
    const err = streams.stderr.writable.getWriter();
    void (async () => {
      try {
        scenario = await pending;
        for await (const chunk of this.#chunks(scenario, stop.signal)) {
          if (chunk === "throw") {
            await record();
            await out.abort(new Error(INJECTED_FAILURES.connectionLost));
            await err.abort(new Error(INJECTED_FAILURES.connectionLost));
            lost(new Error(INJECTED_FAILURES.connectionLost));
            return;
          }
          await (chunk.stream === "stderr" ? err : out).write(chunk.bytes);
          sent += chunk.bytes.byteLength;
        }
        await record();
        await out.close();
        await err.close();
        if (stop.signal.aborted) return;
        if (scenario.failMidStream === "event" || scenario.closeWithoutExit) {
          lost(new Error(INJECTED_FAILURES.connectionLost));
          return;
        }
        if (scenario.exitDelayMs) await sleep(scenario.exitDelayMs, stop.signal);
        if (stop.signal.aborted) return;
        exited(scenario.exitCode ?? 0);
      } catch {
        // The reader cancelled the stream.
        stop.abort();
        await record();
        await this.update((state) => {
          state.streamCancelled = true;
        });
      }
    })();
    return {
      stdin: null,
      stdout: streams.stdout.readable,
      stderr: streams.stderr.readable,
      pid: 1,
      isPty: false,
      exitCode,
      output: () => Promise.reject(new Error("fake container: output() is not used")),
      kill: () => stop.abort(),
      resize: () => {},
    };
  }

  async *#chunks(
    scenario: FakeScenario,
    signal: AbortSignal,
  ): AsyncGenerator<{ stream: "stdout" | "stderr"; bytes: Uint8Array } | "throw"> {
    for (const step of scenario.steps ?? []) {
      if (step.delayMs) await sleep(step.delayMs, signal);
      if (signal.aborted) return;
      const bytes = encoder.encode(step.data.repeat(step.width ?? 1));
      for (let i = 0; i < (step.repeat ?? 1); i++) {
        yield { stream: step.stream ?? "stdout", bytes: bytes.slice() };
      }
    }
    if (scenario.endless !== undefined) {
      const bytes = encoder.encode(scenario.endless.data.repeat(scenario.endless.width ?? 1));
      while (!signal.aborted) {
        await sleep(1, signal);
        yield { stream: "stdout", bytes: bytes.slice() };
      }
      return;
    }
    if (scenario.hang) await sleep(Number.POSITIVE_INFINITY, signal);
    if (signal.aborted) return;
    if (scenario.failMidStream === "throw") yield "throw";
  }
}

async function bytesOf(stream: ReadableStream<Uint8Array>): Promise<Uint8Array> {
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

/**
 * The real egress gate, whose upstream is a stand-in: instead of the internet, it answers each
 * request it lets out with what arrived (method, URL, redirect mode, headers, body) as JSON, and
 * echoes the `x-api-key` and `authorization` it got in response headers.
 */
export class TestEgressGate extends EgressGate {
  protected override async upstream(request: Request): Promise<Response> {
    return Response.json(
      {
        method: request.method,
        url: request.url,
        redirect: request.redirect,
        headers: Object.fromEntries(request.headers),
        body: await request.text(),
      },
      {
        headers: {
          "x-echo-key": request.headers.get("x-api-key") ?? "",
          "x-echo-auth": request.headers.get("authorization") ?? "",
        },
      },
    );
  }
}

/** What the container's outbound request got from its egress gate. */
export interface EgressAnswer {
  status: number;
  text: string;
  headers: Record<string, string>;
}

/** The real `TaskContainer` on a fake container, with hooks for the tests. */
export class TestTaskContainer extends TaskContainer {
  readonly #fake: FakeContainer;

  constructor(ctx: DurableObjectState, env: Cloudflare.Env) {
    super(ctx, env as never);
    this.#fake = new FakeContainer(async (change) => {
      change(this.#fake.state);
      await ctx.storage.put(STATE_KEY, this.#fake.state);
    });
    void ctx.blockConcurrencyWhile(async () => {
      this.#fake.state = (await ctx.storage.get<FakeState>(STATE_KEY)) ?? this.#fake.state;
    });
  }

  protected override container(): Container {
    return this.#fake;
  }

  /** The real gate on a stand-in upstream ({@link TestEgressGate}). */
  protected override egressGate(props: EgressProps): Fetcher {
    const exports = this.ctx.exports as unknown as {
      TestEgressGate: (options: { props: EgressProps }) => Fetcher;
    };
    return exports.TestEgressGate({ props });
  }

  /** Everything the object keeps in its storage, as JSON text. */
  async storedText(): Promise<string> {
    return JSON.stringify([...(await this.ctx.storage.list())]);
  }

  async fakeState(): Promise<FakeState> {
    return this.#fake.state;
  }

  /** The container dies by itself. */
  async kill(): Promise<void> {
    await this.#fake.kill();
  }

  /** When the object's alarm (its backstop) is due, or null. */
  async alarmAt(): Promise<number | null> {
    return this.ctx.storage.getAlarm();
  }

  /** Lets a `destroyWaits` teardown finish. */
  async releaseDestroy(): Promise<void> {
    this.#fake.releaseDestroy();
  }

  /** What the container's outbound request to `url` gets: the egress gate's answer. */
  async egressFetch(
    url: string,
    init: { method?: string; headers?: Record<string, string>; body?: string } = {},
  ): Promise<EgressAnswer> {
    if (this.#fake.gate === undefined) return { status: 0, text: "no interception", headers: {} };
    const response = await this.#fake.gate.fetch(url, init);
    return {
      status: response.status,
      text: await response.text(),
      headers: Object.fromEntries(response.headers),
    };
  }
}

/** What the fake does for `command`: a scenario, or the conformance vocabulary interpreted. */
function scenarioOf(command: string, cwd: string, stdin: Uint8Array | undefined): FakeScenario {
  if (command.startsWith("fake ")) return JSON.parse(command.slice(5)) as FakeScenario;
  const script = interpretCommand(command, cwd, stdin);
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
