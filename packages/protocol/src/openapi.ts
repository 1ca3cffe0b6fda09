import * as z from "zod";
import { PROTOCOL_VERSION } from "./constants.js";
import { sandboxIdSchema } from "./ids.js";
import {
  admissionSchema,
  callStateSchema,
  callStatusSchema,
  cancelRequestSchema,
  cancelResponseSchema,
  durableReportSchema,
  type ErrorCode,
  enforcedLimitSchema,
  errorBodySchema,
  errorCodeSchema,
  errorStatuses,
  execRequestSchema,
  execResultSchema,
  healthResponseSchema,
  hostPatternSchema,
  issueSchema,
  limitsSchema,
  networkPolicySchema,
  networkReportSchema,
  outcomeSchema,
  sandboxReportSchema,
  secretReportSchema,
  streamEventSchema,
  warmPoolSchema,
} from "./schemas.js";

/** Every named wire schema, keyed by the name used in JSON Schema and OpenAPI documents. */
export const wireSchemas = {
  SandboxId: sandboxIdSchema,
  Limits: limitsSchema,
  WarmPool: warmPoolSchema,
  Admission: admissionSchema,
  HostPattern: hostPatternSchema,
  NetworkPolicy: networkPolicySchema,
  NetworkReport: networkReportSchema,
  SecretReport: secretReportSchema,
  EnforcedLimit: enforcedLimitSchema,
  SandboxReport: sandboxReportSchema,
  DurableReport: durableReportSchema,
  HealthResponse: healthResponseSchema,
  ExecRequest: execRequestSchema,
  Outcome: outcomeSchema,
  ExecResult: execResultSchema,
  ErrorCode: errorCodeSchema,
  Issue: issueSchema,
  ErrorBody: errorBodySchema,
  CancelRequest: cancelRequestSchema,
  CancelResponse: cancelResponseSchema,
  StreamEvent: streamEventSchema,
  CallState: callStateSchema,
  CallStatus: callStatusSchema,
} as const;

export type WireSchemaName = keyof typeof wireSchemas;
type JsonSchema = Record<string, unknown>;

function registry(uri: (id: string) => string): Record<string, JsonSchema> {
  const reg = z.registry<{ id: string }>();
  for (const [id, schema] of Object.entries(wireSchemas)) reg.add(schema, { id });
  const { schemas } = z.toJSONSchema(reg, { io: "input", uri, unrepresentable: "throw" });
  return schemas as Record<string, JsonSchema>;
}

/** A standalone JSON Schema (draft 2020-12) for each wire message, cross-referenced by file name. */
export function jsonSchemas(): Record<WireSchemaName, JsonSchema> {
  return registry((id) => `urn:remote-task:protocol:v${PROTOCOL_VERSION}:${id}`) as Record<
    WireSchemaName,
    JsonSchema
  >;
}

function errorResponses(codes: ErrorCode[]): Record<string, unknown> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of codes) {
    for (const status of errorStatuses(code)) {
      byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
    }
  }
  return Object.fromEntries(
    [...byStatus].map(([status, list]) => [
      String(status),
      {
        description: `Error: ${list.map((c) => `\`${c}\``).join(", ")}`,
        content: { "application/json": { schema: { $ref: "#/components/schemas/ErrorBody" } } },
      },
    ]),
  );
}

const json = (name: WireSchemaName) => ({
  "application/json": { schema: { $ref: `#/components/schemas/${name}` } },
});

/** The OpenAPI 3.1 document of the bridge HTTP API, generated from the wire schemas. */
export function openApiDocument(): Record<string, unknown> {
  const schemas = registry((id) => `#/components/schemas/${id}`);
  for (const schema of Object.values(schemas)) delete schema.$schema;
  return {
    openapi: "3.1.0",
    info: {
      title: "remote-task bridge",
      version: String(PROTOCOL_VERSION),
      description:
        "Run one shell command in a fresh, throwaway sandbox and get its output back. " +
        "Every route but this document needs `Authorization: Bearer <token>`.",
    },
    security: [{ bearer: [] }],
    paths: {
      "/health": {
        get: {
          operationId: "health",
          summary: "Bridge status, protocol version, backend, isolation, limits and load.",
          responses: {
            "200": { description: "The bridge is up.", content: json("HealthResponse") },
            ...errorResponses(["unauthorized", "not_configured"]),
          },
        },
      },
      "/exec": {
        post: {
          operationId: "exec",
          summary:
            "Run a command in a fresh sandbox for `sandboxId`, destroyed when the call ends.",
          description:
            "Answers JSON by default. With `Accept: text/event-stream` it answers Server-Sent " +
            "Events whose `event` name equals the `type` of the JSON `data`: `start`, `stdout`, " +
            "`stderr`, `heartbeat` (at least every 15 s), then `exit` (the result) or `error`. " +
            "Output a reader had no room for is skipped and counted in the next output event's " +
            "`skippedBytes`; the result keeps it. A 429 or 503 `capacity_exceeded` means the " +
            "command did not run: send the same request again after `Retry-After`. A 403 " +
            "`forbidden` means the request asked for a wider `network` than the bridge allows. " +
            "With `detach: true` (protocol 3) it answers 202 with the call's `CallStatus` at once. " +
            "The `sandboxId` of a call in flight or whose outcome is kept is never run again: the " +
            "answer is that call's (its result, or its stream re-attached from the start); one of " +
            "a call whose outcome expired is 409 `conflict`.",
          requestBody: { required: true, content: json("ExecRequest") },
          responses: {
            "200": {
              description: "The command ended (a non-zero exit or a timeout is still 200).",
              content: {
                ...json("ExecResult"),
                "text/event-stream": { schema: { $ref: "#/components/schemas/StreamEvent" } },
              },
            },
            "202": {
              description: "A detached call was accepted (protocol 3).",
              content: json("CallStatus"),
            },
            ...errorResponses([
              "invalid_request",
              "unauthorized",
              "forbidden",
              "conflict",
              "payload_too_large",
              "sandbox_error",
              "capacity_exceeded",
              "not_configured",
              "internal",
            ]),
          },
        },
      },
      "/exec/{sandboxId}": {
        get: {
          operationId: "callStatus",
          summary: "A call's state and outcome, or its event stream re-attached (protocol 3).",
          description:
            "Answers the call's `CallStatus` as JSON: `queued`, `running`, `finished` (with its " +
            "`result` or `error`), `expired` or `unknown`. `waitSeconds` waits up to that long " +
            "for the call to end. With `Accept: text/event-stream` it re-attaches: `start`, the " +
            "retained output from byte `stdoutFrom` of stdout and `stderrFrom` of stderr (what " +
            "is no longer retained is counted in `skippedBytes`), then the live output, " +
            "heartbeats and `exit` (or `error`), as from `POST /exec`. An unknown or expired id " +
            "streams an `error` event with `not_found`. A call without `detach` whose caller " +
            "went away is kept running while a reader is attached.",
          parameters: [
            {
              name: "sandboxId",
              in: "path",
              required: true,
              schema: { $ref: "#/components/schemas/SandboxId" },
            },
            {
              name: "waitSeconds",
              in: "query",
              required: false,
              schema: { type: "number", minimum: 0 },
              description: "JSON: wait up to this long for the call to end (capped by the bridge).",
            },
            {
              name: "stdoutFrom",
              in: "query",
              required: false,
              schema: { type: "integer", minimum: 0 },
              description: "Event stream: the byte of stdout to replay from (default 0).",
            },
            {
              name: "stderrFrom",
              in: "query",
              required: false,
              schema: { type: "integer", minimum: 0 },
              description: "Event stream: the byte of stderr to replay from (default 0).",
            },
          ],
          responses: {
            "200": {
              description: "The call's state (an unknown or expired id is 200 too).",
              content: {
                ...json("CallStatus"),
                "text/event-stream": { schema: { $ref: "#/components/schemas/StreamEvent" } },
              },
            },
            ...errorResponses(["invalid_request", "unauthorized", "not_configured"]),
          },
        },
      },
      "/cancel": {
        post: {
          operationId: "cancel",
          summary: "Stop the command running for `sandboxId` and destroy its sandbox (idempotent).",
          requestBody: { required: true, content: json("CancelRequest") },
          responses: {
            "200": {
              description: "Cancelled, or nothing was running.",
              content: json("CancelResponse"),
            },
            ...errorResponses(["invalid_request", "unauthorized", "not_configured"]),
          },
        },
      },
      "/openapi.json": {
        get: {
          operationId: "openapi",
          summary: "This document.",
          security: [],
          responses: { "200": { description: "OpenAPI 3.1 document." } },
        },
      },
    },
    components: {
      schemas,
      securitySchemes: { bearer: { type: "http", scheme: "bearer" } },
    },
  };
}
