import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import { expect, it } from "vitest";
// @ts-expect-error: plain ESM helper shared with the build script, without type declarations.
import { renderProtocolMarkdown } from "../scripts/render-protocol-md.mjs";
import * as protocol from "../src/index.js";

it("PROTOCOL.md is the one generated from the schemas", () => {
  const committed = readFileSync(new URL("../PROTOCOL.md", import.meta.url), "utf8");
  expect(committed).toBe(renderProtocolMarkdown(protocol));
});

it("every $ref in the OpenAPI document resolves to a component", () => {
  const doc = protocol.openApiDocument();
  const refs = JSON.stringify(doc).match(/"\$ref":"[^"]+"/g) ?? [];
  const schemas = (doc.components as { schemas: Record<string, unknown> }).schemas;
  expect(refs.length).toBeGreaterThan(10);
  for (const ref of refs) {
    const name = ref.slice('"$ref":"#/components/schemas/'.length, -1);
    expect(schemas, ref).toHaveProperty(name);
  }
  expect(doc.openapi).toBe("3.1.0");
});

it("the OpenAPI component schemas validate the reference exchange", () => {
  const doc = protocol.openApiDocument();
  // The document is not itself a schema: only its component schemas are checked strictly by ajv.
  const ajv = new Ajv2020({ strictSchema: false });
  ajv.addSchema({ $id: "doc", ...doc });
  const validate = (name: string, value: unknown) =>
    ajv.validate({ $ref: `doc#/components/schemas/${name}` }, value);
  expect(validate("ExecRequest", { sandboxId: "mikan-task-1", command: "pwd" })).toBe(true);
  expect(validate("ExecRequest", { sandboxId: "mikan-task-1" })).toBe(false);
  expect(validate("ExecResult", { stdout: "", stderr: "", code: 0 })).toBe(true);
});

it("maps every error code to a 4xx or 5xx status", () => {
  for (const status of Object.values(protocol.ERROR_STATUS)) {
    expect(status).toBeGreaterThanOrEqual(400);
    expect(status).toBeLessThan(600);
  }
});

it("sends capacity_exceeded with 503 or 429 and every other code with its one status", () => {
  for (const code of Object.keys(protocol.ERROR_STATUS) as protocol.ErrorCode[]) {
    const statuses = protocol.errorStatuses(code);
    expect(statuses[0]).toBe(protocol.ERROR_STATUS[code]);
    expect(statuses).toEqual(code === "capacity_exceeded" ? [503, 429] : [statuses[0]]);
  }
  const paths = protocol.openApiDocument().paths as Record<
    string,
    { post: { responses: Record<string, { description: string }> } }
  >;
  const responses = paths["/exec"]?.post.responses;
  expect(responses?.["429"]?.description).toBe("Error: `capacity_exceeded`");
  expect(responses?.["503"]?.description).toContain("`capacity_exceeded`");
});
