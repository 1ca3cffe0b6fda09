import { BRIDGE_TEXTS, fromBase64, issuesInWords } from "@remote-task/internal";
import {
  type CancelResponse,
  cancelRequestSchema,
  DEFAULT_TIMEOUT_SECONDS,
  type ExecRequest,
  execRequestSchema,
  type Issue,
  type Limits,
} from "@remote-task/protocol";
import { backendErrorResponse } from "./backend-errors.js";
import { assertJsonContentType, parseJsonBody, readBodyLimited, validate } from "./body.js";
import type { CallOutcome, ExecCall } from "./call.js";
import type { CallRegistry } from "./calls.js";
import { outputCapFor } from "./limits.js";
import { callNetwork, type NetworkSettings } from "./network.js";
import { answerExisting, type BridgeInstance } from "./reattach.js";
import { HttpError, invalidRequest, jsonResponse } from "./responses.js";
import {
  type CallSecret,
  callSecrets,
  type DeclaredSecret,
  type SecretReader,
  withSecretHosts,
} from "./secrets.js";
import { callEventStream, eventStreamOf, startEvent } from "./sse.js";

/** What the `/exec` and `/cancel` routes need from the bridge. */
export interface ExecRoutesContext {
  calls: CallRegistry;
  /** The bridge instance that answers (durable calls' statuses carry its id). */
  instance: BridgeInstance;
  limits: Limits;
  defaultCwd: string;
  heartbeatIntervalMs: number;
  /** Most bytes of events queued for a streamed call's reader before output is skipped. */
  streamBufferBytes: number;
  /** The network policies the bridge enforces; undefined when its backend controls none. */
  network: NetworkSettings | undefined;
  /** The secrets the deployer declared (empty: none). */
  secrets: readonly DeclaredSecret[];
  /** Reads a secret's value when a call asks for it. */
  readSecret: SecretReader;
  /** Ms a call without `detach` runs on once its caller left (durable calls). */
  graceMs: number;
}

const encoder = new TextEncoder();

function utf8Length(text: string): number {
  return encoder.encode(text).byteLength;
}

/**
 * `body` with its `sandboxId` in lower case, as the reference bridge takes ids (the sandbox SDK's
 * `normalizeId`): `MyTask-1` names the sandbox `mytask-1`, for `/exec` and `/cancel` alike, and
 * answers carry the lower-case id. Only ASCII letters are lowered; any other character outside
 * the id pattern is still refused.
 */
function lowerCaseSandboxId(body: unknown): unknown {
  if (typeof body !== "object" || body === null) return body;
  const fields = body as { sandboxId?: unknown };
  if (typeof fields.sandboxId === "string") {
    fields.sandboxId = fields.sandboxId.replace(/[A-Z]+/g, (letters) => letters.toLowerCase());
  }
  return body;
}

/** Reads a JSON request body (within `maxRequestBytes`), its sandbox id lower-cased. */
async function readJsonRequest(limits: Limits, request: Request): Promise<unknown> {
  assertJsonContentType(request);
  return lowerCaseSandboxId(parseJsonBody(await readBodyLimited(request, limits.maxRequestBytes)));
}

/** Parses and validates an `/exec` body against the protocol schema and the bridge limits. */
async function readExecRequest(limits: Limits, request: Request): Promise<ExecRequest> {
  const body = await readJsonRequest(limits, request);
  const exec = validate(execRequestSchema, body, "Exec request");
  const issues: Issue[] = [];
  if (utf8Length(exec.command) > limits.maxCommandBytes) {
    issues.push({
      path: ["command"],
      message: BRIDGE_TEXTS.commandTooLong(limits.maxCommandBytes),
    });
  }
  if (exec.timeoutSeconds !== undefined && exec.timeoutSeconds > limits.maxTimeoutSeconds) {
    issues.push({
      path: ["timeoutSeconds"],
      message: BRIDGE_TEXTS.timeoutTooLong(limits.maxTimeoutSeconds),
    });
  }
  const env = Object.entries(exec.env ?? {});
  if (env.length > limits.maxEnvEntries) {
    issues.push({ path: ["env"], message: BRIDGE_TEXTS.tooManyEnv(limits.maxEnvEntries) });
  }
  for (const [name, value] of env) {
    if (utf8Length(name) + utf8Length(value) > limits.maxEnvEntryBytes) {
      issues.push({
        path: ["env", name],
        message: BRIDGE_TEXTS.envEntryTooLong(limits.maxEnvEntryBytes),
      });
    }
  }
  if (issues.length > 0)
    throw invalidRequest(BRIDGE_TEXTS.overLimits(issuesInWords(issues)), issues);
  return exec;
}

/** The bytes of a request's `stdin`; refuses (413) more than `maxStdinBytes`. */
function stdinBytes(stdin: ExecRequest["stdin"], limits: Limits): Uint8Array | undefined {
  if (stdin === undefined) return undefined;
  let bytes: Uint8Array;
  if (typeof stdin === "string") {
    bytes = encoder.encode(stdin);
  } else {
    bytes = fromBase64(stdin.base64);
  }
  const maxBytes = limits.maxStdinBytes ?? 0;
  if (bytes.byteLength > maxBytes) {
    throw new HttpError(
      "payload_too_large",
      BRIDGE_TEXTS.stdinTooLarge(bytes.byteLength, maxBytes),
    );
  }
  return bytes.byteLength === 0 ? undefined : bytes;
}

/** Whether the request asks for an event stream (`Accept: text/event-stream`). */
export function wantsEventStream(request: Request): boolean {
  const accept = request.headers.get("accept") ?? "";
  return accept
    .split(",")
    .some((part) => part.split(";")[0]?.trim().toLowerCase() === "text/event-stream");
}

function outcomeResponse(outcome: CallOutcome): Response {
  return outcome.kind === "result"
    ? jsonResponse(outcome.result)
    : backendErrorResponse(outcome.error);
}

/**
 * `POST /exec`: refuses at once when the bridge has no room, else validates the request, opens a
 * call for it, and answers with the call's result (JSON) or its event stream. A call that fails
 * to start answers with an HTTP error either way.
 */
export async function handleExec(
  context: ExecRoutesContext,
  request: Request,
  waitUntil: ((promise: Promise<unknown>) => void) | undefined,
  client?: string | undefined,
): Promise<Response> {
  const { limits } = context;
  const place = context.calls.reserve(client);
  let exec: Awaited<ReturnType<typeof readExecRequest>>;
  let network: ReturnType<typeof callNetwork>;
  let stdin: ReturnType<typeof stdinBytes>;
  let secrets: CallSecret[];
  try {
    exec = await readExecRequest(limits, request);
    network = callNetwork(context.network, exec.network);
    stdin = stdinBytes(exec.stdin, limits);
    secrets = await callSecrets(context.secrets, exec.secrets, context.readSecret);
  } finally {
    // Given back just before the call takes a place of its own (or the request is refused).
    place.release();
  }
  const streamed = wantsEventStream(request);
  const durable = context.calls.kept !== undefined;
  if (exec.detach === true && !durable) {
    throw invalidRequest(BRIDGE_TEXTS.noDetach, [
      { path: ["detach"], message: BRIDGE_TEXTS.noDetach },
    ]);
  }
  // The id of a call in flight or kept is that call: answered as such, never run again.
  const found = durable ? context.calls.lookup(exec.sandboxId) : undefined;
  if (found !== undefined) return answerExisting(context, found, exec, request, streamed);
  const timeoutSeconds =
    exec.timeoutSeconds ?? Math.min(DEFAULT_TIMEOUT_SECONDS, limits.maxTimeoutSeconds);
  const call = context.calls.open({
    sandboxId: exec.sandboxId,
    command: exec.command,
    cwd: exec.cwd ?? context.defaultCwd,
    env: {
      ...exec.env,
      ...Object.fromEntries(secrets.map((secret) => [secret.name, secret.placeholder])),
    },
    network: withSecretHosts(network, context.secrets, exec.secrets ?? []),
    secrets,
    callersAllowlist:
      exec.network !== undefined &&
      typeof network === "object" &&
      context.network?.ceiling === "open",
    stdin,
    timeoutMs: Math.round(timeoutSeconds * 1000),
    cap: outputCapFor(limits, exec.maxOutputBytes),
    streamed,
    disconnect: request.signal,
    waitUntil,
    client,
    detach: exec.detach === true,
    graceMs: context.graceMs,
    replay: durable,
  });
  if (call.detached) {
    // Every failure of a call is its outcome; this never rejects, but must never crash a host.
    const running = runDetached(call).catch(() => {});
    if (waitUntil !== undefined) waitUntil(running);
    const status = { sandboxId: call.sandboxId, state: call.state, instance: context.instance.id };
    return jsonResponse(status, 202);
  }
  const early = await call.started();
  if (early !== undefined) {
    if (streamed && early.kind === "result") {
      return eventStreamOf([startEvent(call.sandboxId), { type: "exit", result: early.result }]);
    }
    return outcomeResponse(early);
  }
  if (streamed) {
    return callEventStream(call, context.heartbeatIntervalMs, context.streamBufferBytes);
  }
  return outcomeResponse(await call.finish());
}

/** Runs a detached call to its end with nobody reading it; its outcome is kept when it ends. */
async function runDetached(call: ExecCall): Promise<void> {
  const early = await call.started();
  if (early === undefined) await call.finish();
}

/** `POST /cancel`: stops the named call and destroys its sandbox (idempotent). */
export async function handleCancel(
  context: ExecRoutesContext,
  request: Request,
): Promise<Response> {
  const body = await readJsonRequest(context.limits, request);
  const { sandboxId } = validate(cancelRequestSchema, body, "Cancel request");
  const cancelled = await context.calls.cancel(sandboxId);
  const answer: CancelResponse = { ok: true, sandboxId, cancelled };
  return jsonResponse(answer);
}
