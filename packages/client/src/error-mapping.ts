/**
 * Turning what went wrong into the client's typed error: a bridge's error answer (HTTP error or
 * SSE `error` event) through one table, status or code to error class, with one message builder
 * per class; a body that is not the protocol; a transport failure. Each error says whether the
 * request may be sent again (`retryable`) and whether the command may have run (`mayHaveRun`).
 */
import {
  DID_NOT_RUN,
  issuesOf,
  type SchemaIssue,
  shorten,
  summarizeIssues,
  undeclaredSecrets,
  unreadableSecret,
} from "@remote-task/internal";
import {
  ERROR_STATUS,
  type ErrorBody,
  type ErrorCode,
  errorBodySchema,
  formatSize,
  type Issue,
  referenceErrorBodySchema,
} from "@remote-task/protocol";
import {
  AuthenticationError,
  BridgeError,
  type CallFacts,
  CapacityError,
  ConnectionError,
  ForbiddenError,
  InvalidRequestError,
  ProtocolError,
  type RemoteTaskError,
} from "./errors.js";
import { type ParsedJson, parseJson } from "./json.js";
import { parseRetryAfter } from "./retry.js";
import type { Secrets } from "./secrets.js";

/** The part of a zod error the client reads (kept structural so zod stays the protocol's). */
export interface SchemaError {
  issues: ReadonlyArray<SchemaIssue>;
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

/** Where the client's token came from, for an authentication error's message. */
interface TokenFacts {
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

/** One bridge failure, as every message builder sees it. */
interface Failure {
  status: number;
  code: ErrorCode | undefined;
  body: ErrorBody | undefined;
  context: ErrorContext;
  /** `HTTP 429 capacity_exceeded`, or `HTTP 500` without a code. */
  label: string;
  /** `: <the bridge's words>`, shortened, or nothing. */
  reason: string;
  /** What every error of the failure carries. */
  base: {
    status: number;
    code: ErrorCode | undefined;
    sandboxId: string | undefined;
    mayHaveRun: boolean;
    bridgeMessage: string | undefined;
  };
}

type Build = (failure: Failure) => RemoteTaskError;

/** `: <the bridge's words>`, shortened, without their final full stop (the caller adds one). */
function reasonOf(bridgeMessage: string | undefined): string {
  return bridgeMessage ? `: ${shorten(bridgeMessage, 500).replace(/\.\s*$/, "")}` : "";
}

/**
 * ` (a.b: message; ...)` for issues already redacted, or nothing; an issue whose message the
 * bridge's own words already say is left out, so a message never repeats itself.
 */
function issueList(issues: Issue[], bridgeMessage: string | undefined): string {
  const news = issues.filter(
    (issue) => !bridgeMessage?.includes(issue.message.replace(/\.\s*$/, "")),
  );
  return news.length === 0 ? "" : ` (${summarizeIssues(news)})`;
}

/** The wait the bridge asked for: its `Retry-After` header, else its body's `retryAfterSeconds`. */
function retryAfterSecondsOf({ body, context }: Failure): number | undefined {
  const headerMs = parseRetryAfter(context.retryAfterHeader);
  if (headerMs !== undefined) return headerMs / 1000;
  return body?.retryAfterSeconds;
}

const capacity: Build = (failure) => {
  const retryAfterSeconds = retryAfterSecondsOf(failure);
  const { accepted } = failure.context;
  // Only an HTTP answer refusing for capacity proves the command never started.
  return new CapacityError(
    `The bridge has no capacity right now (${failure.label})${failure.reason}. Try again later${retryAfterSeconds === undefined ? "" : ` (the bridge suggests after ${retryAfterSeconds}s)`}, or lower the concurrency.`,
    { ...failure.base, retryAfterSeconds, retryable: !accepted },
  );
};

const forbidden: Build = ({ label, reason, base }) =>
  // The bridge decides this before it runs anything, also when it reports it in a stream.
  new ForbiddenError(
    undeclaredSecrets(base.bridgeMessage) !== undefined
      ? `The bridge refused the call's secrets (${label})${reason}. Ask only for secrets the bridge declares (its /health lists them under \`secrets\`), or have the deployer declare them; sending it again unchanged will fail the same way.`
      : `The bridge refused the call as more than its deployer allows (${label})${reason}. Ask for less (the most a call may have is \`network.ceiling\` in the bridge's /health), or have the deployer allow it; sending it again unchanged will fail the same way.`,
    { ...base, mayHaveRun: false },
  );

const authentication: Build = ({ label, reason, base, context: { token } }) =>
  new AuthenticationError(
    token.sent
      ? `The bridge refused the token given by ${token.source} (${label})${reason}. Check that it is the bridge's token.`
      : `The bridge requires a token and this client sent none (${label})${reason}. Give the client the bridge's token with ${token.source}.`,
    base,
  );

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

/** A 400 from a protocol 1 bridge that refused protocol 2 fields as unknown. */
function tooOldBridge({ label, base }: Failure, issues: Issue[], unsupported: string[]) {
  const names = unsupported.map((field) => `\`${field}\``).join(" and ");
  const one = unsupported.length === 1;
  return new InvalidRequestError(
    `The bridge is too old for ${names} (${label}): it speaks protocol 1 and refused ${one ? "it as an unknown field" : "them as unknown fields"}. Update the bridge to protocol 2, or leave ${one ? "that option" : "those options"} out.`,
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

const invalidRequest: Build = (failure) => {
  const { status, label, reason, base, context } = failure;
  const { bridgeMessage } = base;
  const issues = (failure.body?.issues ?? []).map((issue) => ({
    path: issue.path,
    message: context.secrets.redact(issue.message, 200),
  }));
  const unsupported = status === 400 ? unknownNewFields(issues) : [];
  if (unsupported.length > 0) return tooOldBridge(failure, issues, unsupported);
  const stdinBytes = context.stdinBytes ?? 0;
  const stdinTooLarge =
    status === 413 &&
    stdinBytes > 0 &&
    issues.every((issue) => issue.path.length === 0 || issue.path[0] === "stdin");
  return new InvalidRequestError(
    stdinTooLarge
      ? `The bridge refused the request as too large (${label})${reason}${issueList(issues, bridgeMessage)}. Its stdin (${stdinBytes} bytes, ${formatSize(stdinBytes)}) is too large for this bridge: send less (the bridge's /health reports its limit as \`limits.maxStdinBytes\`).`
      : `The bridge refused the request (${label})${reason}${issueList(issues, bridgeMessage)}. Fix the request; sending it again unchanged will fail the same way.`,
    { ...base, issues },
  );
};

const notConfigured: Build = ({ label, reason, base }) =>
  unreadableSecret(base.bridgeMessage) !== undefined
    ? new BridgeError(
        `The bridge cannot use a secret this call asks for (${label})${reason}. Whoever deploys the bridge must provide its value (the variable or file its declaration names).`,
        { ...base, mayHaveRun: false },
      )
    : new BridgeError(
        `The bridge has no token configured, so it refuses to run commands (${label}). Whoever deploys the bridge must set its token (or explicitly allow unauthenticated use) and give the same token to this client.`,
        base,
      );

/** A server failure; one whose text says the command did not run is believed (the bridge knows). */
const bridgeFailure: Build = ({ label, reason, base }) =>
  base.bridgeMessage?.includes(DID_NOT_RUN)
    ? new BridgeError(`The bridge failed (${label})${reason}. It was not retried.`, {
        ...base,
        mayHaveRun: false,
      })
    : new BridgeError(
        `The bridge failed (${label})${reason}. The command may or may not have run; it was not retried.`,
        { ...base, mayHaveRun: true },
      );

/**
 * Which error a failure is, by the bridge's code first, then its status, then the status class
 * (as openai-node's `APIError.generate`). A refusal for capacity is 429 or `capacity_exceeded`
 * (the Worker's 503); `forbidden` is a 403 that is not about the token.
 */
const BY_CODE: Partial<Record<ErrorCode, Build>> = {
  capacity_exceeded: capacity,
  forbidden,
};
const BY_STATUS: Readonly<Record<number, Build>> = {
  401: authentication,
  403: authentication,
  429: capacity,
};
/** Codes whose own builder applies only when the status is not a 4xx one. */
const BY_SERVER_CODE: Partial<Record<ErrorCode, Build>> = { not_configured: notConfigured };

function builderFor(status: number, code: ErrorCode | undefined): Build {
  const byCode = code === undefined ? undefined : BY_CODE[code];
  if (byCode !== undefined) return byCode;
  const byStatus = BY_STATUS[status];
  if (byStatus !== undefined) return byStatus;
  if (status >= 400 && status < 500) return invalidRequest;
  return (code === undefined ? undefined : BY_SERVER_CODE[code]) ?? bridgeFailure;
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
  const code = body?.code;
  const bridgeMessage = words ? context.secrets.redact(words, Number.POSITIVE_INFINITY) : undefined;
  return builderFor(
    status,
    code,
  )({
    status,
    code,
    body,
    context,
    label: code === undefined ? `HTTP ${status}` : `HTTP ${status} ${code}`,
    reason: reasonOf(bridgeMessage),
    base: {
      status,
      code,
      sandboxId: context.sandboxId,
      mayHaveRun: context.accepted,
      bridgeMessage,
    },
  });
}

/**
 * An HTTP error answer's bytes as a protocol (or reference) error body: `body` is undefined for
 * an empty body or JSON of another shape, `parsed` the JSON (or not) it was read from. `bytes` is
 * undefined for a body too large to read.
 */
function parseErrorAnswer(
  bytes: Uint8Array | undefined,
  status: number,
): { parsed: ParsedJson; body: ErrorBody | undefined } {
  const parsed: ParsedJson =
    bytes === undefined
      ? { ok: false }
      : isBlank(bytes)
        ? { ok: true, value: {} }
        : parseJson(bytes);
  if (!parsed.ok) return { parsed, body: undefined };
  const full = errorBodySchema.safeParse(parsed.value);
  if (full.success) return { parsed, body: full.data };
  const reference = referenceErrorBodySchema.safeParse(parsed.value);
  // The reference bridge sends `{error}` only; its status carries the meaning.
  if (reference.success) {
    return { parsed, body: { error: reference.data.error, code: codeForStatus(status) } };
  }
  return { parsed, body: undefined };
}

/**
 * The error of an HTTP error answer (see `parseErrorAnswer`). An empty body, or JSON of another
 * shape, leaves the status to say what failed; a body that is not JSON at all (an HTML page) is a
 * `ProtocolError`, as something else may be answering.
 */
export function errorFromResponse(
  bytes: Uint8Array | undefined,
  answer: { status: number; contentType: string | undefined },
  context: Omit<ErrorContext, "accepted">,
): RemoteTaskError {
  const { status } = answer;
  const { parsed, body } = parseErrorAnswer(bytes, status);
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
const REFERENCE_CODES: Readonly<Record<number, ErrorCode>> = {
  401: "unauthorized",
  404: "not_found",
  405: "method_not_allowed",
  409: "conflict",
  413: "payload_too_large",
  502: "sandbox_error",
};

function codeForStatus(status: number): ErrorCode {
  return (
    REFERENCE_CODES[status] ?? (status >= 400 && status < 500 ? "invalid_request" : "internal")
  );
}

/** The HTTP status an SSE `error` event's code stands for. */
export function statusForCode(code: ErrorCode): number {
  return ERROR_STATUS[code];
}

const NOT_SENT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN"]);

/** Every `code` on an error, its causes and aggregated errors (fetch wraps them, undici may not). */
function errorCodes(error: unknown, depth = 0): string[] {
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
