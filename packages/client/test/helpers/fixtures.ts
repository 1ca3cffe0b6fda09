import type { ErrorBody, ExecResult, HealthResponse, StreamEvent } from "@remote-task/protocol";
import {
  errorBodySchema,
  execResultSchema,
  healthResponseSchema,
  streamEventSchema,
} from "@remote-task/protocol";
import { referenceExecResponse, validFixtures } from "@remote-task/protocol/fixtures";

/** A valid protocol fixture by name, parsed by its schema so mocks can only send real shapes. */
function fixture(name: string): unknown {
  const found = validFixtures.find((f) => f.name === name);
  if (found === undefined) throw new Error(`no fixture named ${name}`);
  return structuredClone(found.value);
}

export const fullResult: ExecResult = execResultSchema.parse(
  fixture("exec result with extensions"),
);
export const timedOutResult: ExecResult = execResultSchema.parse(fixture("timed-out exec result"));
export const referenceResult: ExecResult = execResultSchema.parse(referenceExecResponse);
export const fullHealth: HealthResponse = healthResponseSchema.parse(fixture("full health"));
export const referenceHealth: HealthResponse = healthResponseSchema.parse(
  fixture("reference health"),
);
export const invalidRequestBody: ErrorBody = errorBodySchema.parse(fixture("error body"));
export const capacityBody: ErrorBody = errorBodySchema.parse(fixture("capacity error body"));

/** An error body for `code`, checked against the schema. */
export function errorBody(code: ErrorBody["code"], extra: Partial<ErrorBody> = {}): ErrorBody {
  return errorBodySchema.parse({ error: `bridge says ${code}`, code, ...extra });
}

/** An exec result derived from the full fixture, checked against the schema. */
export function execResult(overrides: Partial<ExecResult> = {}): ExecResult {
  return execResultSchema.parse({ ...fullResult, ...overrides });
}

/** A stream event, checked against the schema. */
export function event(value: StreamEvent): StreamEvent {
  return streamEventSchema.parse(value);
}

/** The SSE wire form of `value` (event name = type). */
export function sse(value: StreamEvent): string {
  const checked = event(value);
  return `event: ${checked.type}\ndata: ${JSON.stringify(checked)}\n\n`;
}
