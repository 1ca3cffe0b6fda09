import { PROTOCOL_VERSION } from "./constants.js";
import type { WireSchemaName } from "./openapi.js";

/** An example wire message, labelled with the schema it is checked against. */
export interface Fixture {
  name: string;
  schema: WireSchemaName;
  value: unknown;
}

/** An example that must fail, with the path the failure must name. */
export interface InvalidFixture extends Fixture {
  failingPath: ReadonlyArray<string | number>;
}

/** The exact request the reference client sends. */
export const referenceExecRequest = {
  sandboxId: "mikan-task-3f2b8c1d-6a4e-4f7b-9c2d-1e5a7b9c0d3f",
  command: "pwd",
  timeoutSeconds: 30,
  cwd: "/workspace",
} as const;

/** The exact response the reference bridge sends for {@link referenceExecRequest}. */
export const referenceExecResponse = { stdout: "/workspace\n", stderr: "", code: 0 } as const;

const limits = {
  maxRequestBytes: 262_144,
  maxCommandBytes: 65_536,
  maxEnvEntries: 64,
  maxEnvEntryBytes: 8_192,
  maxTimeoutSeconds: 3_600,
  maxOutputBytes: 1_048_576,
  maxStdinBytes: 1_048_576,
};

const network = { default: "none", ceiling: { allow: ["pypi.org", "*.pythonhosted.org:443"] } };

const admission = { maxConcurrent: 8, maxQueued: 32, running: 8, queued: 3 };

const sandbox = {
  user: "uid-per-sandbox",
  uids: { first: 1_900_000_000, count: 1024 },
  processes: { max: 256, by: "cgroup-v1" },
  memoryBytes: { max: 2_147_483_648, by: "cgroup-v1" },
  workspaceBytes: { max: 1_073_741_824, by: "tmpfs" },
  tmpBytes: { max: 268_435_456, by: "tmpfs" },
  teardown: "pid-namespace",
};

const fullResult = {
  stdout: "hello\n",
  stderr: "",
  code: 0,
  outcome: "exited",
  durationMs: 12.5,
  stdoutBytes: 6,
  stderrBytes: 0,
  stdoutTruncated: false,
  stderrTruncated: false,
};

/** A protocol 2 bridge's `/health` with every field: it takes stdin and enforces network policies. */
export const fullHealthResponse = {
  ok: true,
  protocol: PROTOCOL_VERSION,
  backend: "local",
  isolation: "bwrap",
  limits,
  admission,
  sandbox,
  network,
  secrets: [{ name: "GH_TOKEN", hosts: ["api.github.com", "uploads.github.com:443"] }],
  durable: {
    keptSeconds: 600,
    maxKept: 4096,
    maxKeptBytes: 134_217_728,
    kept: 3,
    keptBytes: 4_194_400,
    disconnectGraceSeconds: 10,
    replay: "head",
  },
  version: "0.1.0",
  instance: "8f14e45f-ceea-467a-9575-6b7c2b1e0d2a",
} as const;

export const validFixtures: readonly Fixture[] = [
  { name: "reference exec request", schema: "ExecRequest", value: referenceExecRequest },
  {
    name: "exec request with every field",
    schema: "ExecRequest",
    value: {
      ...referenceExecRequest,
      env: { GREETING: "hi", _X1: "" },
      maxOutputBytes: 65_536,
      network: { allow: ["pypi.org", "*.pythonhosted.org:443", "10.0.0.7:8080", "[::1]:9000"] },
      stdin: "a,b\n1,2\n",
      secrets: ["GH_TOKEN", "_K2"],
    },
  },
  {
    name: "exec request with open network and binary stdin",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "wc -c", network: "open", stdin: { base64: "AAH/" } },
  },
  {
    name: "minimal exec request",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "true" },
  },
  {
    name: "detached exec request",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "sleep 60", detach: true },
  },
  { name: "reference exec response", schema: "ExecResult", value: referenceExecResponse },
  {
    name: "running call status",
    schema: "CallStatus",
    value: { sandboxId: "mikan-task-1", state: "running" },
  },
  {
    name: "finished call status",
    schema: "CallStatus",
    value: {
      sandboxId: "mikan-task-1",
      state: "finished",
      result: fullResult,
      keptForSeconds: 540,
    },
  },
  {
    name: "failed call status",
    schema: "CallStatus",
    value: {
      sandboxId: "mikan-task-1",
      state: "finished",
      error: { error: "Sandbox failed", code: "sandbox_error" },
    },
  },
  {
    name: "expired call status",
    schema: "CallStatus",
    value: { sandboxId: "a", state: "expired" },
  },
  {
    name: "unknown call status",
    schema: "CallStatus",
    value: { sandboxId: "a", state: "unknown" },
  },
  {
    name: "unknown call status of an instance that remembers",
    schema: "CallStatus",
    value: {
      sandboxId: "a",
      state: "unknown",
      instance: fullHealthResponse.instance,
      rememberedSeconds: 3600.25,
    },
  },
  {
    name: "running call status with its instance",
    schema: "CallStatus",
    value: { sandboxId: "a", state: "running", instance: fullHealthResponse.instance },
  },
  { name: "call state queued", schema: "CallState", value: "queued" },
  { name: "durable report", schema: "DurableReport", value: fullHealthResponse.durable },
  { name: "exec result with extensions", schema: "ExecResult", value: fullResult },
  {
    name: "timed-out exec result",
    schema: "ExecResult",
    value: { ...fullResult, code: 124, outcome: "timeout", stdoutTruncated: true },
  },
  {
    name: "exec result with unknown extra field",
    schema: "ExecResult",
    value: { ...referenceExecResponse, futureField: 1 },
  },
  { name: "reference health", schema: "HealthResponse", value: { ok: true } },
  { name: "full health", schema: "HealthResponse", value: fullHealthResponse },
  {
    name: "health with a warm pool",
    schema: "HealthResponse",
    value: {
      ok: true,
      backend: "cloudflare",
      isolation: "container",
      warmPool: { target: 16, ready: 12, starting: 4 },
    },
  },
  { name: "warm pool off", schema: "WarmPool", value: { target: 0, ready: 0, starting: 0 } },
  { name: "limits", schema: "Limits", value: limits },
  {
    name: "limits of a protocol 1 bridge",
    schema: "Limits",
    value: Object.fromEntries(Object.entries(limits).filter(([name]) => name !== "maxStdinBytes")),
  },
  { name: "network report", schema: "NetworkReport", value: network },
  { name: "network policy none", schema: "NetworkPolicy", value: "none" },
  {
    name: "secret report",
    schema: "SecretReport",
    value: { name: "GH_TOKEN", hosts: ["api.github.com"] },
  },
  { name: "wildcard host pattern with a port", schema: "HostPattern", value: "*.example.com:443" },
  { name: "admission", schema: "Admission", value: admission },
  { name: "sandbox report", schema: "SandboxReport", value: sandbox },
  {
    name: "sandbox report of a bridge without limits",
    schema: "SandboxReport",
    value: { user: "bridge-uid", teardown: "process-group" },
  },
  { name: "enforced limit", schema: "EnforcedLimit", value: { max: 256, by: "cgroup-v1" } },
  {
    name: "error body",
    schema: "ErrorBody",
    value: {
      error: "Request body is invalid",
      code: "invalid_request",
      issues: [{ path: ["command"], message: "command must not be empty" }],
    },
  },
  {
    name: "capacity error body",
    schema: "ErrorBody",
    value: { error: "No sandbox capacity", code: "capacity_exceeded", retryAfterSeconds: 5 },
  },
  { name: "cancel request", schema: "CancelRequest", value: { sandboxId: "mikan-task-1" } },
  {
    name: "cancel response",
    schema: "CancelResponse",
    value: { ok: true, sandboxId: "mikan-task-1", cancelled: false },
  },
  {
    name: "start event",
    schema: "StreamEvent",
    value: {
      type: "start",
      sandboxId: referenceExecRequest.sandboxId,
      protocol: PROTOCOL_VERSION,
    },
  },
  { name: "stdout event", schema: "StreamEvent", value: { type: "stdout", data: "line\n" } },
  { name: "stderr event", schema: "StreamEvent", value: { type: "stderr", data: "oops 💥\n" } },
  {
    name: "stdout event after skipped output",
    schema: "StreamEvent",
    value: { type: "stdout", data: "line 90000\n", skippedBytes: 262_144 },
  },
  {
    name: "stderr event reporting skipped output only",
    schema: "StreamEvent",
    value: { type: "stderr", data: "", skippedBytes: 17 },
  },
  {
    name: "heartbeat event",
    schema: "StreamEvent",
    value: { type: "heartbeat", elapsedMs: 15000 },
  },
  { name: "exit event", schema: "StreamEvent", value: { type: "exit", result: fullResult } },
  {
    name: "error event",
    schema: "StreamEvent",
    value: { type: "error", error: { error: "Sandbox failed", code: "sandbox_error" } },
  },
];

export const invalidFixtures: readonly InvalidFixture[] = [
  {
    name: "exec request without command",
    schema: "ExecRequest",
    value: { sandboxId: "mikan-task-1" },
    failingPath: ["command"],
  },
  {
    name: "exec request with empty command",
    schema: "ExecRequest",
    value: { sandboxId: "mikan-task-1", command: "" },
    failingPath: ["command"],
  },
  {
    // Upper-case letters fail the schema too, but bridges lower-case them before validating.
    name: "exec request with '_' in the sandbox id",
    schema: "ExecRequest",
    value: { sandboxId: "Mikan_Task_1", command: "pwd" },
    failingPath: ["sandboxId"],
  },
  {
    name: "exec request with sandbox id ending in '-'",
    schema: "ExecRequest",
    value: { sandboxId: "mikan-task-", command: "pwd" },
    failingPath: ["sandboxId"],
  },
  {
    name: "exec request with 64-character sandbox id",
    schema: "ExecRequest",
    value: { sandboxId: "a".repeat(64), command: "pwd" },
    failingPath: ["sandboxId"],
  },
  {
    name: "exec request with string timeout",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "pwd", timeoutSeconds: "30" },
    failingPath: ["timeoutSeconds"],
  },
  {
    name: "exec request with negative timeout",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "pwd", timeoutSeconds: -1 },
    failingPath: ["timeoutSeconds"],
  },
  {
    name: "exec request with relative cwd",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "pwd", cwd: "workspace" },
    failingPath: ["cwd"],
  },
  {
    name: "exec request with non-string env value",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "pwd", env: { A: 1 } },
    failingPath: ["env", "A"],
  },
  {
    name: "exec request with invalid env name",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "pwd", env: { "BAD-NAME": "x" } },
    failingPath: ["env", "BAD-NAME"],
  },
  {
    name: "exec request with misspelt field",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "pwd", timeout: 30 },
    failingPath: [],
  },
  {
    name: "exec result without code",
    schema: "ExecResult",
    value: { stdout: "", stderr: "" },
    failingPath: ["code"],
  },
  {
    name: "exec result with fractional code",
    schema: "ExecResult",
    value: { stdout: "", stderr: "", code: 1.5 },
    failingPath: ["code"],
  },
  {
    name: "exec result with unknown outcome",
    schema: "ExecResult",
    value: { stdout: "", stderr: "", code: 0, outcome: "crashed" },
    failingPath: ["outcome"],
  },
  { name: "health not ok", schema: "HealthResponse", value: { ok: false }, failingPath: ["ok"] },
  {
    name: "health with a negative warm pool count",
    schema: "HealthResponse",
    value: { ok: true, warmPool: { target: 4, ready: -1, starting: 0 } },
    failingPath: ["warmPool", "ready"],
  },
  {
    name: "sandbox limit of zero",
    schema: "HealthResponse",
    value: { ok: true, sandbox: { processes: { max: 0, by: "cgroup-v2" } } },
    failingPath: ["sandbox", "processes", "max"],
  },
  {
    name: "sandbox limit without mechanism",
    schema: "SandboxReport",
    value: { memoryBytes: { max: 1024 } },
    failingPath: ["memoryBytes", "by"],
  },
  {
    name: "error body with unknown code",
    schema: "ErrorBody",
    value: { error: "x", code: "teapot" },
    failingPath: ["code"],
  },
  {
    name: "secret name that is no env name",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "true", secrets: ["GH-TOKEN"] },
    failingPath: ["secrets", 0],
  },
  {
    name: "network policy of an unknown kind",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "true", network: "internet" },
    failingPath: ["network"],
  },
  {
    name: "host pattern with a scheme",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "true", network: { allow: ["https://pypi.org"] } },
    failingPath: ["network", "allow", 0],
  },
  {
    name: "empty allowlist",
    schema: "NetworkPolicy",
    value: { allow: [] },
    failingPath: ["allow"],
  },
  {
    name: "host pattern with port 0",
    schema: "HostPattern",
    value: "example.com:0",
    failingPath: [],
  },
  {
    name: "stdin that is not base64",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "cat", stdin: { base64: "not base64!" } },
    failingPath: ["stdin", "base64"],
  },
  {
    name: "error body without message",
    schema: "ErrorBody",
    value: { code: "internal" },
    failingPath: ["error"],
  },
  {
    name: "cancel request with invalid id",
    schema: "CancelRequest",
    value: { sandboxId: "-x" },
    failingPath: ["sandboxId"],
  },
  {
    name: "stream event of unknown type",
    schema: "StreamEvent",
    value: { type: "progress", data: "x" },
    failingPath: ["type"],
  },
  {
    name: "output event with zero skippedBytes",
    schema: "StreamEvent",
    value: { type: "stdout", data: "x", skippedBytes: 0 },
    failingPath: ["skippedBytes"],
  },
  {
    name: "admission with a fractional queue",
    schema: "Admission",
    value: { ...admission, queued: 1.5 },
    failingPath: ["queued"],
  },
  {
    name: "exit event with invalid result",
    schema: "StreamEvent",
    value: { type: "exit", result: { stdout: "" } },
    failingPath: ["result", "stderr"],
  },
  {
    name: "exec request with a string detach",
    schema: "ExecRequest",
    value: { sandboxId: "a", command: "true", detach: "yes" },
    failingPath: ["detach"],
  },
  {
    name: "call status of an unknown state",
    schema: "CallStatus",
    value: { sandboxId: "a", state: "lost" },
    failingPath: ["state"],
  },
  {
    name: "call status with an invalid result",
    schema: "CallStatus",
    value: { sandboxId: "a", state: "finished", result: { stdout: "", stderr: "" } },
    failingPath: ["result", "code"],
  },
  {
    name: "call status with a negative remembered time",
    schema: "CallStatus",
    value: { sandboxId: "a", state: "unknown", instance: "i", rememberedSeconds: -1 },
    failingPath: ["rememberedSeconds"],
  },
  {
    name: "call status with an empty instance",
    schema: "CallStatus",
    value: { sandboxId: "a", state: "unknown", instance: "" },
    failingPath: ["instance"],
  },
  {
    name: "health with a numeric instance",
    schema: "HealthResponse",
    value: { ok: true, instance: 7 },
    failingPath: ["instance"],
  },
  {
    name: "durable report with a negative time to keep",
    schema: "DurableReport",
    value: { ...fullHealthResponse.durable, keptSeconds: -1 },
    failingPath: ["keptSeconds"],
  },
];
