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
function event(value: StreamEvent): StreamEvent {
  return streamEventSchema.parse(value);
}

/** The SSE wire form of `value` (event name = type). */
export function sse(value: StreamEvent): string {
  const checked = event(value);
  return `event: ${checked.type}\ndata: ${JSON.stringify(checked)}\n\n`;
}

/**
 * The last `maxBytes` bytes of `text` as UTF-8, without a character cut at the start: what a
 * bridge (or the client, for an answer too large to hold) keeps of an output.
 */
export function byteTail(text: string, maxBytes: number): string {
  const bytes = new TextEncoder().encode(text);
  let start = Math.max(0, bytes.byteLength - maxBytes);
  while (start > 0 && start < bytes.byteLength && ((bytes[start] ?? 0) & 0xc0) === 0x80) start++;
  return new TextDecoder("utf-8", { ignoreBOM: true }).decode(bytes.subarray(start));
}
