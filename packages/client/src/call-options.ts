/**
 * A call's options, checked and turned into the exec request before anything is sent: unknown
 * options, a bad `stdin` or any field the protocol refuses is an `InvalidRequestError` here.
 */
import { issuesOf, summarizeIssues } from "@remote-task/internal";
import {
  type ExecRequest,
  execRequestSchema,
  type Issue,
  newSandboxId,
} from "@remote-task/protocol";
import {
  assertKnownKeys,
  DEFAULT_KEPT_OUTPUT_BYTES,
  graceSecondsFor,
  type ResolvedConfig,
} from "./config.js";
import { InvalidRequestError } from "./errors.js";
import { Secrets } from "./secrets.js";
import { stdinField } from "./stdin.js";
import type { RunOptions } from "./types.js";

/** An exec call ready to send. */
export interface PreparedCall {
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
  "secrets",
] satisfies ReadonlyArray<keyof RunOptions>);

/** The protocol's own rule for a command. */
const commandSchema = execRequestSchema.shape.command;

/**
 * A call that sets nothing the request carries but its command: its request is the client's
 * `cwd` and `timeoutSeconds`, a generated id and the command.
 */
function onlyCommand(options: RunOptions): boolean {
  return (
    options.sandboxId === undefined &&
    options.timeoutSeconds === undefined &&
    options.cwd === undefined &&
    options.env === undefined &&
    options.maxOutputBytes === undefined &&
    options.network === undefined &&
    options.secrets === undefined &&
    options.stdin === undefined
  );
}

/** Whether each client's own request fields pass the protocol's schema, checked once per client. */
const defaultsChecked = new WeakMap<ResolvedConfig, boolean>();

/**
 * Whether the request fields a call without options takes from the client (its `cwd`, its
 * `timeoutSeconds`, an id with its prefix) pass the schema: then such a call needs only its
 * command checked, with the schema's own rule for it, instead of the whole request every time.
 */
function defaultsValid(config: ResolvedConfig): boolean {
  let valid = defaultsChecked.get(config);
  if (valid === undefined) {
    valid = execRequestSchema.safeParse({
      sandboxId: newSandboxId(config.idPrefix),
      command: "true",
      timeoutSeconds: config.timeoutSeconds,
      cwd: config.cwd,
    }).success;
    defaultsChecked.set(config, valid);
  }
  return valid;
}

/** Whether every option `options` names is one calls have. */
function knownKeys(options: object): boolean {
  for (const key of Object.keys(options)) if (!RUN_OPTIONS.has(key)) return false;
  return true;
}

/** Refuses call options that are not an object or name an option calls do not have. */
export function assertRunOptions(options: RunOptions): void {
  if (typeof options !== "object" || options === null) {
    throw new InvalidRequestError(
      "The options of a call must be an object, e.g. {timeoutSeconds: 30}.",
    );
  }
  // The error is only made for a call that names an unknown option.
  if (knownKeys(options)) return;
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

/**
 * Builds and checks the exec request; a mistake is an `InvalidRequestError` before sending.
 * `tokens` are the bridges' tokens, which no message may show.
 */
export function prepareCall(
  config: ResolvedConfig,
  tokens: ReadonlyArray<string | undefined>,
  command: string,
  options: RunOptions,
  onRefused: (() => void) | undefined,
): PreparedCall {
  // The reference bridge lower-cases ids; this client does the same rather than refuse them.
  const sandboxId =
    typeof options.sandboxId === "string"
      ? options.sandboxId.toLowerCase()
      : (options.sandboxId ?? newSandboxId(config.idPrefix));
  const timeoutSeconds = options.timeoutSeconds ?? config.timeoutSeconds;
  const candidate: Record<string, unknown> = {
    sandboxId,
    command,
    timeoutSeconds,
    cwd: options.cwd ?? config.cwd,
  };
  if (options.env !== undefined) candidate.env = options.env;
  if (options.maxOutputBytes !== undefined) candidate.maxOutputBytes = options.maxOutputBytes;
  if (options.network !== undefined) candidate.network = options.network;
  if (options.secrets !== undefined) candidate.secrets = options.secrets;
  let stdinBytes = 0;
  if (options.stdin !== undefined) {
    const stdin = stdinField(options.stdin);
    if (!stdin.ok) invalid([{ path: ["stdin"], message: stdin.message }]);
    candidate.stdin = stdin.value;
    stdinBytes = stdin.bytes;
  }
  const secrets = new Secrets([
    ...tokens,
    ...(typeof options.env === "object" && options.env !== null ? Object.values(options.env) : []),
  ]);
  let request: ExecRequest;
  if (onlyCommand(options) && defaultsValid(config) && commandSchema.safeParse(command).success) {
    // What the whole schema would give: the same fields, in the same order.
    request = candidate as ExecRequest;
  } else {
    const parsed = execRequestSchema.safeParse(candidate);
    if (!parsed.success) {
      invalid(
        issuesOf(parsed.error, (message) => secrets.redact(message, 200)).map(explainNetwork),
      );
    }
    request = parsed.data;
  }
  const graceSeconds = graceSecondsFor(config, timeoutSeconds);
  return {
    sandboxId,
    request,
    keptBytes: request.maxOutputBytes ?? DEFAULT_KEPT_OUTPUT_BYTES,
    deadlineMs: (timeoutSeconds + graceSeconds) * 1000,
    secrets,
    stdinBytes,
    onRefused,
  };
}
