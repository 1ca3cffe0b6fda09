import { DISPLAY_MAX_BYTES, type Limits, limitsSchema } from "@remote-task/protocol";

/** Limits a bridge enforces when none are configured; reported by `GET /health`. */
export const DEFAULT_LIMITS: Readonly<Limits> = Object.freeze({
  maxRequestBytes: 262_144,
  maxCommandBytes: 65_536,
  maxEnvEntries: 64,
  maxEnvEntryBytes: 8_192,
  maxTimeoutSeconds: 3_600,
  maxOutputBytes: 1_048_576,
});

/**
 * Smallest per-stream cap a request may ask for: the client's 50 KiB display window plus one
 * UTF-8 character, so the client can always show a full window and tell that it was truncated.
 */
export const MIN_OUTPUT_CAP_BYTES = DISPLAY_MAX_BYTES + 4;

/** Merges `overrides` into {@link DEFAULT_LIMITS}; throws a `TypeError` naming a bad value. */
export function resolveLimits(overrides: Partial<Limits> = {}): Limits {
  const merged = { ...DEFAULT_LIMITS, ...overrides };
  const parsed = limitsSchema.safeParse(merged);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new TypeError(
      `Invalid bridge limit ${issue?.path.join(".") ?? ""}: ${issue?.message ?? "invalid value"}.`,
    );
  }
  return parsed.data;
}

/** Bytes of each stream retained for one call: the request may lower the bridge's cap, within reason. */
export function outputCapFor(limits: Limits, requested: number | undefined): number {
  const wanted = Math.max(requested ?? limits.maxOutputBytes, MIN_OUTPUT_CAP_BYTES);
  return Math.min(wanted, limits.maxOutputBytes);
}
