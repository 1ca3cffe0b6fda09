import {
  cancelResponseSchema,
  ERROR_STATUS,
  errorBodySchema,
  execResultSchema,
  healthResponseSchema,
} from "@remote-task/protocol";
import { referenceExecRequest } from "@remote-task/protocol/fixtures";
import fc from "fast-check";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type EmbeddedBridge, startEmbeddedBridge } from "../src/node.js";
import { createFakeBackend } from "../src/testing/index.js";
import { memoryLogger } from "./helpers.js";

let bridge: EmbeddedBridge;
const logger = memoryLogger();
beforeAll(async () => {
  bridge = await startEmbeddedBridge({
    backend: createFakeBackend(),
    logger,
    limits: { maxRequestBytes: 4_096, maxTimeoutSeconds: 2 },
  });
});
afterAll(async () => {
  await bridge.close();
});

const printable = fc.string({
  unit: fc.constantFrom(..." !\"#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~é"),
});
const headerValue = fc.string({
  unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
  maxLength: 60,
});

const execLike = fc.record(
  {
    sandboxId: fc.oneof(
      fc.constantFrom("a", "mikan-task-1", "-x", "A", ""),
      printable,
      fc.integer(),
    ),
    command: fc.oneof(
      fc.constantFrom("echo hi", "exit 3", "pwd", ""),
      printable,
      fc.constant(null),
    ),
    timeoutSeconds: fc.oneof(fc.double(), fc.integer(), printable),
    cwd: fc.oneof(fc.constantFrom("/workspace", "relative", "/"), printable),
    env: fc.oneof(fc.dictionary(printable, fc.oneof(printable, fc.integer())), fc.anything()),
    maxOutputBytes: fc.oneof(fc.integer(), fc.double()),
    extra: fc.anything(),
  },
  { requiredKeys: [] },
);

const body = fc.oneof(
  execLike.map((v) => JSON.stringify(v)),
  fc.jsonValue().map((v) => JSON.stringify(v)),
  fc.anything().map((v) => {
    try {
      return JSON.stringify(v) ?? "undefined";
    } catch {
      return "{";
    }
  }),
  printable,
  fc.constant(JSON.stringify(referenceExecRequest)),
  fc.constant("x".repeat(5_000)),
);

const requestArb = fc.record({
  method: fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "FROB"),
  path: fc.oneof(
    fc.constantFrom(
      "/health",
      "/exec",
      "/cancel",
      "/openapi.json",
      "/",
      "/exec/",
      "/EXEC",
      "/health?x=1",
    ),
    printable.map((p) => `/${encodeURIComponent(p)}`),
  ),
  auth: fc.oneof(
    fc.constant("valid"),
    fc.constant("none"),
    headerValue,
    headerValue.map((v) => `Bearer ${v}`),
  ),
  contentType: fc.option(
    fc.oneof(
      fc.constantFrom(
        "application/json",
        "text/plain",
        "application/json; charset=utf-8",
        "multipart/form-data",
      ),
      headerValue,
    ),
  ),
  accept: fc.option(
    fc.oneof(fc.constantFrom("text/event-stream", "*/*", "application/json"), headerValue),
  ),
  body,
});

it("answers any request with a protocol-valid body and never a 500", async () => {
  await fc.assert(
    fc.asyncProperty(requestArb, async (r) => {
      const headers = new Headers();
      if (r.auth === "valid") headers.set("authorization", `Bearer ${bridge.token}`);
      else if (r.auth !== "none") headers.set("authorization", r.auth);
      if (r.contentType !== null) headers.set("content-type", r.contentType);
      if (r.accept !== null) headers.set("accept", r.accept);
      const hasBody = r.method !== "GET" && r.method !== "HEAD";
      const response = await fetch(`${bridge.url}${r.path}`, {
        method: r.method,
        headers,
        ...(hasBody ? { body: r.body } : {}),
      });
      expect(response.status).not.toBe(500);
      expect(response.status).toBeLessThan(600);
      if (r.method === "HEAD") {
        await response.arrayBuffer();
        return;
      }
      const text = await response.text();
      if (response.status >= 400) {
        const error = errorBodySchema.parse(JSON.parse(text));
        expect(response.status).toBe(ERROR_STATUS[error.code]);
        return;
      }
      expect(response.status).toBe(200);
      const type = response.headers.get("content-type") ?? "";
      if (type.startsWith("text/event-stream")) {
        expect(text).toMatch(/^event: start\n/);
        expect(text).toMatch(/event: (exit|error)\ndata: .*\n\n$/);
        return;
      }
      const json: unknown = JSON.parse(text);
      const path = new URL(r.path, "http://x").pathname;
      if (path === "/exec") execResultSchema.parse(json);
      else if (path === "/cancel") cancelResponseSchema.parse(json);
      else if (path === "/health") healthResponseSchema.parse(json);
      else expect(json).toHaveProperty("openapi");
    }),
    { numRuns: 200 },
  );
  expect(logger.entries.filter((e) => e.event === "internal_error")).toEqual([]);
}, 60_000);
