import {
  type CancelResponse,
  cancelResponseSchema,
  type ExecRequest,
  execRequestSchema,
  execResultSchema,
  type HealthResponse,
  healthResponseSchema,
  isSandboxId,
  newSandboxId,
  type StreamEvent,
} from "@remote-task/protocol";
import { parseJson, readBounded } from "./body.js";
import {
  type Env,
  NO_RETRY,
  optionsFromEnv,
  processEnv,
  type ResolvedConfig,
  type RetryPolicy,
  resolveConfig,
} from "./config.js";
import {
  AbortError,
  ConfigurationError,
  InvalidRequestError,
  ProtocolError,
  RemoteTaskError,
} from "./errors.js";
import {
  connectionFailure,
  errorFromBody,
  errorFromResponse,
  notJson,
  protocolMismatch,
  Secrets,
  schemaFailure,
  statusForCode,
  toTaskResult,
} from "./responses.js";
import { Retryable, withRetries } from "./retry.js";
import { runMany } from "./run-many.js";
import { CallScope } from "./scope.js";
import { sseEvents } from "./sse.js";
import {
  fetchTransport,
  type Transport,
  type TransportResponse,
  undiciTransport,
} from "./transport.js";
import type {
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

/** Whether the call's command may be running on the bridge right now (then cancel on failure). */
interface CallState {
  mayBeRunning: boolean;
}

/** An exception thrown by the caller's own `onOutput`, passed through unchanged. */
class CallbackFailure {
  constructor(readonly error: unknown) {}
}

interface Exchange {
  method: "GET" | "POST";
  path: string;
  body?: unknown;
  accept: string;
  retry: RetryPolicy;
  secrets: Secrets;
  state?: CallState;
}

interface PreparedCall {
  sandboxId: string;
  request: ExecRequest;
  deadlineMs: number;
  secrets: Secrets;
}

/** Creates a client for one bridge. Options are checked now; a mistake is a `ConfigurationError`. */
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
  readonly #backgroundCancels = new Set<Promise<void>>();
  #closed = false;

  constructor(config: ResolvedConfig) {
    this.#config = config;
    this.#transport =
      config.fetch === undefined
        ? undiciTransport(config.dispatcher, config.maxConnections)
        : fetchTransport(config.fetch);
  }

  async run(command: string, options: RunOptions = {}): Promise<TaskResult> {
    const onOutput = options.onOutput;
    if (onOutput !== undefined) {
      if (typeof onOutput !== "function") {
        throw new InvalidRequestError("onOutput must be a function.");
      }
      const started = performance.now();
      const call = { sandboxId: "" };
      for await (const event of this.#events(command, options, onOutput, call)) {
        if (event.type === "exit") {
          return toTaskResult(event.result, call.sandboxId, performance.now() - started);
        }
      }
      // #events always ends with an exit event or throws.
      throw new ProtocolError("The bridge's stream ended without an exit event.");
    }
    return this.#runJson(command, options);
  }

  stream(command: string, options: Omit<RunOptions, "onOutput"> = {}): AsyncIterable<StreamEvent> {
    return this.#events(command, options, undefined, { sandboxId: "" });
  }

  runMany(
    tasks: ReadonlyArray<string | Task>,
    options: RunManyOptions = {},
  ): Promise<SettledTask[]> {
    this.#assertOpen();
    return runMany((command, runOptions) => this.run(command, runOptions), tasks, options);
  }

  async health(options: { signal?: AbortSignal } = {}): Promise<HealthResponse> {
    this.#assertOpen();
    const secrets = new Secrets([this.#config.token]);
    const scope = new CallScope({
      signal: options.signal,
      deadlineMs: this.#shortDeadlineMs(),
      what: "The health check",
    });
    try {
      const response = await this.#send(scope, {
        method: "GET",
        path: "/health",
        accept: "application/json",
        retry: this.#config.retry,
        secrets,
      });
      const value = await this.#readJson(scope, response, undefined);
      const parsed = healthResponseSchema.safeParse(value);
      if (!parsed.success) {
        throw protocolMismatch("a health check", response.status, parsed.error, undefined);
      }
      return parsed.data;
    } catch (error) {
      throw this.#settleFailure(error, scope);
    } finally {
      scope.dispose();
    }
  }

  async cancel(sandboxId: string, options: { signal?: AbortSignal } = {}): Promise<boolean> {
    this.#assertOpen();
    if (!isSandboxId(sandboxId)) {
      throw new InvalidRequestError(
        "sandboxId is not a valid sandbox id (lowercase letters, digits and '-', 1-63 characters).",
        { issues: [{ path: ["sandboxId"], message: "invalid sandbox id" }] },
      );
    }
    const response = await this.#postCancel(
      sandboxId,
      options.signal,
      this.#config.retry,
      undefined,
    );
    return response.cancelled;
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
  #prepare(command: string, options: RunOptions): PreparedCall {
    this.#assertOpen();
    const sandboxId = options.sandboxId ?? newSandboxId(this.#config.idPrefix);
    const timeoutSeconds = options.timeoutSeconds ?? this.#config.timeoutSeconds;
    const candidate: Record<string, unknown> = {
      sandboxId,
      command,
      timeoutSeconds,
      cwd: options.cwd ?? this.#config.cwd,
    };
    if (options.env !== undefined) candidate.env = options.env;
    if (options.maxOutputBytes !== undefined) candidate.maxOutputBytes = options.maxOutputBytes;
    const secrets = new Secrets([
      this.#config.token,
      ...(typeof options.env === "object" && options.env !== null
        ? Object.values(options.env)
        : []),
    ]);
    const parsed = execRequestSchema.safeParse(candidate);
    if (!parsed.success) {
      const issues = parsed.error.issues.map((issue) => ({
        path: issue.path.map((part) => (typeof part === "symbol" ? String(part) : part)),
        message: secrets.redact(issue.message, 200),
      }));
      const { summary } = schemaFailure({ issues });
      throw new InvalidRequestError(`The request is invalid and was not sent (${summary}).`, {
        issues,
      });
    }
    const deadlineMs = (timeoutSeconds + this.#config.graceSeconds) * 1000;
    return { sandboxId, request: parsed.data, deadlineMs, secrets };
  }

  #scopeFor(call: PreparedCall, signal: AbortSignal | undefined, state: CallState): CallScope {
    const scope = new CallScope({
      signal,
      deadlineMs: call.deadlineMs,
      sandboxId: call.sandboxId,
      what: "Running the command",
    });
    // Every way a call can end early aborts its scope; stop the remote command if it may run.
    scope.signal.addEventListener(
      "abort",
      () => {
        if (state.mayBeRunning) this.#cancelInBackground(call.sandboxId);
      },
      { once: true },
    );
    return scope;
  }

  async #runJson(command: string, options: RunOptions): Promise<TaskResult> {
    const call = this.#prepare(command, options);
    const state: CallState = { mayBeRunning: false };
    const scope = this.#scopeFor(call, options.signal, state);
    const started = performance.now();
    try {
      const response = await this.#send(scope, {
        method: "POST",
        path: "/exec",
        body: call.request,
        accept: "application/json",
        retry: this.#config.retry,
        secrets: call.secrets,
        state,
      });
      const value = await this.#readJson(scope, response, call.sandboxId);
      state.mayBeRunning = false;
      const parsed = execResultSchema.safeParse(value);
      if (!parsed.success) {
        throw protocolMismatch("an exec result", response.status, parsed.error, call.sandboxId);
      }
      return toTaskResult(parsed.data, call.sandboxId, performance.now() - started);
    } catch (error) {
      throw this.#settleFailure(error, scope);
    } finally {
      scope.dispose();
    }
  }

  /**
   * The validated events of a streamed exec; ends right after `exit`, throws the typed error of
   * an `error` event. Ending the iteration early aborts the call and cancels the command.
   */
  async *#events(
    command: string,
    options: RunOptions,
    onOutput: RunOptions["onOutput"],
    /** Receives the call's sandbox id once the call is prepared. */
    meta: { sandboxId: string },
  ): AsyncGenerator<StreamEvent, void, undefined> {
    const call = this.#prepare(command, options);
    const { sandboxId } = call;
    meta.sandboxId = sandboxId;
    const state: CallState = { mayBeRunning: false };
    const scope = this.#scopeFor(call, options.signal, state);
    let finished = false;
    const deliver = (event: StreamEvent) => {
      if (onOutput === undefined || (event.type !== "stdout" && event.type !== "stderr")) return;
      try {
        onOutput({ stream: event.type, data: event.data });
      } catch (error) {
        throw new CallbackFailure(error);
      }
    };
    try {
      const response = await this.#send(scope, {
        method: "POST",
        path: "/exec",
        body: call.request,
        accept: "text/event-stream",
        retry: this.#config.retry,
        secrets: call.secrets,
        state,
      });
      const contentType = response.header("content-type");
      if (!/^\s*text\/event-stream/i.test(contentType ?? "")) {
        // A bridge without streaming (the reference one) answers JSON; replay it as events.
        const value = await this.#readJson(scope, response, sandboxId);
        state.mayBeRunning = false;
        const parsed = execResultSchema.safeParse(value);
        if (!parsed.success) {
          throw protocolMismatch("an exec result", response.status, parsed.error, sandboxId);
        }
        const result = parsed.data;
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
        sandboxId,
      });
      for await (const event of events) {
        scope.touch();
        if (event.type === "start" && event.sandboxId !== sandboxId) {
          throw new ProtocolError(
            "The bridge started a different sandbox id than the one requested.",
            { status: response.status, sandboxId },
          );
        }
        if (event.type === "error") {
          state.mayBeRunning = false;
          throw errorFromBody(statusForCode(event.error.code), event.error, {
            retryAfterHeader: undefined,
            sandboxId,
            secrets: call.secrets,
          });
        }
        if (event.type === "exit") {
          state.mayBeRunning = false;
          finished = true;
          response.discard();
        }
        deliver(event);
        yield event;
        if (finished) return;
      }
      throw new ProtocolError(
        "The bridge's stream ended without an exit event; the command's outcome is unknown.",
        { status: response.status, sandboxId },
      );
    } catch (error) {
      if (error instanceof CallbackFailure) {
        scope.abort(new AbortError("onOutput threw; the call was aborted.", { sandboxId }));
        throw error.error;
      }
      throw this.#settleFailure(error, scope);
    } finally {
      // Reached without an error when the consumer stops iterating early.
      if (!finished)
        scope.abort(
          new AbortError("The stream was closed before the command ended.", { sandboxId }),
        );
      scope.dispose();
    }
  }

  /** Sends one request, retrying what provably did not run; resolves with a 2xx response. */
  async #send(scope: CallScope, exchange: Exchange): Promise<TransportResponse> {
    const { token } = this.#config;
    const headers: Record<string, string> = { accept: exchange.accept };
    if (exchange.body !== undefined) headers["content-type"] = "application/json";
    if (token !== undefined) headers.authorization = `Bearer ${token}`;
    const body = exchange.body === undefined ? undefined : JSON.stringify(exchange.body);
    const url = `${this.#config.baseUrl}${exchange.path}`;
    const sandboxId = scope.sandboxId;
    return withRetries(exchange.retry, scope.signal, scope.deadlineAt, async () => {
      let response: TransportResponse;
      if (scope.reason) throw scope.reason;
      if (exchange.state) exchange.state.mayBeRunning = true;
      try {
        response = await this.#transport.send({
          method: exchange.method,
          url,
          headers,
          body,
          signal: scope.signal,
        });
      } catch (error) {
        if (scope.reason) throw scope.reason;
        const failure = connectionFailure(error, true, sandboxId);
        if (failure instanceof Retryable && exchange.state) exchange.state.mayBeRunning = false;
        throw failure;
      }
      // However the call ends early, the response is released (even a stalled read ends).
      scope.signal.addEventListener("abort", () => response.discard(), { once: true });
      if (response.status >= 200 && response.status < 300) return response;
      // The bridge answered with an error: it is not (or no longer) running the command.
      if (exchange.state) exchange.state.mayBeRunning = false;
      let bytes: Uint8Array;
      try {
        bytes = await readBounded(response, MAX_ERROR_BODY_BYTES, scope.signal, {
          status: response.status,
          sandboxId,
        });
      } catch (error) {
        response.discard();
        if (scope.reason) throw scope.reason;
        if (!ProtocolError.isInstance(error)) throw connectionFailure(error, false, sandboxId);
        bytes = new Uint8Array();
      }
      throw errorFromResponse(bytes, {
        status: response.status,
        contentType: response.header("content-type"),
        retryAfterHeader: response.header("retry-after"),
        sandboxId,
        secrets: exchange.secrets,
      });
    });
  }

  async #readJson(
    scope: CallScope,
    response: TransportResponse,
    sandboxId: string | undefined,
  ): Promise<unknown> {
    let bytes: Uint8Array;
    try {
      bytes = await readBounded(response, this.#config.maxResponseBytes, scope.signal, {
        status: response.status,
        sandboxId,
      });
    } catch (error) {
      response.discard();
      if (scope.reason) throw scope.reason;
      if (RemoteTaskError.isInstance(error)) throw error;
      throw connectionFailure(error, false, sandboxId);
    }
    const parsed = parseJson(bytes);
    if (!parsed.ok) throw notJson(response.status, response.header("content-type"), sandboxId);
    return parsed.value;
  }

  /** The error a failed call ends with; aborts the scope so every exchange of the call stops. */
  #settleFailure(error: unknown, scope: CallScope): unknown {
    let failure: RemoteTaskError;
    if (scope.reason) failure = scope.reason;
    else if (error instanceof Retryable) failure = error.error;
    else if (RemoteTaskError.isInstance(error)) failure = error;
    else {
      const mapped = connectionFailure(error, false, scope.sandboxId);
      failure = mapped instanceof Retryable ? mapped.error : mapped;
    }
    scope.abort(failure);
    return failure;
  }

  async #postCancel(
    sandboxId: string,
    signal: AbortSignal | undefined,
    retry: RetryPolicy,
    deadlineMs: number | undefined,
  ): Promise<CancelResponse> {
    const scope = new CallScope({
      signal,
      deadlineMs: deadlineMs ?? this.#shortDeadlineMs(),
      sandboxId,
      what: "Cancelling the sandbox",
    });
    try {
      const response = await this.#send(scope, {
        method: "POST",
        path: "/cancel",
        body: { sandboxId },
        accept: "application/json",
        retry,
        secrets: new Secrets([this.#config.token]),
      });
      const value = await this.#readJson(scope, response, sandboxId);
      const parsed = cancelResponseSchema.safeParse(value);
      if (!parsed.success) {
        throw protocolMismatch("a cancel answer", response.status, parsed.error, sandboxId);
      }
      return parsed.data;
    } catch (error) {
      throw this.#settleFailure(error, scope);
    } finally {
      scope.dispose();
    }
  }

  /** Fire and forget: never throws, bounded by its own short deadline; `close()` waits for it. */
  #cancelInBackground(sandboxId: string): void {
    if (this.#closed) return;
    const pending = this.#postCancel(sandboxId, undefined, NO_RETRY, BACKGROUND_CANCEL_MS).then(
      () => {},
      () => {},
    );
    this.#backgroundCancels.add(pending);
    void pending.finally(() => this.#backgroundCancels.delete(pending));
  }
}
