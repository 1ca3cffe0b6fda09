import { DEFAULT_TIMEOUT_SECONDS, execRequestSchema } from "@remote-task/protocol";
import * as z from "zod";

/**
 * The parameters of `remote_task`, derived from the protocol's exec request so the two cannot
 * drift: only `command` and `timeout`. There is deliberately no `env`: credentials stay on the host.
 */
export function remoteTaskParameters(defaultTimeoutSeconds: number = DEFAULT_TIMEOUT_SECONDS) {
  return z.object({
    command: execRequestSchema.shape.command.describe(
      "The shell command to run (with `bash -c`, or `/bin/sh -c` where a sandbox has no bash). Put all input in the command itself.",
    ),
    timeout: execRequestSchema.shape.timeoutSeconds
      .unwrap()
      .default(defaultTimeoutSeconds)
      .describe(
        `Seconds the command may run before it is stopped (default ${defaultTimeoutSeconds}).`,
      ),
  });
}

export type RemoteTaskParametersSchema = ReturnType<typeof remoteTaskParameters>;

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
