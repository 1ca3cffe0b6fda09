import { ERROR_STATUS, type ErrorBody, type ErrorCode, type Issue } from "@remote-task/protocol";

const JSON_HEADERS = { "content-type": "application/json; charset=utf-8" } as const;

/** A JSON response with `cache-control: no-store` (bridge answers are never cacheable). */
export function jsonResponse(body: unknown, status = 200, headers: HeadersInit = {}): Response {
  const all = new Headers(headers);
  for (const [k, v] of Object.entries(JSON_HEADERS)) all.set(k, v);
  all.set("cache-control", "no-store");
  return new Response(JSON.stringify(body), { status, headers: all });
}

/** The protocol error body for `code`. */
export function errorBody(
  code: ErrorCode,
  message: string,
  extra: { issues?: Issue[]; retryAfterSeconds?: number } = {},
): ErrorBody {
  return { error: message, code, ...extra };
}

/** A protocol error response with the status from `ERROR_STATUS` (and `Retry-After` when known). */
export function errorResponse(
  code: ErrorCode,
  message: string,
  extra: { issues?: Issue[]; retryAfterSeconds?: number; headers?: HeadersInit } = {},
): Response {
  const { headers, ...rest } = extra;
  const all = new Headers(headers);
  if (rest.retryAfterSeconds !== undefined) {
    all.set("retry-after", String(Math.max(0, Math.ceil(rest.retryAfterSeconds))));
  }
  return jsonResponse(errorBody(code, message, rest), ERROR_STATUS[code], all);
}

/** The response for an already built error body. */
export function responseOf(body: ErrorBody, headers: HeadersInit = {}): Response {
  const all = new Headers(headers);
  if (body.retryAfterSeconds !== undefined) {
    all.set("retry-after", String(Math.max(0, Math.ceil(body.retryAfterSeconds))));
  }
  return jsonResponse(body, ERROR_STATUS[body.code], all);
}

/** Thrown inside request handling to answer with a protocol error. */
export class HttpError extends Error {
  constructor(
    readonly body: ErrorBody,
    readonly headers: HeadersInit = {},
  ) {
    super(body.error);
  }

  toResponse(): Response {
    return responseOf(this.body, this.headers);
  }
}

export function invalidRequest(message: string, issues: Issue[]): HttpError {
  return new HttpError(errorBody("invalid_request", message, { issues }));
}
