import * as z from "zod";
import { DEFAULT_ID_PREFIX, SANDBOX_ID_MAX_LENGTH } from "./constants.js";

const SANDBOX_ID_PATTERN = /^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$/;
const UUID_LENGTH = 36;

/** A sandbox id: lowercase `[a-z0-9-]`, 1-63 characters, no leading or trailing `-`. */
export const sandboxIdSchema = z
  .string()
  .min(1, "sandboxId must not be empty")
  .max(SANDBOX_ID_MAX_LENGTH, `sandboxId must be at most ${SANDBOX_ID_MAX_LENGTH} characters`)
  .regex(
    SANDBOX_ID_PATTERN,
    "sandboxId must be lowercase letters, digits and '-', not starting or ending with '-'",
  )
  .meta({ examples: ["mikan-task-0b8e3c1e-8d1f-4c55-9a57-0e6b7b0f4a11"] });

export type SandboxId = z.infer<typeof sandboxIdSchema>;

/** True when `value` is a sandbox id a bridge accepts. */
export function isSandboxId(value: unknown): value is SandboxId {
  return sandboxIdSchema.safeParse(value).success;
}

/** Longest prefix that still leaves room for `-<uuid>` within the id length limit. */
export const SANDBOX_ID_PREFIX_MAX_LENGTH = SANDBOX_ID_MAX_LENGTH - UUID_LENGTH - 1;

/**
 * Checks a sandbox id prefix and returns it; throws a `TypeError` that says what is wrong.
 * A prefix follows the id rules and is at most {@link SANDBOX_ID_PREFIX_MAX_LENGTH} characters.
 */
export function assertSandboxIdPrefix(prefix: string): string {
  if (prefix.length > SANDBOX_ID_PREFIX_MAX_LENGTH) {
    throw new TypeError(
      `Sandbox id prefix "${prefix}" is ${prefix.length} characters; at most ${SANDBOX_ID_PREFIX_MAX_LENGTH} fit before "-<uuid>".`,
    );
  }
  if (!SANDBOX_ID_PATTERN.test(prefix)) {
    throw new TypeError(
      `Sandbox id prefix "${prefix}" must be lowercase letters, digits and '-', not starting or ending with '-'.`,
    );
  }
  return prefix;
}

/** A fresh sandbox id, `<prefix>-<uuid v4>` (default prefix `mikan-task`). */
export function newSandboxId(prefix: string = DEFAULT_ID_PREFIX): SandboxId {
  return `${assertSandboxIdPrefix(prefix)}-${globalThis.crypto.randomUUID().toLowerCase()}`;
}
