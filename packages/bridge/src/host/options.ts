/**
 * The options every backend checks alike (what calls may reach besides public addresses), and
 * where a backend used on its own writes its warnings.
 */
import { hostPatternSchema } from "@remote-task/protocol";
import type { BridgeLogger } from "../logger.js";
import { type ParsedHostPattern, parseHostPattern } from "../network.js";

/** The default logger of a backend used on its own: warnings as plain lines on stderr. */
export const stderrWarnings: BridgeLogger = (entry) => {
  if (entry.event === "warning") process.stderr.write(`remote-task: warning: ${entry.detail}\n`);
};

/** The deployer's `egress.allowPrivate`, checked (a clear TypeError names the bad one). */
export function checkedPatterns(patterns: readonly string[] | undefined): ParsedHostPattern[] {
  return (patterns ?? []).map((pattern, index) => {
    const parsed = hostPatternSchema.safeParse(pattern);
    if (!parsed.success) {
      throw new TypeError(
        `egress.allowPrivate[${index}] (${JSON.stringify(pattern)}) is not a host pattern: ${parsed.error.issues[0]?.message ?? "invalid"}.`,
      );
    }
    return parseHostPattern(parsed.data);
  });
}
