/**
 * One HTTP try of a request at one bridge, and reading its answer: the headers, the token, the
 * call's phase as the request leaves and is answered, an error answer turned into the call's
 * typed error, a 2xx JSON answer read within its limits and validated with the protocol schema.
 */
import { readBounded, readJson } from "./body.js";
import type { Bridge } from "./bridges.js";
import { type RetryPolicy, WHOLE_RESULT_BYTES } from "./config.js";
import {
  connectionFailure,
  errorFromResponse,
  notJson,
  protocolMismatch,
  type SchemaError,
} from "./error-mapping.js";
import { ProtocolError, RemoteTaskError } from "./errors.js";
import type { ParsedJson } from "./json.js";
import { referenceTimeout } from "./result.js";
import type { CallScope } from "./scope.js";
import type { Secrets } from "./secrets.js";
import { jsonResponse, type Transport, type TransportResponse } from "./transport.js";

/** Error bodies are small; more than this is not a protocol error body. */
const MAX_ERROR_BODY_BYTES = 64 * 1024;

/** One request to a bridge. */
export interface Exchange {
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
export interface Schema<T> {
  safeParse(value: unknown): { success: true; data: T } | { success: false; error: SchemaError };
}

/** What an error answer of `bridge` is explained with. */
export function errorContext(
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

/** One try of `exchange` at `bridge`; resolves with a 2xx response, or throws its error. */
export async function sendOnce(
  transport: Transport,
  scope: CallScope,
  exchange: Exchange,
  bridge: Bridge,
): Promise<TransportResponse> {
  const { token } = bridge.target;
  const headers: Record<string, string> = { accept: exchange.accept };
  if (exchange.body !== undefined) headers["content-type"] = "application/json";
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  const body = exchange.body === undefined ? undefined : JSON.stringify(exchange.body);
  let response: TransportResponse;
  // Nothing has left yet: a transport that cannot work here, or an abort meanwhile, sends no
  // cancel for this try.
  const preparing = transport.prepare();
  if (preparing !== undefined) await preparing;
  if (scope.reason) throw scope.reason;
  scope.sent();
  try {
    response = await transport.send({
      method: exchange.method,
      url: bridge.url(exchange.path),
      headers,
      body,
      abort: scope,
    });
  } catch (error) {
    if (scope.reason) throw scope.reason;
    const failure = connectionFailure(error, true, scope.facts);
    if (failure.retryable) scope.unsent();
    throw failure;
  }
  scope.answered();
  // However the call ends early, the response is released (even a stalled read ends).
  scope.onAbort(() => response.discard());
  if (response.status >= 200 && response.status < 300) return response;
  // The bridge answered with an error: it is not (or no longer) running the command.
  scope.settled();
  const context = { status: response.status, ...scope.facts };
  const bytes = await readOrFail(
    scope,
    response,
    readBounded(response, MAX_ERROR_BODY_BYTES, scope, context),
    () => undefined,
  );
  const timedOut = exchange.path === "/exec" ? referenceTimeout(response.status, bytes) : undefined;
  if (timedOut !== undefined) return jsonResponse(timedOut);
  throw errorFromResponse(
    bytes,
    { status: response.status, contentType: response.header("content-type") },
    errorContext(
      bridge,
      exchange.secrets,
      scope.sandboxId,
      response.header("retry-after"),
      exchange.stdinBytes,
    ),
  );
}

/** Reads a 2xx answer's JSON (the call's outcome) and validates it with `schema`. */
export async function receiveJson<T>(
  scope: CallScope,
  response: TransportResponse,
  schema: Schema<T>,
  what: string,
  limits: { maxResponseBytes: number; keptBytes: number | undefined },
): Promise<T> {
  const context = { status: response.status, ...scope.facts };
  const { maxResponseBytes, keptBytes } = limits;
  const maxBytes =
    keptBytes === undefined ? maxResponseBytes : Math.min(maxResponseBytes, WHOLE_RESULT_BYTES);
  let parsed: ParsedJson;
  try {
    parsed = await readJson(response, { maxBytes, keptBytes }, scope, context);
  } catch (error) {
    throw readFailure(scope, response, error);
  }
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
 * Waits for `reading` (of an error answer's body); a failure is the call's typed error. A body
 * over its limit reads as `tooLarge()` (the answer's status alone then explains the error).
 */
function readOrFail<T>(
  scope: CallScope,
  response: TransportResponse,
  reading: Promise<T>,
  tooLarge: () => T,
): Promise<T> {
  return reading.catch((error: unknown) => {
    if (!scope.reason && ProtocolError.isInstance(error)) {
      response.discard();
      return tooLarge();
    }
    throw readFailure(scope, response, error);
  });
}

/** The call's typed error for a failed read of the answer's body (which is released). */
function readFailure(
  scope: CallScope,
  response: TransportResponse,
  error: unknown,
): RemoteTaskError {
  response.discard();
  if (scope.reason) return scope.reason;
  if (RemoteTaskError.isInstance(error)) return error;
  return connectionFailure(error, false, scope.facts);
}

/** The typed error a failure of the call is (a transport failure while reading becomes a `ConnectionError`). */
export function asFailure(error: unknown, scope: CallScope): RemoteTaskError {
  if (scope.reason) return scope.reason;
  if (RemoteTaskError.isInstance(error)) return error;
  return connectionFailure(error, false, scope.facts);
}

/** The error a failed call ends with; aborts the scope so every exchange of the call stops. */
export function settleFailure(error: unknown, scope: CallScope): RemoteTaskError {
  const failure = asFailure(error, scope);
  scope.abort(failure);
  return failure;
}
