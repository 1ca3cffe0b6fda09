import { issuesOf, summarizeIssues } from "@remote-task/internal";
import {
  type CancelResponse,
  cancelResponseSchema,
  type ExecRequest,
  execRequestSchema,
  execResultSchema,
  type HealthResponse,
  healthResponseSchema,
  type Issue,
  isSandboxId,
  newSandboxId,
  type StreamEvent,
} from "@remote-task/protocol";
import { readBounded, readJson } from "./body.js";
import { type Bridge, BridgePool } from "./bridges.js";
import {
  assertKnownKeys,
  DEFAULT_CONCURRENCY,
  DEFAULT_KEPT_OUTPUT_BYTES,
  type Env,
  graceSecondsFor,
  NO_RETRY,
  optionsFromEnv,
  processEnv,
  type ResolvedConfig,
  type RetryPolicy,
  resolveConfig,
  WHOLE_RESULT_BYTES,
} from "./config.js";
import {
  connectionFailure,
  errorFromBody,
  errorFromResponse,
  notJson,
  protocolMismatch,
  type SchemaError,
  statusForCode,
} from "./error-mapping.js";
import {
  AbortError,
  CapacityError,
  ConfigurationError,
  ConnectionError,
  ForbiddenError,
  InvalidRequestError,
  ProtocolError,
  RemoteTaskError,
} from "./errors.js";
import { crossOriginPage } from "./page-origin.js";
import { referenceTimeout, toTaskResult } from "./result.js";
import { backoffDelay, capacityDelay, outOfPatience, withRetries } from "./retry.js";
import { runMany } from "./run-many.js";
import { CallScope } from "./scope.js";
import { Secrets } from "./secrets.js";
import { sseEvents } from "./sse.js";
import { stdinField } from "./stdin.js";
import {
  fetchTransport,
  jsonResponse,
  type Transport,
  type TransportResponse,
  undiciTransport,
} from "./transport.js";
import type {
  CancelResult,
  ClientOptions,
  RemoteTaskClient,
  RunManyOptions,
  RunOptions,
  SettledTask,
  Task,
  TaskResult,
} from "./types.js";

/** Error bodies are small; more than this is not a protocol error body. */
const MAX_ERROR_BODY_BYTES = 64 * 1024;
/** Deadline of the best-effort cancel sent after an abort, timeout or broken call. */
const BACKGROUND_CANCEL_MS = 5_000;

/** An exception thrown by the caller's own `onOutput`, passed through unchanged. */
class CallbackFailure {
  constructor(readonly error: unknown) {}
}

/**
 * True for the answer of a bridge that has no such route (404, or 405 for another method): the
 * reference bridge has no `/cancel`, which is no failure of the cancel itself.
 */
function isMissingRoute(error: unknown): boolean {
  return InvalidRequestError.isInstance(error) && (error.status === 404 || error.status === 405);
}

/** One request to a bridge. */
interface Exchange {
  method: "GET" | "POST";
  path: string;
  /** The bridge it goes to; without one (an exec), the first of the client's with room. */
  to?: Bridge | undefined;
  /** Told of each refusal for capacity (runMany's adaptive window listens). */
  onRefused?: (() => void) | undefined;
  body?: unknown;
  accept: string;
  retry: RetryPolicy;
  secrets: Secrets;
  /**
   * For an exec result: an answer larger than it is read whole is read as it arrives, keeping
   * this many bytes of the end of each output. Without it such an answer is refused.
   */
  keptBytes?: number | undefined;
  /** Bytes of standard input the request carries, to explain a 413. */
  stdinBytes?: number | undefined;
}

/** The part of a zod schema the client uses. */
interface Schema<T> {
  safeParse(value: unknown): { success: true; data: T } | { success: false; error: SchemaError };
}

interface PreparedCall {
  sandboxId: string;
  request: ExecRequest;
  /** Bytes of standard input the request carries (0 without `stdin`). */
  stdinBytes: number;
  /** Bytes of the end of each output the result keeps. */
  keptBytes: number;
  deadlineMs: number;
  secrets: Secrets;
  onRefused: (() => void) | undefined;
}

/** Refuses a request before sending it. */
function invalid(issues: Issue[]): never {
  throw new InvalidRequestError(
    `The request is invalid and was not sent (${summarizeIssues(issues)}).`,
    { issues },
  );
}

/** A `network` of no known kind gets a message that names the kinds. */
function explainNetwork(issue: Issue): Issue {
  if (issue.path.length !== 1 || issue.path[0] !== "network" || issue.message !== "Invalid input") {
    return issue;
  }
  return { path: issue.path, message: 'must be "none", "open" or {allow: [host patterns]}' };
}

/** The options a call takes; any other is refused before sending (it would do nothing). */
const RUN_OPTIONS: ReadonlySet<string> = new Set([
  "timeoutSeconds",
  "cwd",
  "env",
  "signal",
  "onOutput",
  "maxOutputBytes",
  "sandboxId",
  "network",
  "stdin",
] satisfies ReadonlyArray<keyof RunOptions>);

/** Refuses call options that are not an object or name an option calls do not have. */
function assertRunOptions(options: RunOptions): void {
  if (typeof options !== "object" || options === null) {
    throw new InvalidRequestError(
      "The options of a call must be an object, e.g. {timeoutSeconds: 30}.",
    );
  }
  assertKnownKeys(
    options,
    RUN_OPTIONS,
    "A call",
    (message) =>
      new InvalidRequestError(`The request is invalid and was not sent: ${message}`, {
        issues: Object.keys(options)
          .filter((key) => !RUN_OPTIONS.has(key))
          .map((key) => ({ path: [key], message: "unknown option" })),
      }),
  );
}

/** Creates a client for one bridge (`url`) or several (`bridges`). Options are checked now; a mistake is a `ConfigurationError`. */
export function createClient(options: ClientOptions): RemoteTaskClient {
  return new Client(resolveConfig(options));
}

/**
 * A client configured from `CLOUDFLARE_SANDBOX_URL`, `CLOUDFLARE_SANDBOX_TOKEN` and
 * `CLOUDFLARE_SANDBOX_CWD` (each also read with a `MIKAN_` prefix; the unprefixed one wins).
 * `overrides` win over the environment.
 */
export function clientFromEnv(
  env: Env = processEnv(),
  overrides: Partial<ClientOptions> = {},
): RemoteTaskClient {
  return createClient(optionsFromEnv(env, overrides));
}

class Client implements RemoteTaskClient {
  readonly #config: ResolvedConfig;
  readonly #transport: Transport;
  readonly #pool: BridgePool;
  /** The bridge each exec call in flight was sent to, by sandbox id (where `cancel()` goes). */
  readonly #takenBy = new Map<string, Bridge>();
  readonly #backgroundCancels = new Set<Promise<void>>();
  /** Each bridge's `/health`, asked once before its first call with `network` or `stdin`. */
  readonly #support = new Map<Bridge, Promise<HealthResponse>>();
  /** Every bridge's token: none may appear in a message. */
  readonly #tokens: ReadonlyArray<string | undefined>;
  #closed = false;

  constructor(config: ResolvedConfig) {
    this.#config = config;
    this.#pool = new BridgePool(config.bridges);
    this.#tokens = config.bridges.map((bridge) => bridge.token);
    this.#transport =
      config.fetch === undefined
        ? undiciTransport(config.dispatcher, config.maxConnections)
        : fetchTransport(config.fetch);
  }

  run(command: string, options: RunOptions = {}): Promise<TaskResult> {
    return this.#run(command, options, undefined);
  }

  async #run(
    command: string,
    options: RunOptions,
    onRefused: (() => void) | undefined,
  ): Promise<TaskResult> {
    assertRunOptions(options);
    const onOutput = options.onOutput;
    if (onOutput !== undefined) {
      if (typeof onOutput !== "function") {
        throw new InvalidRequestError("onOutput must be a function.");
      }
      const started = performance.now();
      const call = { sandboxId: "", keptBytes: 0 };
      for await (const event of this.#events(command, options, onOutput, call, onRefused)) {
        if (event.type === "exit") {
          const ms = performance.now() - started;
          return toTaskResult(event.result, call.sandboxId, ms, call.keptBytes);
        }
      }
      // #events always ends with an exit event or throws.
      throw new ProtocolError("The bridge's stream ended without an exit event.");
    }
    return this.#runJson(command, options, onRefused);
  }

  stream(command: string, options: Omit<RunOptions, "onOutput"> = {}): AsyncIterable<StreamEvent> {
    assertRunOptions(options);
    if ((options as RunOptions).onOutput !== undefined) {
      throw new InvalidRequestError("stream() takes no onOutput: iterate its events instead.");
    }
    return this.#events(command, options, undefined, { sandboxId: "", keptBytes: 0 }, undefined);
  }

  runMany(
    tasks: ReadonlyArray<string | Task>,
    options: RunManyOptions = {},
  ): Promise<SettledTask[]> {
    this.#assertOpen();
    return runMany(
      (command, runOptions, onRefused) => this.#run(command, runOptions, onRefused),
      tasks,
      options,
      () => this.#freeCapacity(options.signal),
    );
  }

  async health(options: { signal?: AbortSignal | undefined } = {}): Promise<HealthResponse> {
    this.#assertOpen();
    return this.#health(this.#pool.first, options.signal, this.#config.retry);
  }

  #health(
    bridge: Bridge,
    signal: AbortSignal | undefined,
    retry: RetryPolicy,
  ): Promise<HealthResponse> {
    const scope = new CallScope({
      signal,
      deadlineMs: this.#shortDeadlineMs(),
      what: "The health check",
    });
    return this.#exchange(
      scope,
      {
        method: "GET",
        path: "/health",
        accept: "application/json",
        ...this.#plain(),
        retry,
        to: bridge,
      },
      healthResponseSchema,
      "a health check",
    );
  }

  /**
   * How many calls the bridges can take now, from their `/health` (free slots and places in their
   * queues); a bridge that reports no admission counts as the default concurrency. Undefined when
   * none reports it.
   */
  async #freeCapacity(signal: AbortSignal | undefined): Promise<number | undefined> {
    const answers = await Promise.all(
      this.#pool.bridges.map((bridge) =>
        this.#health(bridge, signal, NO_RETRY).then(
          (health) => health.admission,
          () => undefined,
        ),
      ),
    );
    if (answers.every((admission) => admission === undefined)) return undefined;
    let free = 0;
    for (const admission of answers) {
      if (admission === undefined) free += DEFAULT_CONCURRENCY;
      else {
        const { maxConcurrent, maxQueued, running, queued } = admission;
        free += Math.max(0, maxConcurrent + maxQueued - running - queued);
      }
    }
    return free;
  }

  async cancel(
    givenId: string,
    options: { signal?: AbortSignal | undefined } = {},
  ): Promise<CancelResult> {
    this.#assertOpen();
    const sandboxId = typeof givenId === "string" ? givenId.toLowerCase() : givenId;
    if (!isSandboxId(sandboxId)) {
      throw new InvalidRequestError(
        "sandboxId is not a valid sandbox id (lowercase letters, digits and '-', 1-63 characters).",
        { issues: [{ path: ["sandboxId"], message: "invalid sandbox id" }] },
      );
    }
    // The bridge that took the call, while it is in flight; otherwise every bridge (one that
    // never had the id answers that it cancelled nothing).
    const taken = this.#takenBy.get(sandboxId);
    const bridges = taken === undefined ? this.#pool.bridges : [taken];
    const answers = await Promise.allSettled(
      bridges.map((bridge) =>
        this.#postCancel(bridge, sandboxId, options.signal, this.#config.retry).then(
          (response) => ({ cancelled: response.cancelled, supported: true }),
          (error: unknown) => {
            if (isMissingRoute(error)) return { cancelled: false, supported: false };
            throw error;
          },
        ),
      ),
    );
    const results = answers.flatMap((answer) =>
      answer.status === "fulfilled" ? [answer.value] : [],
    );
    const failure = answers.find((answer) => answer.status === "rejected");
    if (failure !== undefined && !results.some((result) => result.cancelled)) {
      throw failure.reason;
    }
    return {
      sandboxId,
      cancelled: results.some((result) => result.cancelled),
      supported: results.some((result) => result.supported),
    };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.all(this.#backgroundCancels);
    await this.#transport.close();
  }

  #assertOpen(): void {
    if (this.#closed) {
      throw new ConfigurationError("This client was closed; create a new one to make more calls.");
    }
  }

  /** `health()` and `cancel()` are bounded by the grace period alone (at least 1 s). */
  #shortDeadlineMs(): number {
    return Math.max(this.#config.graceSeconds, 1) * 1000;
  }

  /** Builds and checks the exec request; a mistake is an `InvalidRequestError` before sending. */
  #prepare(
    command: string,
    options: RunOptions,
    onRefused: (() => void) | undefined,
  ): PreparedCall {
    this.#assertOpen();
    // The reference bridge lower-cases ids; this client does the same rather than refuse them.
    const sandboxId =
      typeof options.sandboxId === "string"
        ? options.sandboxId.toLowerCase()
        : (options.sandboxId ?? newSandboxId(this.#config.idPrefix));
    const timeoutSeconds = options.timeoutSeconds ?? this.#config.timeoutSeconds;
    const candidate: Record<string, unknown> = {
      sandboxId,
      command,
      timeoutSeconds,
      cwd: options.cwd ?? this.#config.cwd,
    };
    if (options.env !== undefined) candidate.env = options.env;
    if (options.maxOutputBytes !== undefined) candidate.maxOutputBytes = options.maxOutputBytes;
    if (options.network !== undefined) candidate.network = options.network;
    let stdinBytes = 0;
    if (options.stdin !== undefined) {
      const stdin = stdinField(options.stdin);
      if (!stdin.ok) invalid([{ path: ["stdin"], message: stdin.message }]);
      candidate.stdin = stdin.value;
      stdinBytes = stdin.bytes;
    }
    const secrets = new Secrets([
      ...this.#tokens,
      ...(typeof options.env === "object" && options.env !== null
        ? Object.values(options.env)
        : []),
    ]);
    const parsed = execRequestSchema.safeParse(candidate);
    if (!parsed.success) {
      invalid(
        issuesOf(parsed.error, (message) => secrets.redact(message, 200)).map(explainNetwork),
      );
    }
    const graceSeconds = graceSecondsFor(this.#config, timeoutSeconds);
    const deadlineMs = (timeoutSeconds + graceSeconds) * 1000;
    const keptBytes = parsed.data.maxOutputBytes ?? DEFAULT_KEPT_OUTPUT_BYTES;
    return {
      sandboxId,
      request: parsed.data,
      keptBytes,
      deadlineMs,
      secrets,
      stdinBytes,
      onRefused,
    };
  }

  /** The scope of an exec call: however it ends early, a command that may run is cancelled. */
  #execScope(call: PreparedCall, signal: AbortSignal | undefined): CallScope {
    const scope = new CallScope({
      signal,
      deadlineMs: call.deadlineMs,
      sandboxId: call.sandboxId,
      what: "Running the command",
      runsCommand: true,
    });
    scope.signal.addEventListener(
      "abort",
      () => {
        const bridge = this.#takenBy.get(call.sandboxId);
        if (scope.commandInFlight && bridge !== undefined) {
          this.#cancelInBackground(bridge, call.sandboxId);
        }
      },
      { once: true },
    );
    return scope;
  }

  #execExchange(call: PreparedCall, accept: string): Exchange {
    const { retry } = this.#config;
    return {
      method: "POST",
      path: "/exec",
      body: call.request,
      accept,
      retry,
      secrets: call.secrets,
      keptBytes: call.keptBytes,
      stdinBytes: call.stdinBytes,
      onRefused: call.onRefused,
    };
  }

  /**
   * A bridge that does not know `network` or `stdin` may ignore them (the reference bridge does)
   * and run the command without the policy, or with empty input. Before the first call with
   * either, the bridge's `/health` is asked once whether it takes them; if not, nothing is sent.
   * From a browser page on another origin, `/health` is asked before the first call of any kind
   * (see page-origin.ts): when the browser cannot fetch it, the command is not sent.
   */
  async #assertBridgeTakes(request: ExecRequest, bridge: Bridge): Promise<void> {
    const page = crossOriginPage(bridge.target.baseUrl);
    if (request.network === undefined && request.stdin === undefined && page === undefined) return;
    let support = this.#support.get(bridge);
    if (support === undefined) {
      support = this.#health(bridge, undefined, this.#config.retry).catch((error: unknown) => {
        this.#support.delete(bridge);
        throw error;
      });
      this.#support.set(bridge, support);
    }
    let health: HealthResponse;
    try {
      health = await support;
    } catch (error) {
      // See page-origin.ts: a browser's failed fetch of /health before the command is sent.
      if (page !== undefined && ConnectionError.isInstance(error)) {
        throw new ConnectionError(
          `The browser could not fetch the bridge's /health from this page (origin ${page}): the bridge does not allow this origin (CORS; its deployer lists the origins whose pages may call it, e.g. \`remote-task serve --cors-origin ${page}\`), or it cannot be reached. The command was not sent.`,
          { cause: error, retryable: false, mayHaveRun: false },
        );
      }
      throw error;
    }
    const protocol = health.protocol ?? 1;
    if (request.network !== undefined && health.network === undefined) {
      throw new ForbiddenError(
        `The bridge does not control network access (its /health reports no \`network\`; protocol ${protocol}), so it could run the command without the policy asked for; the call was not sent. Leave \`network\` out to run with the bridge's own network, or use a bridge that enforces policies.`,
      );
    }
    if (request.stdin !== undefined && health.limits?.maxStdinBytes === undefined) {
      throw new InvalidRequestError(
        `The bridge does not take stdin (its /health reports no \`limits.maxStdinBytes\`; protocol ${protocol}), so the command could run with empty input; the call was not sent. Leave \`stdin\` out, or use a protocol 2 bridge.`,
        {
          issues: [
            { path: ["stdin"], message: `not supported by this bridge (protocol ${protocol})` },
          ],
        },
      );
    }
  }

  async #runJson(
    command: string,
    options: RunOptions,
    onRefused: (() => void) | undefined,
  ): Promise<TaskResult> {
    const call = this.#prepare(command, options, onRefused);
    const scope = this.#execScope(call, options.signal);
    const started = performance.now();
    const exchange = this.#execExchange(call, "application/json");
    return this.#exchange(scope, exchange, execResultSchema, "an exec result").then((result) =>
      toTaskResult(result, call.sandboxId, performance.now() - started, call.keptBytes),
    );
  }

  /**
   * The validated events of a streamed exec; ends right after `exit`, throws the typed error of
   * an `error` event. Ending the iteration early aborts the call and cancels the command.
   */
  async *#events(
    command: string,
    options: RunOptions,
    onOutput: RunOptions["onOutput"],
    /** Receives the call's sandbox id and output budget once the call is prepared. */
    meta: { sandboxId: string; keptBytes: number },
    onRefused: (() => void) | undefined,
  ): AsyncGenerator<StreamEvent, void, undefined> {
    const call = this.#prepare(command, options, onRefused);
    const { sandboxId } = call;
    meta.sandboxId = sandboxId;
    meta.keptBytes = call.keptBytes;
    const scope = this.#execScope(call, options.signal);
    let finished = false;
    const deliver = (event: StreamEvent) => {
      if (onOutput === undefined || (event.type !== "stdout" && event.type !== "stderr")) return;
      try {
        onOutput(
          event.skippedBytes === undefined
            ? { stream: event.type, data: event.data }
            : { stream: event.type, data: event.data, skippedBytes: event.skippedBytes },
        );
      } catch (error) {
        throw new CallbackFailure(error);
      }
    };
    try {
      const exchange = this.#execExchange(call, "text/event-stream");
      const response = await this.#send(scope, exchange);
      const contentType = response.header("content-type");
      if (!/^\s*text\/event-stream/i.test(contentType ?? "")) {
        // A bridge without streaming (the reference one) answers JSON; replay it as events.
        const result = await this.#receive(
          scope,
          response,
          execResultSchema,
          "an exec result",
          exchange.keptBytes,
        );
        const replay: StreamEvent[] = [];
        if (result.stdout) replay.push({ type: "stdout", data: result.stdout });
        if (result.stderr) replay.push({ type: "stderr", data: result.stderr });
        replay.push({ type: "exit", result });
        for (const event of replay) {
          deliver(event);
          if (event.type === "exit") finished = true;
          yield event;
        }
        return;
      }
      scope.watchIdle(this.#config.idleTimeoutSeconds * 1000);
      const events = sseEvents(response.body, {
        signal: scope.signal,
        maxEventChars: this.#config.maxResponseBytes,
        status: response.status,
        ...scope.facts,
      });
      for await (const event of events) {
        scope.touch();
        if (event.type === "start" && event.sandboxId !== sandboxId) {
          throw new ProtocolError(
            "The bridge started a different sandbox id than the one requested.",
            { status: response.status, ...scope.facts },
          );
        }
        if (event.type === "error") {
          scope.settled();
          throw errorFromBody(statusForCode(event.error.code), event.error, {
            ...this.#errorContext(
              this.#takenBy.get(sandboxId) ?? this.#pool.first,
              call.secrets,
              sandboxId,
              undefined,
              call.stdinBytes,
            ),
            accepted: true,
          });
        }
        if (event.type === "exit") {
          scope.settled();
          finished = true;
          response.discard();
        }
        deliver(event);
        yield event;
        if (finished) return;
      }
      throw new ProtocolError(
        "The bridge's stream ended without an exit event; the command's outcome is unknown.",
        { status: response.status, ...scope.facts },
      );
    } catch (error) {
      if (error instanceof CallbackFailure) {
        scope.abort(new AbortError("onOutput threw; the call was aborted.", scope.facts));
        throw error.error;
      }
      throw this.#settleFailure(error, scope);
    } finally {
      // Reached without an error when the consumer stops iterating early.
      if (!finished) {
        scope.abort(new AbortError("The stream was closed before the command ended.", scope.facts));
      }
      scope.dispose();
      this.#endCall(scope);
    }
  }

  /** The secrets of a call that sends only the token (health, cancel). */
  #plain(): { retry: RetryPolicy; secrets: Secrets } {
    return { retry: this.#config.retry, secrets: new Secrets(this.#tokens) };
  }

  #errorContext(
    bridge: Bridge,
    secrets: Secrets,
    sandboxId: string | undefined,
    retryAfter: string | undefined,
    stdinBytes = 0,
  ) {
    const { token, tokenSource } = bridge.target;
    return {
      sandboxId,
      secrets,
      token: { sent: token !== undefined, source: tokenSource },
      retryAfterHeader: retryAfter,
      stdinBytes,
    };
  }

  /**
   * The one exchange path of a call: send (retrying what provably did not run), read the JSON
   * answer, and validate it with the protocol schema (another shape is a `ProtocolError`). It
   * ends the call's scope: a failure aborts it (ending every exchange of the call) and is thrown
   * as the call's typed error; the scope is disposed either way.
   */
  async #exchange<T>(
    scope: CallScope,
    exchange: Exchange,
    schema: Schema<T>,
    what: string,
  ): Promise<T> {
    try {
      const response = await this.#send(scope, exchange);
      return await this.#receive(scope, response, schema, what, exchange.keptBytes);
    } catch (error) {
      throw this.#settleFailure(error, scope);
    } finally {
      scope.dispose();
      this.#endCall(scope);
    }
  }

  /**
   * Sends one request, retrying what provably did not run; resolves with a 2xx response. A request
   * to a named bridge (health, cancel) retries within the retry budget; an exec goes through the
   * pool (`#sendPooled`).
   */
  async #send(scope: CallScope, exchange: Exchange): Promise<TransportResponse> {
    const bridge = exchange.to;
    if (bridge === undefined) return this.#sendPooled(scope, exchange);
    return withRetries(exchange.retry, scope.signal, scope.deadlineAt, () =>
      this.#attempt(scope, exchange, bridge),
    );
  }

  /**
   * Sends an exec to the first bridge with room, and again wherever there is room after each
   * refusal that proves it did not run: a refusal for capacity (patient calls wait for room until
   * the call's deadline; the pool closes that bridge until a call of this client ends there or
   * its `Retry-After` passes, so the next try may be another bridge at once) or an unreachable
   * bridge (within the retry budget). Anything that may have run is never sent again.
   */
  async #sendPooled(scope: CallScope, exchange: Exchange): Promise<TransportResponse> {
    const policy = exchange.retry;
    const sandboxId = scope.sandboxId as string;
    const startedAt = Date.now();
    const waitUntil = scope.deadlineAt;
    const refusals: CapacityError[] = [];
    let failures = 0;
    let waitedMs = 0;
    for (let number = 1; ; number++) {
      const bridge =
        this.#pool.tryAcquire(number > 1) ??
        (await this.#waitForRoom(scope, refusals, startedAt, waitUntil));
      this.#takenBy.set(sandboxId, bridge);
      scope.answered = false;
      try {
        await this.#assertBridgeTakes(exchange.body as ExecRequest, bridge);
        if (number > 1) scope.restartDeadline();
        return await this.#attempt(scope, exchange, bridge);
      } catch (error) {
        const notRun =
          RemoteTaskError.isInstance(error) &&
          error.retryable &&
          !error.mayHaveRun &&
          !scope.reason;
        // The call's end (`#endCall`) gives the bridge back, after any cancel went to it.
        if (!notRun) throw error;
        // Nothing runs: a new try (or the end of the call) sends no cancel.
        scope.unsent();
        this.#takenBy.delete(sandboxId);
        const refused = CapacityError.isInstance(error);
        const patient = refused && policy.patient;
        if (!patient) failures++;
        const delayMs = refused
          ? capacityDelay(policy, error, refusals.length + 1)
          : backoffDelay(policy, failures);
        if (
          !patient &&
          (failures >= policy.maxAttempts ||
            waitedMs + delayMs > policy.maxTotalMs ||
            Date.now() + delayMs >= waitUntil)
        ) {
          this.#pool.release(bridge, { kind: "ended" });
          throw error;
        }
        this.#pool.release(bridge, { kind: refused ? "refused" : "unreachable", delayMs });
        if (refused) {
          refusals.push(error);
          exchange.onRefused?.();
          if (patient && this.#pool.earliestOpening() >= waitUntil) {
            throw outOfPatience(scope, refusals, Date.now() - startedAt, true);
          }
        }
        if (!patient) waitedMs += delayMs;
        policy.onRetry?.({ attempt: number, delayMs, error });
      }
    }
  }

  /**
   * Waits (at the front of the line after a refusal) for a bridge with room, until the call's
   * first deadline, also once a try has restarted it; then the call fails with how long it waited.
   */
  async #waitForRoom(
    scope: CallScope,
    refusals: readonly CapacityError[],
    startedAt: number,
    waitUntil: number,
  ): Promise<Bridge> {
    const patience = () => outOfPatience(scope, refusals, Date.now() - startedAt);
    scope.waiting = patience;
    const until = AbortSignal.timeout(Math.max(0, waitUntil - Date.now()));
    try {
      return await this.#pool.acquire(AbortSignal.any([scope.signal, until]), refusals.length > 0);
    } catch (error) {
      throw scope.reason ?? (until.aborted ? patience() : error);
    } finally {
      scope.waiting = undefined;
    }
  }

  /** One try of `exchange` at `bridge`; resolves with a 2xx response, or throws its error. */
  async #attempt(scope: CallScope, exchange: Exchange, bridge: Bridge): Promise<TransportResponse> {
    const { token, baseUrl } = bridge.target;
    const headers: Record<string, string> = { accept: exchange.accept };
    if (exchange.body !== undefined) headers["content-type"] = "application/json";
    if (token !== undefined) headers.authorization = `Bearer ${token}`;
    const body = exchange.body === undefined ? undefined : JSON.stringify(exchange.body);
    let response: TransportResponse;
    // Nothing has left yet: a transport that cannot work here, or an abort meanwhile, sends no
    // cancel for this try.
    const preparing = this.#transport.prepare();
    if (preparing !== undefined) await preparing;
    if (scope.reason) throw scope.reason;
    scope.sent();
    try {
      response = await this.#transport.send({
        method: exchange.method,
        url: `${baseUrl}${exchange.path}`,
        headers,
        body,
        signal: scope.signal,
      });
    } catch (error) {
      if (scope.reason) throw scope.reason;
      const failure = connectionFailure(error, true, scope.facts);
      if (failure.retryable) scope.unsent();
      throw failure;
    }
    scope.answered = true;
    // However the call ends early, the response is released (even a stalled read ends).
    scope.signal.addEventListener("abort", () => response.discard(), { once: true });
    if (response.status >= 200 && response.status < 300) return response;
    // The bridge answered with an error: it is not (or no longer) running the command.
    scope.settled();
    const context = { status: response.status, ...scope.facts };
    const bytes = await this.#read<Uint8Array | undefined>(
      scope,
      response,
      readBounded(response, MAX_ERROR_BODY_BYTES, scope.signal, context),
      () => undefined,
    );
    const timedOut =
      exchange.path === "/exec" ? referenceTimeout(response.status, bytes) : undefined;
    if (timedOut !== undefined) return jsonResponse(timedOut);
    throw errorFromResponse(
      bytes,
      { status: response.status, contentType: response.header("content-type") },
      this.#errorContext(
        bridge,
        exchange.secrets,
        scope.sandboxId,
        response.header("retry-after"),
        exchange.stdinBytes,
      ),
    );
  }

  /** An exec call ended: the bridge that took it has a free slot again. */
  #endCall(scope: CallScope): void {
    const sandboxId = scope.sandboxId;
    if (sandboxId === undefined || !scope.runsCommand) return;
    const bridge = this.#takenBy.get(sandboxId);
    if (bridge === undefined) return;
    this.#takenBy.delete(sandboxId);
    this.#pool.release(bridge, { kind: scope.answered ? "answered" : "ended" });
  }

  /** Reads a 2xx answer's JSON (the call's outcome) and validates it with `schema`. */
  async #receive<T>(
    scope: CallScope,
    response: TransportResponse,
    schema: Schema<T>,
    what: string,
    keptBytes: number | undefined,
  ): Promise<T> {
    const context = { status: response.status, ...scope.facts };
    const { maxResponseBytes } = this.#config;
    const maxBytes =
      keptBytes === undefined ? maxResponseBytes : Math.min(maxResponseBytes, WHOLE_RESULT_BYTES);
    const limits = { maxBytes, keptBytes };
    const parsed = await this.#read(
      scope,
      response,
      readJson(response, limits, scope.signal, context),
    );
    if (!parsed.ok) {
      response.discard();
      throw notJson(response.status, response.header("content-type"), scope.facts);
    }
    scope.settled();
    const checked = schema.safeParse(parsed.value);
    if (!checked.success) {
      throw protocolMismatch(what, response.status, checked.error, scope.facts);
    }
    return checked.data;
  }

  /**
   * Waits for `reading` (of the answer's body); a failure is the call's typed error. A body over
   * its limit reads as `tooLarge()` when it is given (an error answer, whose status alone then
   * explains the error).
   */
  #read<T>(
    scope: CallScope,
    response: TransportResponse,
    reading: Promise<T>,
    tooLarge?: () => T,
  ): Promise<T> {
    return reading.catch((error: unknown) => {
      response.discard();
      if (scope.reason) throw scope.reason;
      if (tooLarge !== undefined && ProtocolError.isInstance(error)) return tooLarge();
      if (RemoteTaskError.isInstance(error)) throw error;
      throw connectionFailure(error, false, scope.facts);
    });
  }

  /** The error a failed call ends with; aborts the scope so every exchange of the call stops. */
  #settleFailure(error: unknown, scope: CallScope): RemoteTaskError {
    let failure: RemoteTaskError;
    if (scope.reason) failure = scope.reason;
    else if (RemoteTaskError.isInstance(error)) failure = error;
    else failure = connectionFailure(error, false, scope.facts);
    scope.abort(failure);
    return failure;
  }

  async #postCancel(
    bridge: Bridge,
    sandboxId: string,
    signal: AbortSignal | undefined,
    retry: RetryPolicy,
    deadlineMs = this.#shortDeadlineMs(),
  ): Promise<CancelResponse> {
    const scope = new CallScope({ signal, deadlineMs, sandboxId, what: "Cancelling the sandbox" });
    const exchange: Exchange = {
      method: "POST",
      path: "/cancel",
      body: { sandboxId },
      accept: "application/json",
      ...this.#plain(),
      retry,
      to: bridge,
    };
    return this.#exchange(scope, exchange, cancelResponseSchema, "a cancel answer");
  }

  /** Fire and forget: never throws, bounded by its own short deadline; `close()` waits for it. */
  #cancelInBackground(bridge: Bridge, sandboxId: string): void {
    if (this.#closed) return;
    const pending = this.#postCancel(
      bridge,
      sandboxId,
      undefined,
      NO_RETRY,
      BACKGROUND_CANCEL_MS,
    ).then(
      () => {},
      () => {},
    );
    this.#backgroundCancels.add(pending);
    void pending.finally(() => this.#backgroundCancels.delete(pending));
  }
}
