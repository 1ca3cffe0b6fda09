/**
 * One `/exec` call, from acceptance until its sandbox is destroyed. Everything a call owns is
 * here: where a deadline becomes `outcome: "timeout"`, where output is capped (the retained tail
 * and what a stream forwards), where the sandbox is destroyed, and the call's one log line.
 * The routes (exec.ts) and the event stream (sse.ts) only wire requests and responses to it.
 */
import {
  BRIDGE_TEXTS,
  type RaceAbortOptions,
  raceAbort,
  redact,
  shorten,
  timerDelay,
} from "@remote-task/internal";
import { type ExecResult, type Outcome, TIMEOUT_EXIT_CODE } from "@remote-task/protocol";
import {
  BackendError,
  type ExecSpec,
  type RunningCommand,
  type SandboxBackend,
} from "./backend.js";
import { mapBackendError } from "./backend-errors.js";
import type { BridgeLogger, EndReason } from "./logger.js";
import { chunkBytes, ForwardGate, TailBuffer } from "./output.js";
import { redactOutput } from "./output-redaction.js";
import { ReplayLog } from "./replay.js";

/** Exit code reported for a command stopped by `/cancel`, a disconnect or shutdown (as after SIGINT). */
export const CANCELLED_EXIT_CODE = 130;

/** Longest failure detail a log line carries. */
const MAX_LOG_DETAIL_LENGTH = 2_000;

/** What a call needs from the bridge that runs it. */
export interface CallHost {
  readonly backend: SandboxBackend;
  readonly logger: BridgeLogger;
  /** The bridge's token: never in a log line. */
  readonly token: string | undefined;
  /** Told once the call's sandbox is destroyed (or it ended without one): its id and slot are free again. */
  released(call: ExecCall): void;
  /** The `Retry-After` of a call refused for want of a slot. */
  retryAfterSeconds(): number;
}

/** One call to run, as the route accepted it: what the backend gets, and how to answer. */
export interface CallSpec extends Omit<ExecSpec, "signal"> {
  /** Bytes of each stream retained for the result, and forwarded by a stream. */
  cap: number;
  /** Whether the caller reads the call as an event stream. */
  streamed: boolean;
  /** The request's signal: its abort (the caller went away) ends the call. */
  disconnect: AbortSignal;
  /** Keeps the teardown alive after the answer (Workers); without it the answer waits for it. */
  waitUntil: ((promise: Promise<unknown>) => void) | undefined;
  /** Who sent it (see `BridgeRequestContext.client`); undefined when the host does not say. */
  client?: string | undefined;
  /** Kept whatever happens to its caller: runs to its own deadline (durable calls). */
  detach?: boolean | undefined;
  /**
   * Ms a call without `detach` keeps running once its caller left, for a re-attach; then it is
   * ended as disconnected (0: at once).
   */
  graceMs?: number | undefined;
  /** Keep a replay log of the output for re-attached streams (durable calls). */
  replay?: boolean | undefined;
}

/** Where a call stands: waiting for a slot, running, or its outcome decided. */
export type LiveState = "queued" | "running" | "finished";

/** How a call ended: a result (the command exited, timed out or was cancelled), or a failure. */
export type CallOutcome =
  | { kind: "result"; result: ExecResult }
  | { kind: "failed"; error: unknown };

/**
 * Receives what a streamed call forwards: text within the cap, then the end of the output. A
 * reader without room for more (`ready()` false) makes the call skip output; what it skipped is
 * still counted and kept in the tail, and the next `write` of that stream says how many bytes.
 */
export interface OutputSink {
  /** Whether the reader has room for more output now. */
  ready(): boolean;
  /** `skippedBytes`: bytes of `stream` skipped just before `text` (0 when none). */
  write(stream: "stdout" | "stderr", text: string, skippedBytes: number): void;
  /** Called once, after the last `write` and before the sandbox is destroyed. */
  end(): void;
}

/** Rejection reason marking "the call was ended" in a race. */
const ENDED = Symbol("call ended");

/** Hides a late rejection of a promise we stopped waiting for. */
function quiet<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => {});
  return promise;
}

/** Destroys a sandbox; a failure is logged here (the only place) and never thrown. */
export async function destroySandbox(
  host: Pick<CallHost, "backend" | "logger" | "token">,
  sandboxId: string,
  secrets: Iterable<string> = [],
): Promise<void> {
  try {
    await host.backend.destroy(sandboxId);
  } catch (error) {
    host.logger({
      event: "destroy_failed",
      level: "error",
      sandboxId,
      detail: logDetail(
        error instanceof Error ? `${error.name}: ${error.message}` : String(error),
        [...secrets, host.token],
      ),
    });
  }
}

/** A failure's text for a log line: secrets redacted, length bounded. */
export function logDetail(text: string, secrets: Iterable<string | undefined>): string {
  return shorten(redact(text, secrets), MAX_LOG_DETAIL_LENGTH);
}

/**
 * A call's life: from its acceptance the deadline timer runs and the caller's disconnect ends the
 * call; the sandbox starts when the registry gives the call a slot (`begin()`), at once or after
 * a wait. `started()` then `finish()` run it to its outcome; every way it ends (exit, failure,
 * timeout, cancel, disconnect, shutdown) destroys the sandbox, if it was started, and logs one line.
 */
export class ExecCall {
  readonly sandboxId: string;
  readonly streamed: boolean;
  /** The client's key in the queue ("" when the host named none). */
  readonly client: string;
  readonly command: string;
  readonly detached: boolean;
  readonly startedAt = Date.now();
  /** The output re-attached streams replay; undefined without durable calls. */
  readonly replay: ReplayLog | undefined;
  /** Resolves with the outcome once it is decided (before the sandbox is destroyed). */
  readonly outcome: Promise<CallOutcome>;
  /** The outcome once decided. */
  settledOutcome: CallOutcome | undefined;
  /** A caller received the outcome (its answer was sent, or a re-attach got it). */
  delivered = false;
  /** Resolves once the sandbox is destroyed and the id released. */
  readonly cleaned: Promise<void>;
  readonly #host: CallHost;
  readonly #spec: CallSpec;
  readonly #controller = new AbortController();
  readonly #tails: { stdout: TailBuffer; stderr: TailBuffer };
  readonly #deadline: ReturnType<typeof setTimeout>;
  readonly #onDisconnect = () => this.callerLeft();
  #resolveOutcome!: (outcome: CallOutcome) => void;
  /** Readers attached (the caller's own request and re-attached ones). */
  #attached = 1;
  #callerGone = false;
  #grace: ReturnType<typeof setTimeout> | undefined;
  /** In a race, the call's own end rejects with `ENDED`, anything else with its reason. */
  readonly #markEnded = (signal: AbortSignal) =>
    signal === this.#controller.signal ? ENDED : signal.reason;
  readonly #endOnly: RaceAbortOptions = { abortError: this.#markEnded };
  readonly #started: Promise<RunningCommand>;
  #startBackend!: (started: Promise<RunningCommand>) => void;
  /** When the sandbox was asked to start; undefined while the call waits for a slot. */
  #begunAt: number | undefined;
  /** Whether the call waited for a slot. */
  #waited = false;
  #running: RunningCommand | undefined;
  /** Ms from asking the backend for a sandbox until its command was running (queue excluded). */
  #startMs: number | undefined;
  #endedBy: EndReason | undefined;
  /** True once the outcome is decided; later end requests are ignored. */
  #settled = false;
  #teardown: Promise<void> | undefined;
  #resolveCleaned!: () => void;

  constructor(host: CallHost, spec: CallSpec) {
    this.#host = host;
    this.#spec = spec;
    this.sandboxId = spec.sandboxId;
    this.streamed = spec.streamed;
    this.client = spec.client ?? "";
    this.command = spec.command;
    this.detached = spec.detach === true;
    this.replay = spec.replay === true ? new ReplayLog(spec.cap) : undefined;
    this.outcome = new Promise((resolve) => {
      this.#resolveOutcome = resolve;
    });
    this.cleaned = new Promise((resolve) => {
      this.#resolveCleaned = resolve;
    });
    this.#tails = { stdout: new TailBuffer(spec.cap), stderr: new TailBuffer(spec.cap) };
    this.#deadline = setTimeout(() => this.end("timeout"), timerDelay(spec.timeoutMs));
    this.#started = quiet(
      new Promise<RunningCommand>((resolve) => {
        this.#startBackend = resolve;
      }),
    );
    if (spec.disconnect.aborted) this.#onDisconnect();
    else spec.disconnect.addEventListener("abort", this.#onDisconnect, { once: true });
  }

  /** Where the call stands now. */
  get state(): LiveState {
    if (this.settledOutcome !== undefined) return "finished";
    return this.#begunAt === undefined ? "queued" : "running";
  }

  /**
   * The caller left (its connection dropped, or its stream was closed). A call
   * without `detach` that has no reader left is ended as disconnected once the grace is over,
   * unless a reader attaches meanwhile; a detached call runs on.
   */
  callerLeft(): void {
    if (this.#callerGone) return;
    this.#callerGone = true;
    this.#leave();
  }

  #leave(): void {
    this.#attached--;
    if (this.detached || this.#attached > 0 || this.#settled || this.#grace !== undefined) return;
    const graceMs = this.#spec.graceMs ?? 0;
    if (graceMs <= 0) {
      this.end("disconnect");
      return;
    }
    this.#grace = setTimeout(() => {
      this.#grace = undefined;
      if (this.#attached === 0) this.end("disconnect");
    }, timerDelay(graceMs));
  }

  /** Whether a reader is attached now (the caller's own request, or a re-attached one). */
  get hasReaders(): boolean {
    return this.#attached > 0;
  }

  /** A reader re-attached: the call is no longer left alone. Returns what to call when it goes. */
  attach(): () => void {
    this.#attached++;
    if (this.#grace !== undefined) clearTimeout(this.#grace);
    this.#grace = undefined;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.#leave();
    };
  }

  /** Marks the call as waiting for a slot; its log line says for how long. */
  wait(): void {
    this.#waited = true;
  }

  /**
   * Starts the sandbox; the registry calls this once the call has a slot. False, and nothing
   * starts, when the call already ended (its caller left, its deadline passed) while it waited.
   */
  begin(): boolean {
    if (this.#settled || this.#endedBy !== undefined || this.#begunAt !== undefined) return false;
    this.#begunAt = Date.now();
    const spec = this.#spec;
    let started: Promise<RunningCommand>;
    try {
      started = Promise.resolve(
        this.#host.backend.start({
          sandboxId: spec.sandboxId,
          command: spec.command,
          cwd: spec.cwd,
          env: spec.env,
          network: spec.network,
          callersAllowlist: spec.callersAllowlist,
          ...(spec.secrets === undefined || spec.secrets.length === 0
            ? {}
            : { secrets: spec.secrets }),
          stdin: spec.stdin,
          timeoutMs: spec.timeoutMs,
          signal: this.#controller.signal,
        }),
      );
    } catch (error) {
      started = Promise.reject(error);
    }
    this.#startBackend(started);
    return true;
  }

  /** Texts no log line may show: the env values and the secrets' values. */
  #secretTexts(): string[] {
    const values = (this.#spec.secrets ?? []).map((secret) => secret.value);
    return [...Object.values(this.#spec.env), ...values];
  }

  /**
   * Ends the call early (first reason wins): the backend's signal aborts, the command is
   * stopped, and the outcome becomes `timeout` or `cancelled`. False once the outcome is decided.
   */
  end(reason: EndReason): boolean {
    if (this.#settled || this.#endedBy !== undefined) return false;
    this.#endedBy = reason;
    this.#controller.abort(reason);
    return true;
  }

  /**
   * Waits for a slot and for the sandbox to start. Undefined once the command runs (go on with
   * `finish()`); otherwise the call is already over (ended while waiting or starting, or the
   * start failed) and this is its outcome.
   */
  async started(): Promise<CallOutcome | undefined> {
    let outcome: CallOutcome;
    try {
      const first = await this.#race(this.#started);
      if (!first.ended) {
        this.#running = first.value;
        this.#startMs = Date.now() - (this.#begunAt ?? this.startedAt);
        return undefined;
      }
      outcome =
        this.#begunAt === undefined && (first.reason === "timeout" || first.reason === "shutdown")
          ? { kind: "failed", error: this.#neverStarted(first.reason) }
          : { kind: "result", result: this.#endedResult(first.reason) };
    } catch (error) {
      outcome = { kind: "failed", error };
    }
    return this.#close(outcome);
  }

  /**
   * Reads the running command's output until it ends, keeping the tail of each stream (and
   * forwarding up to the cap to `sink`, as far as it has room), then waits for its exit code; stops at once when the
   * call is ended. Resolves with the outcome once it is logged and the sandbox destroyed (or its
   * destruction handed to `waitUntil`).
   */
  async finish(sink?: OutputSink): Promise<CallOutcome> {
    const running = this.#running;
    if (running === undefined) throw new Error("finish() called before the command started");
    const outcome = await this.#consume(running, sink);
    sink?.end();
    return this.#close(outcome);
  }

  /**
   * The refusal of a call whose deadline passed, or whose bridge shut down, while it waited for a
   * slot: nothing ran, so it is no timeout but a `capacity_exceeded` the client may retry.
   */
  #neverStarted(reason: "timeout" | "shutdown"): BackendError {
    const retryAfterSeconds = reason === "shutdown" ? 1 : this.#host.retryAfterSeconds();
    return new BackendError(
      "capacity_exceeded",
      reason === "shutdown"
        ? BRIDGE_TEXTS.shuttingDown
        : BRIDGE_TEXTS.queueDeadline(
            Math.round((Date.now() - this.startedAt) / 100) / 10,
            retryAfterSeconds,
          ),
      { retryAfterSeconds },
    );
  }

  /** The result for a call ended early by `reason`, with the output seen so far. */
  #endedResult(reason: EndReason): ExecResult {
    return reason === "timeout"
      ? this.#result(TIMEOUT_EXIT_CODE, "timeout")
      : this.#result(CANCELLED_EXIT_CODE, "cancelled");
  }

  #result(code: number, outcome: Outcome): ExecResult {
    const { stdout, stderr } = this.#tails;
    return {
      stdout: stdout.text(),
      stderr: stderr.text(),
      code,
      outcome,
      durationMs: Date.now() - this.startedAt,
      stdoutBytes: stdout.total,
      stderrBytes: stderr.total,
      stdoutTruncated: stdout.truncated,
      stderrTruncated: stderr.truncated,
    };
  }

  /**
   * Settles with `value`, or with the end reason if the call is ended first, or rejects when
   * `options.other` (a backend failure) aborts first. Listeners are removed after every step: racing against promises that
   * stay pending would keep every settled value (every output chunk) reachable.
   */
  async #race<T>(
    value: Promise<T>,
    options: RaceAbortOptions = this.#endOnly,
  ): Promise<{ ended: false; value: T } | { ended: true; reason: EndReason }> {
    try {
      const settled = await raceAbort(value, this.#controller.signal, options);
      return { ended: false, value: settled };
    } catch (error) {
      if (error === ENDED) return { ended: true, reason: this.#endedBy ?? "shutdown" };
      throw error;
    }
  }

  async #consume(running: RunningCommand, sink: OutputSink | undefined): Promise<CallOutcome> {
    const exit = quiet(running.exit);
    // A backend that reports failure while the output is still open must not be waited out.
    const exitFailed = new AbortController();
    exit.catch((error: unknown) => exitFailed.abort(error));
    const untilFailure = { other: exitFailed.signal, abortError: this.#markEnded };
    const gates =
      sink === undefined
        ? undefined
        : { stdout: new ForwardGate(this.#spec.cap), stderr: new ForwardGate(this.#spec.cap) };
    const secrets = this.#spec.secrets ?? [];
    const output = secrets.length === 0 ? running.output : redactOutput(running.output, secrets);
    const iterator = output[Symbol.asyncIterator]();
    let finishedIterating = false;
    try {
      for (;;) {
        const next = await this.#race(quiet(iterator.next()), untilFailure);
        if (next.ended) return this.#decided(this.#endedResult(next.reason));
        if (next.value.done) {
          finishedIterating = true;
          break;
        }
        const stream = next.value.value.stream === "stderr" ? "stderr" : "stdout";
        const bytes = chunkBytes(next.value.value.data);
        this.#tails[stream].push(bytes);
        this.replay?.push(stream, bytes);
        if (sink !== undefined && gates !== undefined) {
          const gate = gates[stream];
          if (sink.ready()) {
            const text = gate.take(bytes);
            const skipped = gate.takeSkipped();
            if (text.length > 0 || skipped > 0) sink.write(stream, text, skipped);
          } else {
            gate.skip(bytes);
          }
        }
      }
      const exited = await this.#race(exit);
      if (exited.ended) return this.#decided(this.#endedResult(exited.reason));
      return this.#decided(this.#result(exited.value, "exited"));
    } catch (error) {
      this.#settled = true;
      return { kind: "failed", error };
    } finally {
      if (!finishedIterating) void quiet(Promise.resolve().then(() => iterator.return?.()));
      if (sink !== undefined && gates !== undefined) {
        // The last of each stream goes out whatever the room: at most a character and a count.
        for (const stream of ["stdout", "stderr"] as const) {
          const rest = gates[stream].flush();
          const skipped = gates[stream].takeSkipped();
          if (rest.length > 0 || skipped > 0) sink.write(stream, rest, skipped);
        }
      }
    }
  }

  #decided(result: ExecResult): CallOutcome {
    this.#settled = true;
    return { kind: "result", result };
  }

  /** Logs the outcome, destroys the sandbox (or hands that to `waitUntil`), returns the outcome. */
  async #close(outcome: CallOutcome): Promise<CallOutcome> {
    this.#settled = true;
    if (this.#grace !== undefined) clearTimeout(this.#grace);
    this.#grace = undefined;
    this.replay?.end();
    this.settledOutcome = outcome;
    this.#resolveOutcome(outcome);
    this.#log(outcome);
    // The outcome holds the tails now; a stream whose reader is slow may keep it a while.
    this.#tails.stdout.release();
    this.#tails.stderr.release();
    const teardown = this.#tearDown();
    if (this.#spec.waitUntil !== undefined) this.#spec.waitUntil(teardown);
    else await teardown;
    return outcome;
  }

  /**
   * Destroys the sandbox once `start` has settled (a call that never got a slot has none), then
   * releases the id and the slot. Runs once.
   */
  #tearDown(): Promise<void> {
    this.#teardown ??= (async () => {
      clearTimeout(this.#deadline);
      this.#spec.disconnect.removeEventListener("abort", this.#onDisconnect);
      if (this.#begunAt !== undefined) {
        await this.#started.catch(() => {});
        await destroySandbox(this.#host, this.sandboxId, this.#secretTexts());
      }
      this.#host.released(this);
      this.#resolveCleaned();
    })();
    return this.#teardown;
  }

  /** The call's one log line; never carries `env` values or the token. */
  #log(outcome: CallOutcome): void {
    const base = {
      event: "exec" as const,
      sandboxId: this.sandboxId,
      durationMs: Date.now() - this.startedAt,
      streamed: this.streamed,
      ...(this.#endedBy === undefined ? {} : { endedBy: this.#endedBy }),
      ...(this.#startMs === undefined ? {} : { startMs: this.#startMs }),
      ...(this.#running?.warm === undefined ? {} : { warm: this.#running.warm }),
      ...(this.#waited ? { queuedMs: (this.#begunAt ?? Date.now()) - this.startedAt } : {}),
      ...(this.#begunAt === undefined ? { started: false as const } : {}),
    };
    if (outcome.kind === "result") {
      const { result } = outcome;
      this.#host.logger({
        ...base,
        level: "info",
        outcome: result.outcome ?? "exited",
        code: result.code,
        stdoutBytes: result.stdoutBytes ?? 0,
        stderrBytes: result.stderrBytes ?? 0,
      });
      return;
    }
    const mapped = mapBackendError(outcome.error);
    const secrets = [...this.#secretTexts(), this.#host.token];
    this.#host.logger({
      ...base,
      level: "error",
      outcome: "error",
      errorCode: mapped.body.code,
      stdoutBytes: this.#tails.stdout.total,
      stderrBytes: this.#tails.stderr.total,
      ...(mapped.detail === undefined ? {} : { detail: logDetail(mapped.detail, secrets) }),
    });
  }
}
