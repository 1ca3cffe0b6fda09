/** Oldest Node.js the client's HTTP stack (undici 8) runs on; the package's `engines` field. */
export const MIN_NODE_VERSION = "22.19.0";

function parts(version: string): number[] {
  return version
    .replace(/^v/, "")
    .split(".")
    .map((part) => Number.parseInt(part, 10) || 0);
}

/** True when `version` is older than `minimum` (both `major.minor.patch`, `v` optional). */
export function isOlderVersion(version: string, minimum: string): boolean {
  const have = parts(version);
  const need = parts(minimum);
  for (let i = 0; i < 3; i++) {
    const a = have[i] ?? 0;
    const b = need[i] ?? 0;
    if (a !== b) return a < b;
  }
  return false;
}

/**
 * Why the client cannot run on this runtime, or `undefined` when it can: a Node.js older than
 * {@link MIN_NODE_VERSION} fails inside undici with an obscure `TypeError` otherwise.
 */
export function unsupportedNodeReason(
  version: string | undefined = (globalThis as { process?: { versions?: { node?: string } } })
    .process?.versions?.node,
): string | undefined {
  if (version === undefined || !isOlderVersion(version, MIN_NODE_VERSION)) return undefined;
  return `@remote-task/client needs Node.js >= ${MIN_NODE_VERSION} for its HTTP client (undici); this is Node.js ${version}. Upgrade Node.js, or pass a Fetch API implementation as the \`fetch\` option.`;
}
