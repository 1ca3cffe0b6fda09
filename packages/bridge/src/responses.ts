import { brandClass, retryAfterHeader } from "@remote-task/internal";
import {
  ERROR_STATUS,
  type ErrorBody,
  type ErrorCode,
  errorStatuses,
  type Issue,
} from "@remote-task/protocol";

/**
 * What `new Headers()` takes. The DOM lib's `HeadersInit` is not in Node's or the Workers' types,
 * and the published declarations must compile without the DOM lib.
 */
type HeadersInput = ConstructorParameters<typeof Headers>[0];

/** What an error answer may carry besides its code and message. */
export interface ErrorDetails {
  /** The failing fields of an invalid request. */
  issues?: Issue[] | undefined;
  /** When to try again; also sent as `Retry-After`. */
  retryAfterSeconds?: number | undefined;
  /** Extra response headers (`Allow`, `WWW-Authenticate`, `Connection`). */
  headers?: HeadersInput | undefined;
  /**
   * The status, for a code the protocol sends with more than one (`errorStatuses`): 429 for
   * `capacity_exceeded` when the bridge is at its own admission limits. Default: `ERROR_STATUS`.
   */
  status?: number | undefined;
}

/** A JSON response with `cache-control: no-store` (bridge answers are never cacheable). */
export function jsonResponse(body: unknown, status = 200, headers: HeadersInput = {}): Response {
  const all = new Headers(headers);
  all.set("content-type", "application/json; charset=utf-8");
  all.set("cache-control", "no-store");
  return new Response(JSON.stringify(body), { status, headers: all });
}

/** The protocol error body for `code`. */
export function errorBody(
  code: ErrorCode,
  message: string,
  details: Omit<ErrorDetails, "headers"> = {},
): ErrorBody {
  const body: ErrorBody = { error: message, code };
  if (details.issues !== undefined) body.issues = details.issues;
  if (details.retryAfterSeconds !== undefined) body.retryAfterSeconds = details.retryAfterSeconds;
  return body;
}

/**
 * The protocol's error response: the body for `code`, the status `ERROR_STATUS` gives it (or
 * `details.status`, one the protocol allows for the code), and
 * `Retry-After` when the answer says when to retry. Every error the bridge answers with is
 * built here, and so is the Worker's answer for a configuration it cannot use.
 */
export function errorResponse(
  code: ErrorCode,
  message: string,
  details: ErrorDetails = {},
): Response {
  const status = details.status ?? ERROR_STATUS[code];
  if (!errorStatuses(code).includes(status)) {
    throw new TypeError(`The protocol never sends ${code} with HTTP ${status}.`);
  }
  const headers = new Headers(details.headers);
  if (details.retryAfterSeconds !== undefined) {
    headers.set("retry-after", retryAfterHeader(details.retryAfterSeconds));
  }
  return jsonResponse(errorBody(code, message, details), status, headers);
}

/** Thrown inside request handling to answer with a protocol error (see `errorResponse`). */
export class HttpError extends Error {
  static readonly isInstance = brandClass(this, "remote-task.HttpError");
  override readonly name = "HttpError";

  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: ErrorDetails = {},
  ) {
    super(message);
  }

  toResponse(): Response {
    return errorResponse(this.code, this.message, this.details);
  }
}

/** A 400 `invalid_request` to throw, with the failing fields. */
export function invalidRequest(message: string, issues: Issue[]): HttpError {
  return new HttpError("invalid_request", message, { issues });
}
