/**
 * OpenAI's strict mode, shared by the function-calling and Agents SDK adapters: every property
 * required, `timeout` (and `secrets`, where the tool offers secrets) nullable, null meaning "left
 * out", no extra properties, so the model always produces valid arguments; and the nulls it then
 * sends, read as left out.
 */
import type { JsonSchemaObject } from "./schema.js";

/** One property of the strict schema. */
interface StrictProperty {
  type: string | string[];
  description?: string | undefined;
  items?: { type: string; enum: string[] } | undefined;
}

/** The parameters in strict mode. */
export function strictSchema(schema: JsonSchemaObject) {
  const properties = schema.properties as Record<
    string,
    { description?: string; items?: { enum?: string[] } }
  >;
  const strict: Record<string, StrictProperty> = {
    command: { type: "string", description: properties.command?.description },
    timeout: { type: ["number", "null"], description: properties.timeout?.description },
  };
  const secrets = properties.secrets;
  if (secrets !== undefined) {
    strict.secrets = {
      type: ["array", "null"],
      description: secrets.description,
      items: { type: "string", enum: [...(secrets.items?.enum ?? [])] },
    };
  }
  return {
    type: "object" as const,
    properties: strict,
    required: Object.keys(strict),
    additionalProperties: false as const,
  };
}

/** Arguments with a `timeout: null` or `secrets: null` left out, so the tool's defaults apply. */
export function withoutNullArguments(value: unknown): unknown {
  if (!value || typeof value !== "object") return value;
  const entries = Object.entries(value).filter(
    ([key, field]) => !((key === "timeout" || key === "secrets") && field === null),
  );
  return Object.fromEntries(entries);
}
