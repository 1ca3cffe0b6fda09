import { DEFAULT_TIMEOUT_SECONDS, execRequestSchema } from "@remote-task/protocol";
import * as z from "zod";

/** What the model reads about the `secrets` parameter (shown only when the integrator offers some). */
export const SECRETS_PARAMETER_DESCRIPTION =
  "Names of credentials available as environment variables inside the sandbox; their values are never visible (the variable holds a placeholder that the sandbox's network proxy swaps for the value only in request headers to the credential's own hosts). Name only those the command uses.";

/** The schema of `secrets`: a list of the offered names, each refused in words the model can act on. */
function secretsParameter(names: readonly [string, ...string[]]) {
  const offered = names.join(", ");
  return z
    .array(
      z.enum(names, {
        error: (issue) =>
          `${JSON.stringify(issue.input)} is not a secret this tool offers; it offers ${offered}`,
      }),
    )
    .optional()
    .describe(SECRETS_PARAMETER_DESCRIPTION);
}

/**
 * The parameters of `remote_task`, derived from the protocol's exec request so the two cannot
 * drift: `command` and `timeout`, and `secrets` (an enum of exactly the names given) only when
 * `secrets` names some. There is deliberately no `env`: credentials stay on the host; a secret
 * reaches the command only as a placeholder.
 */
export function remoteTaskParameters(
  defaultTimeoutSeconds: number = DEFAULT_TIMEOUT_SECONDS,
  secrets: readonly string[] = [],
) {
  const shape = {
    command: execRequestSchema.shape.command.describe(
      "The shell command to run (with `bash -c`, or `/bin/sh -c` where a sandbox has no bash). Put all input in the command itself.",
    ),
    timeout: execRequestSchema.shape.timeoutSeconds
      .unwrap()
      .default(defaultTimeoutSeconds)
      .describe(
        `Seconds the command may run before it is stopped (default ${defaultTimeoutSeconds}).`,
      ),
  };
  const [first, ...rest] = secrets;
  // Without secrets the schema is the reference tool's, unchanged: `{command, timeout?}`.
  if (first === undefined) return z.object(shape) as z.ZodObject<ParametersShape>;
  return z.object({
    ...shape,
    secrets: secretsParameter([first, ...rest]),
  }) as z.ZodObject<ParametersShape>;
}

/**
 * The shape of the parameters. `secrets` is there only when the integrator offers secrets (typed
 * as always there, so its arguments type as `secrets?: string[]`).
 */
type ParametersShape = {
  command: typeof execRequestSchema.shape.command;
  timeout: z.ZodDefault<z.ZodNumber>;
  secrets: z.ZodOptional<z.ZodArray<z.ZodEnum<Record<string, string>>>>;
};

export type RemoteTaskParametersSchema = z.ZodObject<ParametersShape>;

/** What a caller passes: `timeout` may be left out. */
export type RemoteTaskInput = z.input<RemoteTaskParametersSchema>;

/** The parameters after validation, with the default timeout filled in. */
export type RemoteTaskArgs = z.output<RemoteTaskParametersSchema>;

/** A plain JSON Schema object (draft 2020-12 keywords, no `$schema` key). */
export type JsonSchemaObject = { readonly [key: string]: unknown };

/** The JSON Schema of the parameters as a caller sees them (`timeout` optional). */
export function remoteTaskJsonSchema(schema: RemoteTaskParametersSchema): JsonSchemaObject {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, { io: "input" });
  return rest;
}
