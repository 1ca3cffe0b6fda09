import * as z from "zod";
import { PROTOCOL_VERSION } from "./constants.js";
import { sandboxIdSchema } from "./ids.js";

const nonNegativeInt = z.int().nonnegative();
const positiveInt = z.int().positive();

/** Limits a bridge enforces on requests and output; reported by `GET /health`. */
export const limitsSchema = z.object({
  maxRequestBytes: positiveInt.describe("Largest request body accepted, in bytes."),
  maxCommandBytes: positiveInt.describe("Longest command accepted, in UTF-8 bytes."),
  maxEnvEntries: nonNegativeInt.describe("Most `env` entries accepted."),
  maxEnvEntryBytes: positiveInt.describe("Longest `env` name plus value, in UTF-8 bytes."),
  maxTimeoutSeconds: z.number().positive().describe("Longest `timeoutSeconds` accepted."),
  maxOutputBytes: positiveInt.describe(
    "Bytes of each output stream the bridge retains (the tail); byte totals stay exact.",
  ),
  maxStdinBytes: nonNegativeInt
    .optional()
    .describe(
      "Largest `stdin` accepted, in bytes once decoded (protocol 2; 0: the bridge takes no stdin).",
    ),
});
export type Limits = z.infer<typeof limitsSchema>;

/**
 * A bridge's pool of sandboxes started ahead of calls (the Cloudflare Worker's warm pool), as
 * `GET /health` reports it. Each pooled sandbox serves exactly one call.
 */
export const warmPoolSchema = z.object({
  target: nonNegativeInt.describe(
    "Sandboxes the pool keeps started and waiting (0: the pool is off).",
  ),
  ready: nonNegativeInt.describe("Sandboxes started and waiting for a call now."),
  starting: nonNegativeInt.describe("Sandboxes being started to refill the pool now."),
  waiting: nonNegativeInt
    .optional()
    .describe("Calls waiting now for a sandbox the pool is starting (none was ready when asked)."),
  hits: nonNegativeInt
    .optional()
    .describe(
      "Calls lent a pooled sandbox that was ready when they asked (counted by the bridge instance that answered).",
    ),
  waits: nonNegativeInt
    .optional()
    .describe("Calls lent a pooled sandbox once it had started: none was ready when they asked."),
  misses: nonNegativeInt
    .optional()
    .describe("Calls that got no pooled sandbox and started their own."),
  hedges: nonNegativeInt
    .optional()
    .describe(
      "Slow sandbox starts that got a second sandbox started for the same call (the first ready ran the command).",
    ),
});
export type WarmPool = z.infer<typeof warmPoolSchema>;

/** A bridge's admission control and its load when it answered; reported by `GET /health`. */
export const admissionSchema = z.object({
  maxConcurrent: positiveInt.describe(
    "Most calls the bridge runs at once; each holds its slot until its sandbox is destroyed.",
  ),
  maxQueued: nonNegativeInt.describe(
    "Most calls waiting for a slot; beyond them `POST /exec` answers 429 `capacity_exceeded`.",
  ),
  running: nonNegativeInt.describe("Calls holding a slot now."),
  queued: nonNegativeInt.describe("Calls waiting for a slot now."),
});
export type Admission = z.infer<typeof admissionSchema>;

/** One per-sandbox limit in force, and the mechanism that enforces it. */
export const enforcedLimitSchema = z.object({
  max: positiveInt.describe("The limit."),
  by: z
    .string()
    .describe(
      "What enforces it, e.g. `cgroup-v2`, `cgroup-v1`, `rlimit` (per process), `tmpfs`, `container`.",
    ),
});
export type EnforcedLimit = z.infer<typeof enforcedLimitSchema>;

/**
 * How each sandbox is confined, as far as the bridge can tell. A limit that is left out is not
 * enforced; readers that do not know a field ignore it.
 */
export const sandboxReportSchema = z.object({
  user: z
    .string()
    .optional()
    .describe(
      "Who the command runs as on the host: `uid-per-sandbox` (a distinct unprivileged uid for each sandbox running at the same time), `bridge-uid` (the bridge's own uid, which is not root) or `container`.",
    ),
  uids: z
    .object({ first: positiveInt, count: positiveInt })
    .optional()
    .describe("The host uids `uid-per-sandbox` takes from: `first` to `first + count - 1`."),
  processes: enforcedLimitSchema.optional().describe("Most processes and threads at once."),
  memoryBytes: enforcedLimitSchema.optional().describe("Most memory, in bytes."),
  workspaceBytes: enforcedLimitSchema
    .optional()
    .describe("Largest size of `/workspace`, in bytes."),
  tmpBytes: enforcedLimitSchema.optional().describe("Largest size of `/tmp`, in bytes."),
  teardown: z
    .string()
    .optional()
    .describe(
      "What stops every process of a sandbox when its call ends: `pid-namespace`, `cgroup`, `uid`, `process-group` (a process that leaves its group can outlive the call) or `container`.",
    ),
  image: z.string().optional().describe("The container image each call runs in (docker backend)."),
  runtime: z
    .string()
    .optional()
    .describe(
      "The container runtime, e.g. `runc` or `runsc` (gVisor), or `engine-default` (docker backend).",
    ),
});
export type SandboxReport = z.infer<typeof sandboxReportSchema>;

const HOST_LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?";
const HOST_PATTERN = new RegExp(
  `^(?:(?:\\*\\.)?(?:${HOST_LABEL}\\.)*${HOST_LABEL}|\\[[0-9a-f:.]+\\])(?::(?:6553[0-5]|655[0-2]\\d|65[0-4]\\d{2}|6[0-4]\\d{3}|[1-5]\\d{4}|[1-9]\\d{0,3}))?$`,
);

/**
 * A host a call may reach: `example.com` (that name only), `*.example.com` (any name under it,
 * not the name itself), an IPv4 address, or an IPv6 address in brackets, each optionally with
 * `:port` (without one, any port). Lower case; no scheme, path or user.
 */
export const hostPatternSchema = z
  .string()
  .max(260)
  .regex(
    HOST_PATTERN,
    "a host pattern is `name`, `*.name`, an IPv4 address or `[IPv6]`, optionally with `:port`, in lower case",
  );
export type HostPattern = z.infer<typeof hostPatternSchema>;

/**
 * Where a call's command may connect: `none` (nowhere), `open` (the internet, never the bridge's
 * host or private ranges unless the deployer allows them) or `{allow}` (only the listed hosts).
 * Ordered `none` < `{allow}` < `open`.
 */
export const networkPolicySchema = z.union([
  z.enum(["none", "open"]),
  z.strictObject({ allow: z.array(hostPatternSchema).min(1).max(256) }),
]);
export type NetworkPolicy = z.infer<typeof networkPolicySchema>;

/** A bridge's network policies, as `GET /health` reports them (protocol 2). */
export const networkReportSchema = z.object({
  default: networkPolicySchema.describe("The policy of a call that names none."),
  ceiling: networkPolicySchema.describe(
    "The most a call may ask for; asking for more is refused with 403 `forbidden`.",
  ),
});
export type NetworkReport = z.infer<typeof networkReportSchema>;

/** A secret name: as an environment variable name, so the command finds its placeholder there. */
export const secretNameSchema = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "secret names must match [A-Za-z_][A-Za-z0-9_]*");

/** A secret the deployer declared, as `GET /health` reports it: its name and hosts, never its value. */
export const secretReportSchema = z.object({
  name: secretNameSchema,
  hosts: z
    .array(hostPatternSchema)
    .describe(
      "Host patterns the secret's value may be sent to (and a call asking for it may reach).",
    ),
});
export type SecretReport = z.infer<typeof secretReportSchema>;

/**
 * What a bridge keeps of its calls and for how long (protocol 3), as `GET /health` reports it:
 * a bridge that reports it answers `GET /exec/{sandboxId}` and takes `detach`.
 */
export const durableReportSchema = z.object({
  keptSeconds: z
    .number()
    .nonnegative()
    .describe(
      "Seconds a call's outcome (its result: exit code and the retained tail of each output, or its error) is kept after it ends; then its id answers `expired`.",
    ),
  maxKept: nonNegativeInt.describe(
    "Most calls kept at once: detached calls in flight and ended calls whose outcome is kept.",
  ),
  maxKeptBytes: nonNegativeInt.describe(
    "Most bytes the kept outcomes hold (a detached call in flight is counted at two caps of output); a detached call beyond it or beyond `maxKept` is refused with 429 `capacity_exceeded`.",
  ),
  kept: nonNegativeInt.describe("Calls kept now."),
  keptBytes: nonNegativeInt.describe("Bytes the kept calls are counted at now."),
  disconnectGraceSeconds: z
    .number()
    .nonnegative()
    .describe(
      "Seconds a call whose caller's connection dropped (without `detach`) keeps running for its caller to re-attach; then it is cancelled.",
    ),
  replay: z
    .string()
    .describe(
      "What a re-attached event stream replays: `head` (the first `maxOutputBytes` of each output while the call runs, the retained tail once it ended).",
    ),
});
export type DurableReport = z.infer<typeof durableReportSchema>;

/**
 * The bridge instance that answered (protocol 3, optional): random each time a bridge starts, so
 * a new one after a restart says that what the old one kept is gone.
 */
const instanceSchema = z
  .string()
  .min(1)
  .max(128)
  .describe(
    "The bridge instance that answered: a new one after each restart (what the old one kept is gone). Optional; readers may ignore it.",
  );

/** `GET /health`. The reference bridge answers only `{ok: true}`, so the rest is optional. */
export const healthResponseSchema = z.object({
  ok: z.literal(true),
  protocol: z.int().positive().optional().describe(`Protocol version, ${PROTOCOL_VERSION} here.`),
  backend: z.string().optional().describe("Sandbox backend in use, e.g. `local` or `cloudflare`."),
  isolation: z
    .string()
    .optional()
    .describe("Isolation actually in force: `container`, `bwrap` or `none`."),
  limits: limitsSchema.optional(),
  admission: admissionSchema.optional(),
  sandbox: sandboxReportSchema.optional(),
  version: z.string().optional().describe("Version of the bridge software."),
  warmPool: warmPoolSchema
    .optional()
    .describe("The pool of sandboxes started ahead of calls, on a bridge that keeps one."),
  network: networkReportSchema
    .optional()
    .describe(
      "The network policies the bridge enforces; absent when it controls no network access (then `network` in a request is refused).",
    ),
  secrets: z
    .array(secretReportSchema)
    .optional()
    .describe(
      "Secrets a call may ask for by name (`secrets` in a request), with the hosts each may go to; absent when the bridge declares none.",
    ),
  durable: durableReportSchema
    .optional()
    .describe(
      "Durable calls (protocol 3): what the bridge keeps and for how long; absent on a bridge without them (then `detach` is refused and nothing re-attaches).",
    ),
  instance: instanceSchema.optional(),
});
export type HealthResponse = z.infer<typeof healthResponseSchema>;

const ENV_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** `POST /exec` body. Unknown fields are refused so a misspelt option is never silently ignored. */
export const execRequestSchema = z.strictObject({
  sandboxId: sandboxIdSchema,
  command: z.string().min(1, "command must not be empty"),
  timeoutSeconds: z
    .number()
    .positive("timeoutSeconds must be greater than 0")
    .optional()
    .describe("Server-side deadline in seconds (default 120)."),
  cwd: z
    .string()
    .regex(/^\//, "cwd must be an absolute path")
    .optional()
    .describe("Working directory inside the sandbox (default /workspace)."),
  env: z
    .record(
      z.string().regex(ENV_NAME_PATTERN, "env names must match [A-Za-z_][A-Za-z0-9_]*"),
      z.string(),
    )
    .optional()
    .describe("Extra environment variables for the command. Never echoed back."),
  maxOutputBytes: positiveInt
    .optional()
    .describe("Retain at most this many bytes per stream (capped by the bridge's limit)."),
  network: networkPolicySchema
    .optional()
    .describe("Where the command may connect (protocol 2; default: the bridge's default)."),
  secrets: z
    .array(secretNameSchema)
    .max(64)
    .optional()
    .describe(
      "Secrets the command may use, by name, among those the bridge declares (`/health`): the command's env holds a placeholder per name, which the bridge's egress proxy replaces with the value only in request headers to the secret's hosts. The call may reach those hosts whatever its `network`. A name the bridge does not declare is refused (403).",
    ),
  stdin: z
    .union([
      z.string(),
      z.strictObject({
        base64: z
          .string()
          .regex(
            /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/,
            "stdin.base64 must be standard base64 (with padding)",
          ),
      }),
    ])
    .optional()
    .describe(
      "Standard input of the command, then end of input (protocol 2): UTF-8 text, or `{base64}` for bytes. Without it stdin is empty.",
    ),
  detach: z
    .boolean()
    .optional()
    .describe(
      "Keep the call (protocol 3): answered at once with its `CallStatus`; the command runs to its own deadline whatever happens to the caller, and `GET /exec/{sandboxId}` gives its state and result.",
    ),
});
export type ExecRequest = z.infer<typeof execRequestSchema>;

/** How a command ended. */
export const outcomeSchema = z.enum(["exited", "timeout", "cancelled"]);
export type Outcome = z.infer<typeof outcomeSchema>;

/**
 * `POST /exec` result. `stdout`, `stderr` and `code` are the reference shape; the rest are
 * optional extensions. Output strings are the retained tail when `*Truncated` is true.
 */
export const execResultSchema = z.object({
  stdout: z.string(),
  stderr: z.string(),
  code: z.int().describe("Exit code; 124 when the command timed out."),
  outcome: outcomeSchema.optional(),
  durationMs: z.number().nonnegative().optional(),
  stdoutBytes: nonNegativeInt.optional().describe("Total bytes the command wrote to stdout."),
  stderrBytes: nonNegativeInt.optional().describe("Total bytes the command wrote to stderr."),
  stdoutTruncated: z.boolean().optional(),
  stderrTruncated: z.boolean().optional(),
});
export type ExecResult = z.infer<typeof execResultSchema>;

/** Machine-readable error codes and the HTTP status each one is sent with. */
export const ERROR_STATUS = {
  unauthorized: 401,
  invalid_request: 400,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  forbidden: 403,
  payload_too_large: 413,
  capacity_exceeded: 503,
  sandbox_error: 502,
  not_configured: 503,
  internal: 500,
} as const satisfies Record<string, number>;

export type ErrorCode = keyof typeof ERROR_STATUS;

/**
 * The statuses a code is sent with besides its own in {@link ERROR_STATUS}. `capacity_exceeded`
 * is 429 when the bridge itself is at its admission limits (as many calls running and waiting as
 * it takes: slow down), and 503 when the capacity behind it is out (no sandbox free) or it is
 * shutting down. Either way the command did not run and the same request may be sent again after
 * `Retry-After`.
 */
export const ERROR_OTHER_STATUSES: Readonly<Partial<Record<ErrorCode, readonly number[]>>> = {
  capacity_exceeded: [429],
};

/** Every HTTP status `code` may be sent with, its own (from {@link ERROR_STATUS}) first. */
export function errorStatuses(code: ErrorCode): readonly number[] {
  return [ERROR_STATUS[code], ...(ERROR_OTHER_STATUSES[code] ?? [])];
}
export const errorCodeSchema = z.enum(Object.keys(ERROR_STATUS) as [ErrorCode, ...ErrorCode[]]);

/** One failing path of an invalid request. */
export const issueSchema = z.object({
  path: z.array(z.union([z.string(), z.int()])),
  message: z.string(),
});
export type Issue = z.infer<typeof issueSchema>;

/** Every error response body. */
export const errorBodySchema = z.object({
  error: z.string().describe("Human-readable message."),
  code: errorCodeSchema,
  issues: z.array(issueSchema).optional(),
  retryAfterSeconds: z.number().nonnegative().optional(),
});
export type ErrorBody = z.infer<typeof errorBodySchema>;

/**
 * Where a call stands (protocol 3): `queued` (waiting for a slot), `running`, `finished` (its
 * outcome is kept), `expired` (it ended and its outcome is no longer kept), `unknown` (no call
 * of that id here: never sent, forgotten, or lost with a bridge restart).
 */
export const callStateSchema = z.enum(["queued", "running", "finished", "expired", "unknown"]);
export type CallState = z.infer<typeof callStateSchema>;

/**
 * `GET /exec/{sandboxId}` and the answer to a detached `POST /exec` (protocol 3). A `finished`
 * call carries its `result`, or its `error` when it failed (it never started, or its sandbox failed).
 */
export const callStatusSchema = z.object({
  sandboxId: sandboxIdSchema,
  state: callStateSchema,
  result: execResultSchema.optional().describe("The outcome of a `finished` call that ran."),
  error: errorBodySchema.optional().describe("The outcome of a `finished` call that failed."),
  keptForSeconds: z
    .number()
    .nonnegative()
    .optional()
    .describe("Seconds the outcome of a `finished` call is kept from now."),
  instance: instanceSchema.optional(),
  rememberedSeconds: z
    .number()
    .nonnegative()
    .optional()
    .describe(
      "On `unknown`: this instance knows every id sent to it within the last this many seconds (since it started, or since it last forgot an id to stay within its bounds). An id sent to it more recently than that never reached it, and its command never ran here: the same request may be sent again. Absent: the bridge does not say.",
    ),
});
export type CallStatus = z.infer<typeof callStatusSchema>;

/** The reference bridge's error body, `{error}` only; readers accept it as a fallback. */
export const referenceErrorBodySchema = z.object({ error: z.string() });

/** `POST /cancel` body. */
export const cancelRequestSchema = z.strictObject({ sandboxId: sandboxIdSchema });
export type CancelRequest = z.infer<typeof cancelRequestSchema>;

/** `POST /cancel` answer; `cancelled` says whether a running command was found and stopped. */
export const cancelResponseSchema = z.object({
  ok: z.literal(true),
  sandboxId: sandboxIdSchema,
  cancelled: z.boolean(),
});
export type CancelResponse = z.infer<typeof cancelResponseSchema>;

/**
 * On an output event: bytes of the same stream the bridge skipped just before this event's
 * `data`, because the reader fell behind (its buffer was full). The `exit` result still holds
 * the whole retained tail and exact byte totals. Absent when nothing was skipped.
 */
const skippedBytesSchema = positiveInt
  .optional()
  .describe(
    "Bytes of this stream skipped just before `data` because the reader fell behind; the exit result still has them.",
  );

/** SSE events of a streamed `POST /exec`; the SSE `event:` name equals `type`. */
export const streamEventSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("start"), sandboxId: sandboxIdSchema, protocol: z.int().positive() }),
  z.object({ type: z.literal("stdout"), data: z.string(), skippedBytes: skippedBytesSchema }),
  z.object({ type: z.literal("stderr"), data: z.string(), skippedBytes: skippedBytesSchema }),
  z.object({ type: z.literal("heartbeat"), elapsedMs: z.number().nonnegative() }),
  z.object({ type: z.literal("exit"), result: execResultSchema }),
  z.object({ type: z.literal("error"), error: errorBodySchema }),
]);
export type StreamEvent = z.infer<typeof streamEventSchema>;
export type StreamEventType = StreamEvent["type"];
