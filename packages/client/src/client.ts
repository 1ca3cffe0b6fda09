/**
 * The client: `createClient` and the `RemoteTaskClient` it returns, a facade over modules with
 * one job each: call options (call-options.ts), what a bridge supports (capabilities.ts), where
 * a request goes and its retries (dispatch.ts, retry.ts), one HTTP try and its answer
 * (exchange.ts), streamed calls (exec-stream.ts), cancels (cancel.ts) and fan-out (run-many.ts).
 */
import { raceAbort } from "@remote-task/internal";
import {
  type CallStatus,
  type CancelResponse,
  callStatusSchema,
  cancelResponseSchema,
  type ExecResult,
  execResultSchema,
  type HealthResponse,
  healthResponseSchema,
  type StreamEvent,
} from "@remote-task/protocol";
import { type Bridge, BridgePool } from "./bridges.js";
import { assertRunOptions, type PreparedCall, prepareCall } from "./call-options.js";
import { Cancels } from "./cancel.js";
import { BridgeCapabilities, freeCapacity } from "./capabilities.js";
import {
  type Env,
  graceSecondsFor,
  NO_RETRY,
  optionsFromEnv,
  processEnv,
  type ResolvedConfig,
  type RetryPolicy,
  resolveConfig,
} from "./config.js";
import { Dispatcher } from "./dispatch.js";
import {
  ConfigurationError,
  ConnectionError,
  InvalidRequestError,
  ProtocolError,
  type RemoteTaskError,
} from "./errors.js";
import { type Exchange, receiveJson, type Schema, settleFailure } from "./exchange.js";
import { execEvents } from "./exec-stream.js";
import { DurableCallHandle, type HandleHost } from "./handle.js";
import {
  type Attachment,
  awaitResult,
  awaitTaken,
  callStatus,
  NeverReached,
  type ReattachContext,
  resentFailure,
} from "./reattach.js";
import { toTaskResult } from "./result.js";
import { runMany } from "./run-many.js";
import { CallScope } from "./scope.js";
import { Secrets } from "./secrets.js";
import {
  fetchTransport,
  type Transport,
  type TransportResponse,
  undiciTransport,
} from "./transport.js";
import type {
  CallHandle,
  CancelResult,
  ClientOptions,
  RemoteTaskClient,
  RunManyOptions,
  RunOptions,
  SettledTask,
  Task,
  TaskResult,
} from "./types.js";

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

/** Bytes of the end of each output a handle's result keeps (the protocol's 1 MiB default cap). */
const DEFAULT_HANDLE_KEPT_BYTES = 1_048_576;

class Client implements RemoteTaskClient {
  readonly #config: ResolvedConfig;
  readonly #transport: Transport;
  readonly #pool: BridgePool;
  readonly #dispatch: Dispatcher;
  readonly #cancels: Cancels;
  readonly #capabilities: BridgeCapabilities;
  readonly #reattach: ReattachContext;
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
    const capabilities = new BridgeCapabilities((bridge) =>
      this.#health(bridge, undefined, config.retry),
    );
    this.#capabilities = capabilities;
    this.#reattach = {
      transport: this.#transport,
      maxResponseBytes: config.maxResponseBytes,
      idleTimeoutSeconds: config.idleTimeoutSeconds,
    };
    this.#dispatch = new Dispatcher(this.#pool, this.#transport, capabilities);
    this.#cancels = new Cancels((bridge, sandboxId, signal, retry, deadlineMs) =>
      this.#postCancel(bridge, sandboxId, signal, retry, deadlineMs),
    );
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
      // The events always end with an exit event or throw.
      throw new ProtocolError("The bridge's stream ended without an exit event.");
    }
    const call = this.#prepare(command, options, onRefused);
    const scope = this.#execScope(call, options.signal);
    const started = performance.now();
    const exchange = this.#execExchange(call, "application/json");
    const result = await this.#execResult(scope, exchange, call);
    return toTaskResult(result, call.sandboxId, performance.now() - started, call.keptBytes);
  }

  /**
   * The exchange of a JSON exec call. When the connection drops after the request left (the
   * command may be running), a bridge that re-attaches (its `/health` reports `durable`) is asked
   * for the call's outcome until the call's deadline: the one result, never a second run. When
   * the bridge proves the request never reached it, the same request goes to it again.
   */
  #execResult(scope: CallScope, exchange: Exchange, call: PreparedCall): Promise<ExecResult> {
    return this.#sendDurably(
      scope,
      exchange,
      call,
      (response) =>
        receiveJson(scope, response, execResultSchema, "an exec result", {
          maxResponseBytes: this.#config.maxResponseBytes,
          keptBytes: exchange.keptBytes,
        }),
      async (attachment, lost) => {
        const result = await awaitResult(this.#reattach, scope, attachment, lost);
        scope.settled();
        return result;
      },
    );
  }

  /**
   * Sends an exec call's request and reads its answer (`answer`). When the connection drops
   * after the request left, a bridge that re-attaches is asked for the call instead (`follow`,
   * given the failure the call ends with if the bridge does not have it); when the bridge proves
   * the request never reached it, the same request goes to that bridge again, and a conflict
   * then (the first arrived after all) ends the call with that failure. Never a second run. It
   * ends the call's scope and its hold on the bridge.
   */
  async #sendDurably<T>(
    scope: CallScope,
    exchange: Exchange,
    call: PreparedCall,
    answer: (response: TransportResponse) => Promise<T>,
    follow: (attachment: Attachment, lost: RemoteTaskError) => Promise<T>,
  ): Promise<T> {
    let sending = exchange;
    /** The failure that made the call re-attach, once its request is sent again. */
    let lost: RemoteTaskError | undefined;
    try {
      for (;;) {
        const sentAt = performance.now();
        /** Something of the answer arrived: the bridge had the request. */
        let received = false;
        try {
          const response = await this.#dispatch.send(scope, sending);
          received = true;
          return await answer(response);
        } catch (caught) {
          const error = resentFailure(caught, lost);
          if (lost !== undefined && error === lost) throw settleFailure(lost, scope);
          const attachment = await this.#reattachable(
            error,
            scope,
            call,
            received ? undefined : sentAt,
          );
          if (attachment === undefined) throw settleFailure(error, scope);
          try {
            return await follow(attachment, error as RemoteTaskError);
          } catch (failure) {
            if (!(failure instanceof NeverReached)) throw settleFailure(failure, scope);
            // Nothing of it ran: the same request, to the bridge that had it.
            lost = error as RemoteTaskError;
            sending = { ...exchange, to: attachment.bridge };
          }
        }
      }
    } finally {
      scope.dispose();
      this.#dispatch.endCall(scope);
    }
  }

  /**
   * Where to re-attach to a call whose connection dropped after it was sent, if anywhere;
   * `sentAt` (`performance.now()` before the request was sent) when nothing of its answer came.
   */
  async #reattachable(
    error: unknown,
    scope: CallScope,
    call: PreparedCall,
    sentAt: number | undefined,
  ): Promise<Attachment | undefined> {
    if (scope.reason || !ConnectionError.isInstance(error) || !error.mayHaveRun) return undefined;
    const bridge = this.#dispatch.bridgeOf(call.sandboxId);
    if (bridge === undefined) return undefined;
    // Asked within the call's deadline: an unreachable bridge must not hold the call past it.
    const reattaches = await raceAbort(this.#capabilities.reattaches(bridge), scope.signal).catch(
      () => false,
    );
    if (!reattaches || scope.reason) return undefined;
    return { bridge, sandboxId: call.sandboxId, secrets: call.secrets, sentAt };
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
      async () =>
        freeCapacity(
          await Promise.all(
            this.#pool.bridges.map((bridge) =>
              this.#health(bridge, options.signal, NO_RETRY).then(
                (health) => health.admission,
                () => undefined,
              ),
            ),
          ),
        ),
    );
  }

  async start(command: string, options: Omit<RunOptions, "onOutput"> = {}): Promise<CallHandle> {
    assertRunOptions(options);
    if ((options as RunOptions).onOutput !== undefined) {
      throw new InvalidRequestError("start() takes no onOutput: use the handle's stream().");
    }
    const call = this.#prepare(command, options, undefined);
    call.request = { ...call.request, detach: true };
    // No cancel when it ends early: a detached call runs on by design.
    const scope = new CallScope({
      signal: options.signal,
      deadlineMs: call.deadlineMs,
      sandboxId: call.sandboxId,
      what: "Starting the detached call",
      runsCommand: true,
    });
    const exchange = this.#execExchange(call, "application/json");
    const timeoutSeconds = call.request.timeoutSeconds ?? this.#config.timeoutSeconds;
    const handleAt = (bridge: Bridge) =>
      this.#handle(call.sandboxId, timeoutSeconds, {
        bridge,
        sandboxId: call.sandboxId,
        secrets: call.secrets,
      });
    // An answer lost on the way: the bridge is asked whether it took the call.
    return this.#sendDurably(
      scope,
      exchange,
      call,
      async (response) => {
        const bridge = this.#dispatch.bridgeOf(call.sandboxId) ?? this.#pool.first;
        await receiveJson(scope, response, callStatusSchema, "a call status", {
          maxResponseBytes: this.#config.maxResponseBytes,
          keptBytes: undefined,
        });
        return handleAt(bridge);
      },
      async (attachment, lost) => {
        await awaitTaken(this.#reattach, scope, attachment, lost);
        return handleAt(attachment.bridge);
      },
    );
  }

  attach(sandboxId: string): CallHandle {
    this.#assertOpen();
    const id = typeof sandboxId === "string" ? sandboxId.toLowerCase() : sandboxId;
    return this.#handle(id, undefined, undefined);
  }

  /** A handle on `sandboxId`; without `known`, its bridge is the first that knows the id. */
  #handle(
    sandboxId: string,
    timeoutSeconds: number | undefined,
    known: Attachment | undefined,
  ): CallHandle {
    const secrets = new Secrets(this.#tokens);
    let found: Promise<Attachment> | undefined =
      known === undefined ? undefined : Promise.resolve(known);
    const host: HandleHost = {
      context: this.#reattach,
      keptBytes: DEFAULT_HANDLE_KEPT_BYTES,
      assertOpen: () => this.#assertOpen(),
      waitSeconds: (seconds) => {
        const timeout = seconds ?? this.#config.timeoutSeconds;
        return timeout + graceSecondsFor(this.#config, timeout);
      },
      attachment: () => {
        found ??= this.#findCall(sandboxId, secrets).catch((error: unknown) => {
          found = undefined;
          throw error;
        });
        return found;
      },
      cancel: (id, signal) => this.cancel(id, { signal }),
    };
    return new DurableCallHandle(host, sandboxId, timeoutSeconds);
  }

  /** The first of the client's bridges that knows `sandboxId` (the first one when none does). */
  async #findCall(sandboxId: string, secrets: Secrets): Promise<Attachment> {
    const bridges = this.#pool.bridges;
    const first = { bridge: this.#pool.first, sandboxId, secrets };
    if (bridges.length === 1) return first;
    for (const bridge of bridges) {
      const scope = new CallScope({
        deadlineMs: this.#shortDeadlineMs(),
        sandboxId,
        what: "Looking for the call",
      });
      try {
        const attachment = { bridge, sandboxId, secrets };
        const status: CallStatus = await callStatus(this.#reattach, scope, attachment, 0);
        if (status.state !== "unknown") return attachment;
      } catch {
        // a bridge that does not answer does not have it, as far as we can tell
      } finally {
        scope.dispose();
      }
    }
    return first;
  }

  async health(options: { signal?: AbortSignal | undefined } = {}): Promise<HealthResponse> {
    this.#assertOpen();
    return this.#health(this.#pool.first, options.signal, this.#config.retry);
  }

  async cancel(
    givenId: string,
    options: { signal?: AbortSignal | undefined } = {},
  ): Promise<CancelResult> {
    this.#assertOpen();
    // The bridge that took the call, while it is in flight; otherwise every bridge (one that
    // never had the id answers that it cancelled nothing).
    const to = (sandboxId: string) => {
      const taken = this.#dispatch.bridgeOf(sandboxId);
      return taken === undefined ? this.#pool.bridges : [taken];
    };
    return this.#cancels.cancel(givenId, to, options.signal, this.#config.retry);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#cancels.close();
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

  #prepare(
    command: string,
    options: RunOptions,
    onRefused: (() => void) | undefined,
  ): PreparedCall {
    this.#assertOpen();
    return prepareCall(this.#config, this.#tokens, command, options, onRefused);
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
    scope.onAbort(() => {
      const bridge = this.#dispatch.bridgeOf(call.sandboxId);
      if (scope.commandInFlight && bridge !== undefined) {
        this.#cancels.inBackground(bridge, call.sandboxId);
      }
    });
    return scope;
  }

  #execExchange(call: PreparedCall, accept: string): Exchange {
    return {
      method: "POST",
      path: "/exec",
      body: call.request,
      accept,
      retry: this.#config.retry,
      secrets: call.secrets,
      keptBytes: call.keptBytes,
      stdinBytes: call.stdinBytes,
      onRefused: call.onRefused,
    };
  }

  /**
   * A streamed exec call, prepared when its first event is asked for; `meta` receives its
   * sandbox id and output budget then.
   */
  async *#events(
    command: string,
    options: RunOptions,
    onOutput: RunOptions["onOutput"],
    meta: { sandboxId: string; keptBytes: number },
    onRefused: (() => void) | undefined,
  ): AsyncGenerator<StreamEvent, void, undefined> {
    const call = this.#prepare(command, options, onRefused);
    meta.sandboxId = call.sandboxId;
    meta.keptBytes = call.keptBytes;
    const scope = this.#execScope(call, options.signal);
    const context = {
      config: this.#config,
      dispatch: this.#dispatch,
      firstBridge: this.#pool.first,
      reattach: async (error: unknown, lostScope: CallScope, sentAt: number | undefined) => {
        const attachment = await this.#reattachable(error, lostScope, call, sentAt);
        return attachment === undefined ? undefined : { context: this.#reattach, attachment };
      },
    };
    yield* execEvents(
      context,
      call,
      scope,
      this.#execExchange(call, "text/event-stream"),
      onOutput,
    );
  }

  /** The secrets of a call that sends only the token (health, cancel). */
  #plain(): { retry: RetryPolicy; secrets: Secrets } {
    return { retry: this.#config.retry, secrets: new Secrets(this.#tokens) };
  }

  /**
   * The one exchange path of a JSON call: send (retrying what provably did not run), read the
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
      const response = await this.#dispatch.send(scope, exchange);
      return await receiveJson(scope, response, schema, what, {
        maxResponseBytes: this.#config.maxResponseBytes,
        keptBytes: exchange.keptBytes,
      });
    } catch (error) {
      throw settleFailure(error, scope);
    } finally {
      scope.dispose();
      this.#dispatch.endCall(scope);
    }
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
    const exchange: Exchange = {
      method: "GET",
      path: "/health",
      accept: "application/json",
      ...this.#plain(),
      retry,
      to: bridge,
    };
    return this.#exchange(scope, exchange, healthResponseSchema, "a health check");
  }

  #postCancel(
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
}
