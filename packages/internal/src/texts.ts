/*
 * Every fixed text this project's bridge and backends send back in an answer. They live here, in
 * one list, because a client reads them back inside foreign text: redaction must leave them as
 * written (see redact.ts), so the client has to know them. A text with values in it is a
 * function; its fixed parts are kept, the values in between are not.
 *
 * Adding a text to an answer (a new refusal, a backend's new failure message)? Put it here. A
 * failure before the command started says {@link DID_NOT_RUN}: the client then says the same
 * (and sets `mayHaveRun: false`) instead of "may have run".
 */

/** The words of every failure text whose command never started; clients look for them. */
export const DID_NOT_RUN = "so the command did not run";

/** Texts of the bridge core (packages/bridge/src). */
export const BRIDGE_TEXTS = {
  unauthorized: "Missing or wrong bearer token; send Authorization: Bearer <token>.",
  notConfigured:
    "This bridge has no token configured, so it refuses to run commands. Set BRIDGE_TOKEN (or pass `token` to the bridge), or opt out explicitly with allowUnauthenticated.",
  internal: "The bridge failed unexpectedly; the bridge log has details.",
  shuttingDown: "The bridge is shutting down; try another bridge or retry shortly.",
  overloaded: (running: number, waiting: number, waitingBytes: number, retrySeconds: number) =>
    `The bridge is at its limit of ${running} running and ${waiting} waiting calls (or ${waitingBytes} bytes of waiting requests), so the command did not run. Retry in ${retrySeconds} s (Retry-After), or send fewer calls at once.`,
  queueDeadline: (waitedSeconds: number, retrySeconds: number) =>
    `The call waited ${waitedSeconds} s for a slot and reached its deadline before one was free, so the command did not run. Retry in ${retrySeconds} s (Retry-After), with a longer timeout, or send fewer calls at once.`,
  wouldMissDeadline: (waitSeconds: number, timeoutSeconds: number, retrySeconds: number) =>
    `The call would wait about ${waitSeconds} s for a slot, longer than its timeout of ${timeoutSeconds} s, so the command did not run. Retry in ${retrySeconds} s (Retry-After), with a longer timeout, or send fewer calls at once.`,
  clientQueueFull: (waiting: number, retrySeconds: number) =>
    `This client already has ${waiting} calls waiting for a slot, the most one client may, so the command did not run. Retry in ${retrySeconds} s (Retry-After), or send fewer calls at once.`,
  sandboxFailed:
    "The sandbox failed while running the command; the bridge log has details. Try again.",
  originRefused: (origin: string) =>
    `Requests from the web origin ${origin} are not allowed by this bridge's CORS settings, so the command did not run. The deployer lists the origins whose pages may call the bridge.`,
  notFound: (path: string, routes: string) => `No route ${path}; routes are ${routes}.`,
  methodNotAllowed: (path: string, allowed: string, method: string) =>
    `${path} accepts ${allowed}, not ${method}.`,
  conflict: (sandboxId: string) =>
    `Sandbox id ${sandboxId} is already in use by a running call; use a fresh id per call.`,
  conflictOtherCommand: (sandboxId: string) =>
    `Sandbox id ${sandboxId} belongs to a call of another command, so this one did not run; use a fresh id per call.`,
  conflictExpired: (sandboxId: string) =>
    `Sandbox id ${sandboxId} belongs to a call that ended and whose result is no longer kept, so the command did not run again; use a fresh id per call.`,
  keptFull: (calls: number, bytes: number, retrySeconds: number) =>
    `The bridge keeps at most ${calls} detached calls and results (or ${bytes} bytes of them), so the command did not run. Retry in ${retrySeconds} s (Retry-After), fetch or cancel detached calls, or send fewer.`,
  notKept: (sandboxId: string, state: string) =>
    `No call ${sandboxId} to re-attach to here (${state}): it was never sent to this bridge, its result expired, or the bridge restarted.`,
  noDetach:
    "This bridge keeps no calls (durable calls are off), so `detach` is refused and the command did not run.",
  badQuery: (name: string) => `Query parameter ${name} must be a number of at least 0.`,
  payloadTooLarge: (maxBytes: number) =>
    `Request body is larger than ${maxBytes} bytes (command, env and stdin together), so the command did not run.`,
  notJsonType: "Content-Type must be application/json.",
  unsupportedType: (mediaType: string) => `unsupported content type "${mediaType}"`,
  notUtf8: "Request body is not valid UTF-8.",
  notUtf8Issue: "body must be UTF-8 encoded JSON",
  notJson: "Request body is not valid JSON.",
  notJsonIssue: "body must be a JSON object",
  /** With the issues in words (`issuesInWords`): a reader of `error` alone learns what is wrong. */
  invalid: (what: string, issues: string) => `${what} is invalid: ${issues}.`,
  overLimits: (issues: string) => `Exec request exceeds the bridge limits: ${issues}.`,
  commandTooLong: (maxBytes: number) => `command is longer than ${maxBytes} bytes`,
  timeoutTooLong: (maxSeconds: number) => `timeoutSeconds must be at most ${maxSeconds}`,
  tooManyEnv: (maxEntries: number) => `env has more than ${maxEntries} entries`,
  envEntryTooLong: (maxBytes: number) =>
    `env entry is longer than ${maxBytes} bytes (name plus value)`,
  unparsableRequest: "The HTTP request could not be parsed.",
  unreadableRequest: "The HTTP request could not be read.",
  malformedRequestIssue: "malformed HTTP request",
  bodyBrokenOffIssue: "the request body broke off before its end",
  networkUncontrolled:
    "This bridge does not control network access, so it cannot honour `network`; leave the field out.",
  networkBeyondCeiling: (requested: string, ceiling: string) =>
    `The call asks for network ${requested}, more than this bridge allows (${ceiling}), so the command did not run.`,
  secretsUndeclared: (unknown: string, declared: string) =>
    `The call asks for secrets this bridge does not declare (${unknown}), so the command did not run; it declares ${declared}.`,
  secretUnavailable: (name: string) =>
    `The bridge cannot read the value of secret ${name} (its variable is unset or empty, or its file unreadable), so the command did not run.`,
  secretsUnsupported:
    "This bridge cannot inject secrets (its backend has no egress proxy for them), so it cannot honour `secrets`; leave the field out.",
  networkModeUnsupported: (mode: string, modes: string) =>
    `This bridge cannot enforce network ${mode} (it enforces ${modes}), so the command did not run.`,
  stdinTooLarge: (bytes: number, maxBytes: number) =>
    `stdin is ${bytes} bytes; this bridge takes at most ${maxBytes}, so the command did not run.`,
} as const;

/** Texts every backend sends alike; a backend's own list refers to them by name. */
export const SANDBOX_TEXTS = {
  /** A `cwd` that does not exist in the sandbox is refused, never created (every backend). */
  missingCwd: (cwd: string) =>
    `cwd ${cwd} is not a directory in the sandbox, so the command did not run. ` +
    "Use an existing directory (default /workspace), or create it first: mkdir -p <dir> && cd <dir> && ...",
  /** A container backend's container did not start; with the reason (already safe to show). */
  notStarted: (reason: string) =>
    `The sandbox's container could not be started, so the command did not run (${reason}).`,
  /** A backend asked to start a sandbox id it already runs. */
  alreadyExists: (sandboxId: string) =>
    `Sandbox ${sandboxId} already exists on this bridge; use a fresh sandbox id.`,
} as const;

/** Texts of the Cloudflare backend (apps/worker). */
export const CLOUDFLARE_TEXTS = {
  containersDisabled:
    "Containers are not available to this Worker, so the command did not run: it runs with " +
    "containers off (local `wrangler dev` turns them off because they need Docker). Deploy it with `npm run deploy -w apps/worker`, or " +
    "run `npx wrangler dev --enable-containers` with Docker running.",
  noContainer:
    "No sandbox container is free right now (the deployment's max_instances are busy or none " +
    "could be placed). Try again shortly.",
  stopped: "The command was stopped before it finished.",
  closedEarly: "The sandbox closed the output stream before the command exited.",
  notStarted: SANDBOX_TEXTS.notStarted,
  notReady: (timeoutSeconds: number) =>
    `The sandbox's container did not become ready within the call's timeout (${timeoutSeconds} s), ` +
    "so the command did not run. Cold starts can take several seconds: allow a longer " +
    "timeoutSeconds, or retry.",
  missingCwd: SANDBOX_TEXTS.missingCwd,
  /** With the platform's (redacted) words for how the stream broke. */
  brokenStream: (detail: string) =>
    "The connection to the sandbox broke while the command ran (its container may have " +
    `stopped), so how the command ended is unknown (${detail}).`,
  /** A container object asked to start or run again (each runs one command, once). */
  sandboxUsed: (phase: string) =>
    `This sandbox's container object was used already (${phase}); a container runs one command and is never reused.`,
  /** With the platform's error code and its (redacted) message, each when there is one. */
  failed: (code: string | undefined, detail: string) =>
    `The sandbox failed${code ? ` (${code})` : ""}${detail ? `: ${detail}` : ""}`,
} as const;

/** Texts of the docker backend (packages/bridge/src/docker). */
export const DOCKER_TEXTS = {
  noImage: (image: string) =>
    `The container engine has no image ${image}, so the command did not run; build or pull it first (docker build -t ${image} . / docker pull ${image}).`,
  closed: "The docker backend is closed, so the command did not run.",
  endedEarly: "The call ended before the command started, so the command did not run.",
  notStarted: SANDBOX_TEXTS.notStarted,
  /** With the container's exit status and what it printed, when there was any. */
  noShell: (image: string, code: number | undefined, output: string) =>
    `The container of image ${image} ended before its shell ran (exit ${code ?? "unknown"}${output ? `: ${output}` : ""}), so the command did not run; the image needs /bin/sh.`,
  missingCwd: SANDBOX_TEXTS.missingCwd,
  noRelay: (reason: string) =>
    `The container's network relay could not be set up, so the command did not run: ${reason}`,
  /** With the engine's hard process-count limit: the value to pass. */
  nprocRefused: (limit: string) =>
    `The engine may not raise the containers' process-count rlimit to its default (it runs without CAP_SYS_RESOURCE): pass --docker-ulimit nproc=${limit} (the docker backend's ulimits: { nproc: ${limit} }), the engine's own hard limit.`,
  nprocRefusedUnknown:
    "The engine may not raise the containers' process-count rlimit to its default (it runs without CAP_SYS_RESOURCE): pass --docker-ulimit nproc=N (the docker backend's ulimits: { nproc: N }) with N no higher than the engine's own hard limit (Max processes in /proc/<engine pid>/limits).",
  /** With the engine's reason and, where known, the fix: said when the backend starts. */
  noStart: (reason: string) =>
    `No container can be started on this engine, so the bridge does not serve and no command runs (${reason}).`,
} as const;

type Text = string | ((...values: never[]) => string);

/** Marks where a value goes when a text's fixed parts are taken apart. */
const SLOT = "\u0000";

/**
 * The fixed parts of `text`: the text itself, or what stands between its values, taken with every
 * value present and with every value empty (for texts whose values are optional).
 */
function fixedParts(text: Text): string[] {
  if (typeof text === "string") return [text];
  const fill = (value: string) =>
    (text as (...values: string[]) => string)(...Array.from({ length: text.length }, () => value));
  return [...fill(SLOT).split(SLOT), fill("")].filter((part) => part.length > 0);
}

/** Every fixed text (and fixed part of a text with values), for `redact(..., keep)`. */
export const OWN_TEXTS: readonly string[] = [
  ...new Set(
    [
      ...Object.values(BRIDGE_TEXTS),
      ...Object.values(SANDBOX_TEXTS),
      ...Object.values(CLOUDFLARE_TEXTS),
      ...Object.values(DOCKER_TEXTS),
    ].flatMap(fixedParts),
  ),
];

/** A regular expression matching `text`, with each of `holes` in it as a group. */
function textPattern(text: string, holes: readonly string[]): RegExp {
  let source = text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  for (const hole of holes) source = source.replace(hole, "(.+?)");
  return new RegExp(`^${source}$`);
}

const UNDECLARED_SECRETS = textPattern(BRIDGE_TEXTS.secretsUndeclared("\u0000U", "\u0000D"), [
  "\u0000U",
  "\u0000D",
]);
const UNREADABLE_SECRET = textPattern(BRIDGE_TEXTS.secretUnavailable("\u0000N"), ["\u0000N"]);

/**
 * The names a bridge refused as undeclared and those it declares, read back from its words
 * ({@link BRIDGE_TEXTS}.secretsUndeclared); undefined for any other text.
 */
export function undeclaredSecrets(
  bridgeMessage: string | undefined,
): { unknown: string; declared: string } | undefined {
  const match = bridgeMessage === undefined ? null : UNDECLARED_SECRETS.exec(bridgeMessage);
  if (match === null) return undefined;
  return { unknown: match[1] ?? "", declared: match[2] ?? "" };
}

/** The secret whose value the bridge could not read, from its words; undefined for other text. */
export function unreadableSecret(bridgeMessage: string | undefined): string | undefined {
  const match = bridgeMessage === undefined ? null : UNREADABLE_SECRET.exec(bridgeMessage);
  return match?.[1];
}
