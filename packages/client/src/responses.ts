import {
  ERROR_STATUS,
  type ErrorBody,
  type ErrorCode,
  type ExecResult,
  errorBodySchema,
  type Issue,
  referenceErrorBodySchema,
  utf8ByteLength,
} from "@remote-task/protocol";
import { parseJson, withSandbox } from "./body.js";
import {
  AuthenticationError,
  BridgeError,
  CapacityError,
  ConnectionError,
  InvalidRequestError,
  ProtocolError,
  type RemoteTaskError,
} from "./errors.js";
import { parseRetryAfter, Retryable } from "./retry.js";
import type { TaskResult } from "./types.js";

/** Values that must never appear in an error message (the token, `env` values). */
export class Secrets {
  readonly #values: string[];
  constructor(values: ReadonlyArray<string | undefined>) {
    // Very short values would blank out ordinary words; they cannot identify a secret anyway.
    this.#values = values
      .filter((v): v is string => typeof v === "string" && v.length >= 3)
      .sort((a, b) => b.length - a.length);
  }

  /** `text` with every secret replaced and its length capped, for text the bridge chose. */
  redact(text: string, maxLength = 500): string {
    let out = text;
    for (const value of this.#values) out = out.split(value).join("[redacted]");
    return out.length > maxLength ? `${out.slice(0, maxLength)}…` : out;
  }
}

/** The paths of a failed schema validation, and a short summary of them for messages. */
/** The part of a zod error the client reads (kept structural so zod stays the protocol's). */
export interface SchemaError {
  issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }>;
}

export function schemaFailure(error: SchemaError): {
  paths: Array<Array<string | number>>;
  summary: string;
} {
  const paths = error.issues.map((issue) =>
    issue.path.map((part) => (typeof part === "symbol" ? String(part) : part)),
  );
  const summary = error.issues
    .slice(0, 5)
    .map((issue) => `${issue.path.join(".") || "(root)"}: ${issue.message}`)
    .join("; ");
  return { paths, summary };
}

/** A `ProtocolError` for a 2xx body that does not match `what`'s schema. */
export function protocolMismatch(
  what: string,
  status: number,
  error: SchemaError,
  sandboxId: string | undefined,
): ProtocolError {
  const { paths, summary } = schemaFailure(error);
  return new ProtocolError(
    `The bridge answered ${what} that does not match the protocol (${summary}). Check that the URL points at a remote-task bridge and that bridge and client versions are compatible.`,
    withSandbox({ status, paths }, sandboxId),
  );
}

/** A `ProtocolError` for a body that is not JSON at all (an HTML error page, a cut-off body). */
export function notJson(
  status: number,
  contentType: string | undefined,
  sandboxId: string | undefined,
): ProtocolError {
  return new ProtocolError(
    `The bridge answered HTTP ${status} with a body that is not protocol JSON (content-type ${contentType ?? "none"}). A proxy or a different service may be answering; check the URL.`,
    withSandbox({ status }, sandboxId),
  );
}

function reason(body: ErrorBody | undefined, secrets: Secrets): string {
  return body ? `: ${secrets.redact(body.error)}` : "";
}

function issueList(issues: readonly Issue[], secrets: Secrets): string {
  if (issues.length === 0) return "";
  const shown = issues
    .slice(0, 5)
    .map((issue) => `${issue.path.join(".") || "(root)"}: ${secrets.redact(issue.message, 200)}`);
  return ` (${shown.join("; ")})`;
}

interface ErrorContext {
  status: number;
  contentType: string | undefined;
  retryAfterHeader: string | undefined;
  sandboxId: string | undefined;
  secrets: Secrets;
}

/**
 * The error for a bridge's error body (from an HTTP error answer or an SSE `error` event).
 * `body` is undefined when the bridge sent only `{error}` (the reference shape).
 */
export function errorFromBody(
  status: number,
  body: ErrorBody | undefined,
  context: Omit<ErrorContext, "status" | "contentType">,
): RemoteTaskError {
  const { secrets, sandboxId } = context;
  const code: ErrorCode | undefined = body?.code;
  const base = withSandbox(code === undefined ? { status } : { status, code }, sandboxId);
  const label = code === undefined ? `HTTP ${status}` : `HTTP ${status} ${code}`;
  const headerMs = parseRetryAfter(context.retryAfterHeader);
  const bodyMs = body?.retryAfterSeconds === undefined ? undefined : body.retryAfterSeconds * 1000;
  const retryAfterMs = headerMs ?? bodyMs;

  if (status === 429 || code === "capacity_exceeded") {
    const retryAfterSeconds = retryAfterMs === undefined ? undefined : retryAfterMs / 1000;
    return new CapacityError(
      `The bridge has no capacity right now (${label})${reason(body, secrets)}. Try again later${retryAfterSeconds === undefined ? "" : ` (the bridge suggests after ${retryAfterSeconds}s)`}, or lower the concurrency.`,
      { ...base, retryAfterSeconds },
    );
  }
  if (status === 401 || status === 403) {
    return new AuthenticationError(
      `The bridge refused the token (${label})${reason(body, secrets)}. Check that the client's token (CLOUDFLARE_SANDBOX_TOKEN) matches the bridge's.`,
      base,
    );
  }
  if (status >= 400 && status < 500) {
    const issues = (body?.issues ?? []).map((issue) => ({
      path: issue.path,
      message: secrets.redact(issue.message, 200),
    }));
    return new InvalidRequestError(
      `The bridge refused the request (${label})${reason(body, secrets)}${issueList(issues, secrets)}. Fix the request; sending it again unchanged will fail the same way.`,
      { ...base, issues },
    );
  }
  if (code === "not_configured") {
    return new BridgeError(
      `The bridge has no token configured, so it refuses to run commands (${label}). Whoever deploys the bridge must set its token (or explicitly allow unauthenticated use) and give the same token to this client.`,
      base,
    );
  }
  return new BridgeError(
    `The bridge failed (${label})${reason(body, secrets)}. The command may or may not have run; it was not retried.`,
    base,
  );
}

/** Parses an error answer's bytes as a protocol (or reference) error body. */
export function errorFromResponse(
  bytes: Uint8Array,
  context: ErrorContext,
): RemoteTaskError | Retryable {
  const parsed = parseJson(bytes);
  let body: ErrorBody | undefined;
  let recognised = false;
  if (parsed.ok) {
    const full = errorBodySchema.safeParse(parsed.value);
    if (full.success) {
      body = full.data;
      recognised = true;
    } else {
      const reference = referenceErrorBodySchema.safeParse(parsed.value);
      if (reference.success) {
        // The reference bridge sends `{error}` only; its status carries the meaning.
        body = { error: reference.data.error, code: codeForStatus(context.status) };
        recognised = true;
      }
    }
  }
  if (!recognised && context.status !== 429) {
    if (context.status >= 300 && context.status < 400) {
      return new ProtocolError(
        `The bridge answered with a redirect (HTTP ${context.status}); the client does not follow redirects. Configure the final bridge URL.`,
        withSandbox({ status: context.status }, context.sandboxId),
      );
    }
    return notJson(context.status, context.contentType, context.sandboxId);
  }
  const error = errorFromBody(context.status, body, context);
  // Only an HTTP answer refusing for capacity proves the command never started; a stream's
  // `error` event (handled by the caller) comes after the bridge accepted the call.
  const refusedForCapacity =
    context.status === 429 || (context.status === 503 && body?.code === "capacity_exceeded");
  if (!refusedForCapacity) return error;
  const retryAfter = (error as CapacityError).retryAfterSeconds;
  return new Retryable(error, retryAfter === undefined ? undefined : retryAfter * 1000);
}

/** The protocol code a reference `{error}` answer stands for, by its HTTP status. */
function codeForStatus(status: number): ErrorCode {
  if (status === 401) return "unauthorized";
  if (status === 404) return "not_found";
  if (status === 405) return "method_not_allowed";
  if (status === 409) return "conflict";
  if (status === 413) return "payload_too_large";
  if (status === 502) return "sandbox_error";
  if (status >= 400 && status < 500) return "invalid_request";
  return "internal";
}

/** The HTTP status an SSE `error` event's code stands for. */
export function statusForCode(code: ErrorCode): number {
  return ERROR_STATUS[code];
}

const NOT_SENT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN"]);

/** Every `code` on an error, its causes and aggregated errors (fetch wraps them, undici may not). */
export function errorCodes(error: unknown, depth = 0): string[] {
  if (typeof error !== "object" || error === null || depth > 5) return [];
  const codes: string[] = [];
  const code = (error as { code?: unknown }).code;
  if (typeof code === "string") codes.push(code);
  codes.push(...errorCodes((error as { cause?: unknown }).cause, depth + 1));
  const nested = (error as { errors?: unknown }).errors;
  if (Array.isArray(nested)) for (const e of nested) codes.push(...errorCodes(e, depth + 1));
  return codes;
}

/** True when undici could not parse the answer as HTTP (something else listens at the URL). */
function isHttpParseFailure(error: unknown, depth = 0): boolean {
  if (typeof error !== "object" || error === null || depth > 5) return false;
  if ((error as { name?: unknown }).name === "HTTPParserError") return true;
  return isHttpParseFailure((error as { cause?: unknown }).cause, depth + 1);
}

/**
 * A transport failure as a `ConnectionError`; `Retryable` only when the request provably never
 * left (connection refused, DNS failure) and no response had started; a `ProtocolError` when
 * the answer was not HTTP at all.
 */
export function connectionFailure(
  error: unknown,
  beforeResponse: boolean,
  sandboxId: string | undefined,
): ConnectionError | ProtocolError | Retryable {
  const codes = errorCodes(error);
  const notSent = codes.find((code) => NOT_SENT_CODES.has(code));
  const options = withSandbox({ cause: error }, sandboxId);
  if (beforeResponse && notSent !== undefined) {
    return new Retryable(
      new ConnectionError(
        `Could not reach the bridge (${notSent}); nothing was sent. Check the bridge URL and that the bridge is running.`,
        options,
      ),
      undefined,
    );
  }
  if (isHttpParseFailure(error)) {
    return new ProtocolError(
      "The bridge answered with something that is not HTTP. Check that the URL points at a remote-task bridge; the command may have started, so it was not re-sent.",
      options,
    );
  }
  const detail = codes[0] ?? (error instanceof Error ? error.name : "unknown error");
  return new ConnectionError(
    beforeResponse
      ? `The connection to the bridge failed before an answer arrived (${detail}). The command may have started, so it was not re-sent.`
      : `The connection to the bridge broke while reading its answer (${detail}). The command may have run; it was not re-sent.`,
    options,
  );
}

/** A `TaskResult` from a protocol (or reference) exec result; missing extensions get defaults. */
export function toTaskResult(
  result: ExecResult,
  sandboxId: string,
  measuredDurationMs: number,
): TaskResult {
  return {
    sandboxId,
    stdout: result.stdout,
    stderr: result.stderr,
    exitCode: result.code,
    outcome: result.outcome ?? "exited",
    durationMs: result.durationMs ?? measuredDurationMs,
    stdoutBytes: result.stdoutBytes ?? utf8ByteLength(result.stdout),
    stderrBytes: result.stderrBytes ?? utf8ByteLength(result.stderr),
    stdoutTruncated: result.stdoutTruncated ?? false,
    stderrTruncated: result.stderrTruncated ?? false,
  };
}
