import {
  issuesOf,
  OWN_TEXTS,
  redact,
  type SchemaIssue,
  shorten,
  summarizeIssues,
  TailBuffer,
} from "@remote-task/internal";
import {
  ERROR_STATUS,
  type ErrorBody,
  type ErrorCode,
  type ExecResult,
  errorBodySchema,
  formatSize,
  type Issue,
  referenceErrorBodySchema,
  utf8ByteLength,
} from "@remote-task/protocol";
import { type ParsedJson, parseJson } from "./body.js";
import {
  AuthenticationError,
  BridgeError,
  CapacityError,
  ConnectionError,
  ForbiddenError,
  InvalidRequestError,
  ProtocolError,
  type RemoteTaskError,
} from "./errors.js";
import { parseRetryAfter } from "./retry.js";
import type { TaskResult } from "./types.js";

/**
 * Values that must never appear in an error message (the token, `env` values). The bridge's text
 * is redacted before it is put into a message, by the project's one rule (see the internal
 * package's redact.ts): this project's own fixed texts that come back in it are kept as written.
 */
export class Secrets {
  readonly #values: ReadonlyArray<string | undefined>;
  constructor(values: ReadonlyArray<string | undefined>) {
    this.#values = values;
  }

  /** `text` from the bridge with every secret replaced and its length capped. */
  redact(text: string, maxLength = 500): string {
    return shorten(redact(text, this.#values, OWN_TEXTS), maxLength);
  }
}

/** The part of a zod error the client reads (kept structural so zod stays the protocol's). */
export interface SchemaError {
  issues: ReadonlyArray<SchemaIssue>;
}

/** What an error needs to know about the call it ends. */
export interface CallFacts {
  sandboxId: string | undefined;
  /** Whether the command may have started (see `RemoteTaskError.mayHaveRun`). */
  mayHaveRun: boolean;
}

/** A `ProtocolError` for a 2xx body that does not match `what`'s schema. */
export function protocolMismatch(
  what: string,
  status: number,
  error: SchemaError,
  { sandboxId, mayHaveRun }: CallFacts,
): ProtocolError {
  const issues = issuesOf(error);
  return new ProtocolError(
    `The bridge answered ${what} that does not match the protocol (${summarizeIssues(issues)}). Check that the URL points at a remote-task bridge and that bridge and client versions are compatible.`,
    { status, paths: issues.map((issue) => issue.path), sandboxId, mayHaveRun },
  );
}

/** A `ProtocolError` for a body that is not JSON at all (an HTML error page, a cut-off body). */
export function notJson(
  status: number,
  contentType: string | undefined,
  { sandboxId, mayHaveRun }: CallFacts,
): ProtocolError {
  return new ProtocolError(
    `The bridge answered HTTP ${status} with a body that is not protocol JSON (content-type ${contentType ?? "none"}). A proxy or a different service may be answering; check the URL.`,
    { status, sandboxId, mayHaveRun },
  );
}

/** `: <the bridge's words>`, shortened, without their final full stop (the caller adds one). */
function reason(bridgeMessage: string | undefined): string {
  return bridgeMessage ? `: ${shorten(bridgeMessage, 500).replace(/\.\s*$/, "")}` : "";
}

/** ` (a.b: message; ...)` for issues already redacted, or nothing. */
function issueList(issues: Issue[]): string {
  return issues.length === 0 ? "" : ` (${summarizeIssues(issues)})`;
}

/** Where the client's token came from, for an authentication error's message. */
export interface TokenFacts {
  /** Whether a token was sent at all. */
  sent: boolean;
  /** Where it came from, or where to set one: `--token`, the `token` option, a variable. */
  source: string;
}

/** What turning a bridge's error body into an error needs to know. */
export interface ErrorContext {
  sandboxId: string | undefined;
  secrets: Secrets;
  token: TokenFacts;
  retryAfterHeader: string | undefined;
  /**
   * True for an SSE `error` event: the bridge had accepted the call, so the command may have
   * run. False for an HTTP error answer, which refuses the call before or instead of running it.
   */
  accepted: boolean;
  /** Bytes of standard input the request carried (0 or undefined: none), to explain a 413. */
  stdinBytes?: number | undefined;
}

/** Request fields that protocol 2 added: a protocol 1 bridge refuses them as unknown. */
const PROTOCOL_2_FIELDS = ["network", "stdin"] as const;

/**
 * The protocol 2 fields a bridge refused as unknown keys (zod words it `Unrecognized key:
 * "network"`, on the object that holds the key): the bridge speaks protocol 1.
 */
function unknownNewFields(issues: readonly Issue[]): string[] {
  return PROTOCOL_2_FIELDS.filter((field) =>
    issues.some(
      (issue) =>
        issue.path.length <= 1 &&
        (issue.path.length === 0 || issue.path[0] === field) &&
        /unrecognized key/i.test(issue.message) &&
        issue.message.includes(`"${field}"`),
    ),
  );
}

/**
 * The error for a bridge's error body (from an HTTP error answer or an SSE `error` event).
 * `body` is undefined when the answer was not an error body (empty, or JSON of another shape):
 * the status alone then says what failed. `words` are the bridge's own text for the failure
 * (`body.error` by default), kept redacted on the error as `bridgeMessage`.
 */
export function errorFromBody(
  status: number,
  body: ErrorBody | undefined,
  context: ErrorContext,
  words: string | undefined = body?.error,
): RemoteTaskError {
  const { secrets, sandboxId, accepted } = context;
  const code: ErrorCode | undefined = body?.code;
  const bridgeMessage = words ? secrets.redact(words, Number.POSITIVE_INFINITY) : undefined;
  const base = { status, code, sandboxId, mayHaveRun: accepted, bridgeMessage };
  const label = code === undefined ? `HTTP ${status}` : `HTTP ${status} ${code}`;
  const headerMs = parseRetryAfter(context.retryAfterHeader);
  const bodyMs = body?.retryAfterSeconds === undefined ? undefined : body.retryAfterSeconds * 1000;
  const retryAfterMs = headerMs ?? bodyMs;

  if (status === 429 || code === "capacity_exceeded") {
    const retryAfterSeconds = retryAfterMs === undefined ? undefined : retryAfterMs / 1000;
    // Only an HTTP answer refusing for capacity proves the command never started.
    return new CapacityError(
      `The bridge has no capacity right now (${label})${reason(bridgeMessage)}. Try again later${retryAfterSeconds === undefined ? "" : ` (the bridge suggests after ${retryAfterSeconds}s)`}, or lower the concurrency.`,
      { ...base, retryAfterSeconds, retryable: !accepted },
    );
  }
  if (code === "forbidden") {
    // The bridge decides this before it runs anything, also when it reports it in a stream.
    return new ForbiddenError(
      `The bridge refused the call as more than its deployer allows (${label})${reason(bridgeMessage)}. Ask for less (the most a call may have is \`network.ceiling\` in the bridge's /health), or have the deployer allow it; sending it again unchanged will fail the same way.`,
      { ...base, mayHaveRun: false },
    );
  }
  if (status === 401 || status === 403) {
    const { token } = context;
    return new AuthenticationError(
      token.sent
        ? `The bridge refused the token given by ${token.source} (${label})${reason(bridgeMessage)}. Check that it is the bridge's token.`
        : `The bridge requires a token and this client sent none (${label})${reason(bridgeMessage)}. Give the client the bridge's token with ${token.source}.`,
      base,
    );
  }
  if (status >= 400 && status < 500) {
    const issues = (body?.issues ?? []).map((issue) => ({
      path: issue.path,
      message: secrets.redact(issue.message, 200),
    }));
    const unsupported = status === 400 ? unknownNewFields(issues) : [];
    if (unsupported.length > 0) {
      const names = unsupported.map((field) => `\`${field}\``).join(" and ");
      return new InvalidRequestError(
        `The bridge is too old for ${names} (${label}): it speaks protocol 1 and refused ${unsupported.length === 1 ? "it as an unknown field" : "them as unknown fields"}. Update the bridge to protocol 2, or leave ${unsupported.length === 1 ? "that option" : "those options"} out.`,
        {
          ...base,
          issues: [
            ...unsupported.map((field) => ({
              path: [field],
              message: "not supported by this bridge (protocol 1)",
            })),
            ...issues.filter((issue) => unknownNewFields([issue]).length === 0),
          ],
        },
      );
    }
    const stdinBytes = context.stdinBytes ?? 0;
    const stdinTooLarge =
      status === 413 &&
      stdinBytes > 0 &&
      issues.every((issue) => issue.path.length === 0 || issue.path[0] === "stdin");
    return new InvalidRequestError(
      stdinTooLarge
        ? `The bridge refused the request as too large (${label})${reason(bridgeMessage)}${issueList(issues)}. Its stdin (${formatSize(stdinBytes)}) is too large for this bridge: send less (the bridge's /health reports its limit as \`limits.maxStdinBytes\`).`
        : `The bridge refused the request (${label})${reason(bridgeMessage)}${issueList(issues)}. Fix the request; sending it again unchanged will fail the same way.`,
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
    `The bridge failed (${label})${reason(bridgeMessage)}. The command may or may not have run; it was not retried.`,
    { ...base, mayHaveRun: true },
  );
}

/**
 * Parses an HTTP error answer's bytes as a protocol (or reference) error body. An empty body, or
 * JSON of another shape, leaves the status to say what failed; a body that is not JSON at all (an
 * HTML page) is a `ProtocolError`, as something else may be answering. `bytes` is undefined for a
 * body too large to read.
 */
export function errorFromResponse(
  bytes: Uint8Array | undefined,
  answer: { status: number; contentType: string | undefined },
  context: Omit<ErrorContext, "accepted">,
): RemoteTaskError {
  const { status } = answer;
  const parsed: ParsedJson =
    bytes === undefined
      ? { ok: false }
      : isBlank(bytes)
        ? { ok: true, value: {} }
        : parseJson(bytes);
  let body: ErrorBody | undefined;
  if (parsed.ok) {
    const full = errorBodySchema.safeParse(parsed.value);
    if (full.success) body = full.data;
    else {
      const reference = referenceErrorBodySchema.safeParse(parsed.value);
      // The reference bridge sends `{error}` only; its status carries the meaning.
      if (reference.success) body = { error: reference.data.error, code: codeForStatus(status) };
    }
  }
  if (body === undefined && status >= 300 && status < 400) {
    return new ProtocolError(
      `The bridge answered with a redirect (HTTP ${status}); the client does not follow redirects. Configure the final bridge URL.`,
      { status, sandboxId: context.sandboxId },
    );
  }
  if (!parsed.ok && status !== 429) {
    return notJson(status, answer.contentType, { sandboxId: context.sandboxId, mayHaveRun: false });
  }
  return errorFromBody(status, body, { ...context, accepted: false }, wordsOf(parsed));
}

/**
 * The bridge's own text in an error answer: its `error`, or for a bridge that answers a failure
 * in the result shape, its `stderr` (the first that is a non-empty string).
 */
function wordsOf(parsed: ParsedJson): string | undefined {
  if (!parsed.ok || typeof parsed.value !== "object" || parsed.value === null) return undefined;
  const { error, stderr } = parsed.value as { error?: unknown; stderr?: unknown };
  if (typeof error === "string" && error !== "") return error;
  if (typeof stderr === "string" && stderr !== "") return stderr;
  return undefined;
}

/** True for a body of nothing but white space. */
function isBlank(bytes: Uint8Array): boolean {
  for (const b of bytes) if (b !== 0x20 && b !== 0x09 && b !== 0x0a && b !== 0x0d) return false;
  return true;
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
 * A transport failure as a `ConnectionError`, retryable only when the request provably never
 * left (connection refused, DNS failure) and no response had started; a `ProtocolError` when
 * the answer was not HTTP at all.
 */
export function connectionFailure(
  error: unknown,
  beforeResponse: boolean,
  { sandboxId, mayHaveRun }: CallFacts,
): ConnectionError | ProtocolError {
  const codes = errorCodes(error);
  const notSent = codes.find((code) => NOT_SENT_CODES.has(code));
  const options = { cause: error, sandboxId, mayHaveRun };
  if (beforeResponse && notSent !== undefined) {
    return new ConnectionError(
      `Could not reach the bridge (${notSent}); nothing was sent. Check the bridge URL and that the bridge is running.`,
      { ...options, retryable: true, mayHaveRun: false },
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

/**
 * A `TaskResult` from a protocol (or reference) exec result; missing extensions get defaults.
 * Each output keeps at most its last `keptBytes` (a bridge that caps nothing may send more).
 */
export function toTaskResult(
  result: ExecResult,
  sandboxId: string,
  measuredDurationMs: number,
  keptBytes: number,
): TaskResult {
  const stdout = keepEnd(result.stdout, keptBytes);
  const stderr = keepEnd(result.stderr, keptBytes);
  return {
    sandboxId,
    stdout: stdout.text,
    stderr: stderr.text,
    exitCode: result.code,
    outcome: result.outcome ?? "exited",
    durationMs: result.durationMs ?? measuredDurationMs,
    stdoutBytes: result.stdoutBytes ?? stdout.bytes ?? utf8ByteLength(result.stdout),
    stderrBytes: result.stderrBytes ?? stderr.bytes ?? utf8ByteLength(result.stderr),
    stdoutTruncated: stdout.cut || (result.stdoutTruncated ?? false),
    stderrTruncated: stderr.cut || (result.stderrTruncated ?? false),
  };
}

const encoder = new TextEncoder();

/**
 * `text`, or its last `maxBytes` UTF-8 bytes (no character cut) when it has more; `bytes` is its
 * whole size when it had to be counted.
 */
function keepEnd(text: string, maxBytes: number): { text: string; cut: boolean; bytes?: number } {
  // A UTF-16 unit is at most 3 UTF-8 bytes: a short text needs no counting.
  if (text.length * 3 <= maxBytes) return { text, cut: false };
  const bytes = encoder.encode(text);
  if (bytes.byteLength <= maxBytes) return { text, cut: false, bytes: bytes.byteLength };
  const tail = new TailBuffer(maxBytes);
  tail.push(bytes);
  return { text: tail.text(), cut: true, bytes: bytes.byteLength };
}
