import Ajv2020 from "ajv/dist/2020.js";
import { describe, expect, it } from "vitest";
import { type Fixture, invalidFixtures, validFixtures } from "../src/fixtures.js";
import { jsonSchemas, wireSchemas } from "../src/index.js";

const ajv = new Ajv2020({ strict: true, allErrors: true });
for (const schema of Object.values(jsonSchemas())) ajv.addSchema(schema);
const ajvValidate = (fixture: Fixture) => {
  const validate = ajv.getSchema(`urn:remote-task:protocol:v1:${fixture.schema}`);
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
