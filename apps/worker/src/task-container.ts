/**
 * `TaskContainer`: the Durable Object that owns one call's container (one per sandbox id, or one
 * the warm pool started and lends to exactly one call), through Cloudflare's container API
 * (`ctx.container`). It starts the container with the call's network policy, runs exactly one
 * command in it with `exec` and streams what the command prints (exec-frames.ts), and destroys
 * it: when asked, when the caller stops reading (a cancel, the deadline, a caller gone), and by
 * its own alarm should every other way fail. An object never starts a second container nor runs a
 * second command: once used or destroyed it refuses, so a late start cannot bring a container
 * back for a call that has ended.
 *
 * The container's PID 1 is {@link PID1}: a shell that waits and exits at once on SIGTERM.
 */
import { DurableObject } from "cloudflare:workers";
import { BackendError, type CallSecret } from "@remote-task/bridge";
import { CLOUDFLARE_TEXTS } from "@remote-task/internal";
import type { NetworkPolicy } from "@remote-task/protocol";
import { type EgressProps, egressEnv } from "./egress-gate.js";
import { errorFrame, exitFrame, outputFrame } from "./exec-frames.js";
import { SCRIPT_CWD, taskArgv } from "./task-script.js";

/**
 * The container's entrypoint: it stays up between execs (a `sleep` it waits on, renewed) and
 * exits at once on SIGTERM or SIGINT (the trap; a shell as PID 1 would otherwise ignore them and
 * cost the platform's stop timeout). Any image with `/bin/sh` and `sleep` runs it.
 */
export const PID1 = [
  "/bin/sh",
  "-c",
  'trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done',
] as const;

/** What a start asks for. */
export interface StartRequest {
  /** The call's (or the pool's) network policy. */
  network: NetworkPolicy;
  /** Longest the start may take before it fails (placement and the first exec together). */
  budgetMs: number;
  /** The object's alarm destroys the container this long after the start, should all else fail. */
  backstopMs: number;
  /**
   * The call's secrets, for its egress gate (values included): held in memory and in the gate's
   * props only, never written to storage.
   */
  secrets?: CallSecret[] | undefined;
}

/** What a command run asks for. */
export interface RunRequest {
  command: string;
  cwd: string;
  env: Record<string, string>;
  /** The call's stdin, or `undefined` for empty input. */
  stdin?: Uint8Array | undefined;
  /** Random per call (the missing-cwd marker). */
  nonce: string;
  /** The call's deadline; the alarm destroys the container `graceMs` after it. */
  timeoutMs: number;
  graceMs: number;
}

type Phase = "new" | "starting" | "started" | "ran" | "destroyed";

const PHASE_KEY = "phase";
/** Whether the container's HTTP and HTTPS go through the egress gate (its CA then trusted). */
const INTERCEPTED_KEY = "intercepted";
/** Between two readiness probes while the container comes up. */
const PROBE_INTERVAL_MS = 100;
/** The pause grows by half after each refused probe, up to this (fewer calls to a busy engine). */
const MAX_PROBE_INTERVAL_MS = 1_000;
/** How long a destroyed object keeps its record (refusing late starts) before it is cleared. */
const FORGET_AFTER_MS = 10 * 60_000;

/** The `TaskContainer` Durable Object (binding `TaskContainer`); see the top of this file. */
export class TaskContainer extends DurableObject {
  #phase: Phase = "new";
  /** The running command: stops its exec and its output. */
  #running: { stop: () => void } | undefined;
  /** A start in flight (a destroy waits for it, then destroys what it started). */
  #starting: Promise<void> | undefined;

  constructor(ctx: DurableObjectState, env: Cloudflare.Env) {
    super(ctx, env);
    void ctx.blockConcurrencyWhile(async () => {
      this.#phase = (await ctx.storage.get<Phase>(PHASE_KEY)) ?? "new";
    });
  }

  /**
   * The platform's container of this object. Tests replace it with a fake of the same surface;
   * without containers (`wrangler dev` without Docker) it is missing and every start says so.
   */
  protected container(): Container {
    const container = this.ctx.container;
    if (container === undefined) {
      throw new BackendError("sandbox_error", CLOUDFLARE_TEXTS.containersDisabled);
    }
    return container;
  }

  /** The loopback binding of the Worker's egress gate for an allowlist (tests replace it). */
  protected egressGate(props: EgressProps): Fetcher {
    const exports = this.ctx.exports as unknown as {
      EgressGate?: (options: { props: EgressProps }) => Fetcher;
    };
    if (exports.EgressGate === undefined) throw new Error("the Worker exports no EgressGate");
    return exports.EgressGate({ props });
  }

  /**
   * Starts the container with `request.network` and returns once it runs commands. Refused for an
   * object that was started before (its container is never started again).
   */
  async start(request: StartRequest): Promise<void> {
    if (this.#phase !== "new") throw usedError(this.#phase);
    await this.#setPhase("starting");
    await this.ctx.storage.put(INTERCEPTED_KEY, intercepted(request));
    await this.ctx.storage.setAlarm(Date.now() + request.backstopMs);
    const starting = this.#bringUp(request);
    this.#starting = starting.catch(() => {});
    try {
      await starting;
    } finally {
      this.#starting = undefined;
    }
    // A destroy that came while the container was starting has the last word (it destroys the
    // container once this start has ended).
    if ((this.#phase as Phase) === "destroyed") throw usedError("destroyed");
    await this.#setPhase("started");
  }

  async #bringUp(request: StartRequest): Promise<void> {
    const container = this.container();
    const { network } = request;
    if (!container.running) {
      container.start({ enableInternet: network === "open", entrypoint: [...PID1] });
    }
    if (intercepted(request)) {
      // HTTP and HTTPS go to the Worker's gate, which lets through what the allowlist names (the
      // internet is off) and puts the call's secrets in (egress-gate.ts); under `open` with
      // secrets it checks no allowlist. Registered before the container runs anything.
      const secrets = request.secrets ?? [];
      const gate = this.egressGate({
        allow: network === "open" ? undefined : typeof network === "object" ? network.allow : [],
        ...(secrets.length === 0 ? {} : { secrets }),
      });
      await container.interceptAllOutboundHttp(gate);
      await container.interceptOutboundHttps("*", gate);
    }
    await this.#ready(container, request.budgetMs);
  }

  /**
   * Waits until the container runs a command (a trivial exec), within `budgetMs`. Right after
   * `start()` the platform refuses execs until the container is up; they are retried, unless no
   * instance can be placed or the container has ended (its `monitor()` settled: a start that
   * failed, or an image whose PID 1 exits).
   */
  async #ready(container: Container, budgetMs: number): Promise<void> {
    const until = Date.now() + budgetMs;
    let ended: Promise<unknown> = new Promise(() => {});
    try {
      ended = container.monitor().then(
        () => new Error("the container exited before it ran a command"),
        (error: unknown) => error,
      );
    } catch {
      // Not running yet as far as the platform knows: the execs below tell.
    }
    const over = ended.then((error) => ({ error }));
    let pauseMs = PROBE_INTERVAL_MS;
    for (;;) {
      if (this.#phase === "destroyed") return;
      try {
        const probe = await container.exec(["/bin/sh", "-c", "exit 0"], {
          stdout: "ignore",
          stderr: "ignore",
        });
        if ((await probe.exitCode) === 0) return;
        throw new Error("the container's /bin/sh did not run");
      } catch (error) {
        if (isCapacityMessage(error) || Date.now() + pauseMs >= until) throw error;
      }
      const pause = new Promise<undefined>((resolve) =>
        setTimeout(() => resolve(undefined), pauseMs),
      );
      pauseMs = nextProbePause(pauseMs);
      const stopped = await Promise.race([pause, over]);
      if (stopped !== undefined) throw stopped.error;
    }
  }

  /** Whether the container is up and this object has run nothing in it yet. */
  async ready(): Promise<boolean> {
    if (this.#phase !== "started") return false;
    try {
      return this.container().running;
    } catch {
      return false;
    }
  }

  /**
   * Runs the call's command in the started container and returns its output as frames
   * (exec-frames.ts), ending with its exit code or an error. Refused for an object that ran a
   * command before. When the caller stops reading, the command is killed and the container
   * destroyed.
   */
  async run(request: RunRequest): Promise<ReadableStream<Uint8Array>> {
    if (this.#phase !== "started") throw usedError(this.#phase);
    const container = this.container();
    if (!container.running) {
      throw new BackendError("sandbox_error", CLOUDFLARE_TEXTS.closedEarly);
    }
    await this.#setPhase("ran");
    await this.ctx.storage.setAlarm(Date.now() + request.timeoutMs + request.graceMs);
    const env = (await this.ctx.storage.get<boolean>(INTERCEPTED_KEY))
      ? { ...egressEnv(), ...request.env }
      : { ...request.env };
    const stop = new AbortController();
    const process = await container.exec(
      taskArgv({
        command: request.command,
        cwd: request.cwd,
        envNames: Object.keys(env),
        nonce: request.nonce,
        stdin: request.stdin !== undefined,
      }),
      {
        cwd: SCRIPT_CWD,
        env,
        stdout: "pipe",
        stderr: "pipe",
        signal: stop.signal,
        ...(request.stdin === undefined ? {} : { stdin: "pipe" as const }),
      },
    );
    if (request.stdin !== undefined && process.stdin !== null) {
      // Written beside the output, and its failure ignored: a command that exits without
      // reading its stdin (or all of it) is not held up, nor is its output lost.
      void writeAll(process.stdin, request.stdin);
    }
    return this.#frames(process, stop);
  }

  /** The command's output and end as one stream of frames, read as the caller reads it. */
  #frames(process: ExecProcess, stop: AbortController): ReadableStream<Uint8Array> {
    type Source = { stream: "stdout" | "stderr"; reader: ReadableStreamDefaultReader<Uint8Array> };
    const sources: Source[] = [];
    if (process.stdout !== null) {
      sources.push({ stream: "stdout", reader: process.stdout.getReader() });
    }
    if (process.stderr !== null) {
      sources.push({ stream: "stderr", reader: process.stderr.getReader() });
    }
    const pending = new Map<
      Source,
      Promise<{ source: Source; result: ReadableStreamReadResult<Uint8Array> }>
    >();
    let over = false;
    const end = () => {
      if (over) return;
      over = true;
      this.#running = undefined;
      stop.abort();
      for (const source of sources) source.reader.cancel().catch(() => {});
    };
    this.#running = { stop: end };
    return new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        // The caller may have cancelled the stream meanwhile: what is left is dropped.
        const push = (bytes: Uint8Array) => {
          try {
            controller.enqueue(bytes);
          } catch {}
        };
        try {
          for (;;) {
            const live = sources.filter((source) => !pending.has(source) && !over);
            for (const source of live) {
              pending.set(
                source,
                source.reader.read().then((result) => ({ source, result })),
              );
            }
            if (pending.size === 0) break;
            const { source, result } = await Promise.race(pending.values());
            pending.delete(source);
            if (result.done) {
              sources.splice(sources.indexOf(source), 1);
              continue;
            }
            if (result.value.byteLength === 0) continue;
            push(outputFrame(source.stream, result.value));
            return;
          }
          if (!over) push(exitFrame(await process.exitCode));
        } catch (error) {
          if (!over) push(errorFrame(messageOf(error)));
        }
        // Destroyed while it ran: the output ends without an exit code.
        if (over) push(errorFrame(CLOUDFLARE_TEXTS.stopped));
        over = true;
        this.#running = undefined;
        try {
          controller.close();
        } catch {}
      },
      cancel: async () => {
        // The caller stopped reading: a cancel, the deadline, or the caller is gone.
        end();
        await this.destroy();
      },
    });
  }

  /**
   * Destroys the container (a start in flight first ends), kills the command, and marks the
   * object used for good. Safe to call again and on an object that never started one.
   */
  async destroy(): Promise<void> {
    const wasNew = this.#phase === "new";
    await this.#setPhase("destroyed");
    this.#running?.stop();
    // A start in flight ends first (it stops probing once it sees the object destroyed), so that
    // what it started is destroyed too.
    await this.#starting;
    if (!wasNew) await this.container().destroy();
    await this.ctx.storage.setAlarm(Date.now() + FORGET_AFTER_MS);
  }

  /** The backstop: destroys a container past its time; clears a destroyed object's record. */
  override async alarm(): Promise<void> {
    if (this.#phase === "destroyed") {
      if (this.#starting === undefined) await this.ctx.storage.deleteAll();
      return;
    }
    await this.destroy();
  }

  async #setPhase(phase: Phase): Promise<void> {
    this.#phase = phase;
    await this.ctx.storage.put(PHASE_KEY, phase);
  }
}

/** Whether a start's container gets the egress gate: under an allowlist, or with secrets. */
function intercepted(request: StartRequest): boolean {
  return typeof request.network === "object" || (request.secrets ?? []).length > 0;
}

/**
 * The pause before the next readiness probe after one of `ms` was refused: half as long again, up
 * to a second, so that a container slow to come up (an engine busy starting many) is not asked
 * ten times a second.
 */
export function nextProbePause(ms: number): number {
  return Math.min(MAX_PROBE_INTERVAL_MS, Math.round(ms * 1.5));
}

function usedError(phase: Phase): BackendError {
  return new BackendError("sandbox_error", CLOUDFLARE_TEXTS.sandboxUsed(phase));
}

/** Writes `bytes` to `stdin`, then closes it; a command that stopped reading ends it early. */
async function writeAll(stdin: WritableStream, bytes: Uint8Array): Promise<void> {
  const writer = stdin.getWriter();
  try {
    if (bytes.byteLength > 0) await writer.write(bytes);
    await writer.close();
  } catch {
    writer.abort().catch(() => {});
  }
}

function messageOf(error: unknown): string {
  if (typeof error === "object" && error !== null && "message" in error) {
    return String((error as { message: unknown }).message);
  }
  return String(error);
}

/** Lower-case fragments of the platform's messages when no container can be placed. */
export const CAPACITY_SIGNATURES = [
  "there is no container instance that can be provided to this durable object",
  "there is no container instance available at this time",
  "maximum number of running container instances exceeded",
];

function isCapacityMessage(error: unknown): boolean {
  const lower = messageOf(error).toLowerCase();
  return CAPACITY_SIGNATURES.some((signature) => lower.includes(signature));
}
