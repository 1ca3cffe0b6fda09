import Ajv2020 from "ajv/dist/2020.js";
import { describe, expect, it } from "vitest";
import { type Fixture, invalidFixtures, validFixtures } from "../src/fixtures.js";
import { jsonSchemas, PROTOCOL_VERSION, wireSchemas } from "../src/index.js";

const ajv = new Ajv2020({ strict: true, allErrors: true });
for (const schema of Object.values(jsonSchemas())) ajv.addSchema(schema);
const ajvValidate = (fixture: Fixture) => {
  const validate = ajv.getSchema(`urn:remote-task:protocol:v${PROTOCOL_VERSION}:${fixture.schema}`);
  if (!validate) throw new Error(`no JSON Schema for ${fixture.schema}`);
  return validate(fixture.value);
};

describe("valid fixtures", () => {
  it.each(validFixtures.map((f) => [f.name, f] as const))("%s parses", (_, fixture) => {
    const result = wireSchemas[fixture.schema].safeParse(fixture.value);
    expect(result.error?.issues).toBeUndefined();
    expect(result.success).toBe(true);
  });

  it.each(validFixtures.map((f) => [f.name, f] as const))(
    "%s passes the emitted JSON Schema",
    (_, fixture) => {
      expect(ajvValidate(fixture)).toBe(true);
    },
  );
});

describe("invalid fixtures", () => {
  it.each(invalidFixtures.map((f) => [f.name, f] as const))(
    "%s fails and names the path",
    (_, fixture) => {
      const result = wireSchemas[fixture.schema].safeParse(fixture.value);
      expect(result.success).toBe(false);
      const paths = result.error?.issues.map((issue) => issue.path) ?? [];
      expect(paths).toContainEqual(fixture.failingPath);
    },
  );

  it.each(invalidFixtures.map((f) => [f.name, f] as const))(
    "%s fails the emitted JSON Schema",
    (_, fixture) => {
      expect(ajvValidate(fixture)).toBe(false);
    },
  );
});

it("covers every wire schema with at least one valid fixture", () => {
  const covered = new Set(validFixtures.map((f) => f.schema));
  const uncovered = Object.keys(wireSchemas).filter(
    (name) => !covered.has(name as Fixture["schema"]),
  );
  expect(
    uncovered.filter((n) => !["SandboxId", "Outcome", "ErrorCode", "Issue"].includes(n)),
  ).toEqual([]);
});

it("an output event with skippedBytes still reads as the output event of the old shape", async () => {
  const { z } = await import("zod");
  // Version 1's output events before skippedBytes existed, as a reader compiled then has them.
  const oldOutputEvent = z.discriminatedUnion("type", [
    z.object({ type: z.literal("stdout"), data: z.string() }),
    z.object({ type: z.literal("stderr"), data: z.string() }),
  ]);
  // Its published JSON Schema, generated as the package generates them (input side).
  const oldJsonSchema = z.toJSONSchema(oldOutputEvent, { io: "input" });
  const withSkipped = validFixtures.filter(
    (fixture) => (fixture.value as { skippedBytes?: number }).skippedBytes !== undefined,
  );
  expect(withSkipped.length).toBeGreaterThan(0);
  for (const fixture of withSkipped) {
    const value = fixture.value as { type: string; data: string };
    expect(oldOutputEvent.parse(value)).toEqual({ type: value.type, data: value.data });
    expect(new Ajv2020({ strict: true }).validate(oldJsonSchema, value), fixture.name).toBe(true);
  }
});
