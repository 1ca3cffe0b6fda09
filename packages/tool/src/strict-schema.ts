/**
 * OpenAI's strict mode, shared by the function-calling and Agents SDK adapters: every property
 * required, `timeout` nullable (null means the default), no extra properties, so the model always
 * produces valid arguments; and the `timeout: null` it then sends, read as "the default".
 */
import type { JsonSchemaObject } from "./schema.js";

/** The parameters in strict mode. */
export function strictSchema(schema: JsonSchemaObject) {
  const properties = schema.properties as Record<string, { description?: string }>;
  return {
    type: "object" as const,
    properties: {
      command: { type: "string", description: properties.command?.description },
      timeout: { type: ["number", "null"], description: properties.timeout?.description },
    },
    required: ["command", "timeout"],
    additionalProperties: false as const,
  };
}

/** Arguments with a `timeout: null` left out, so the tool's default applies. */
export function withoutNullTimeout(value: unknown): unknown {
  if (value && typeof value === "object" && "timeout" in value && value.timeout === null) {
    const { timeout: _null, ...rest } = value;
    return rest;
  }
  return value;
}
