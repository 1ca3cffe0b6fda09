/**
 * Whether a call from this runtime to a bridge crosses web origins in a browser, where the
 * browser sends a CORS preflight first. The client cannot see why a browser's fetch failed
 * (`TypeError: Failed to fetch` for a refused preflight and for a connection lost after the
 * request went out alike), so a failed exec there is a call that may have run. What it can prove
 * is that a call it has not sent did not run: before its first command to such a bridge it asks
 * the bridge's `/health`, a request that runs nothing and needs the same CORS permission (the
 * same headers, from the same page). When that fetch fails, the command is not sent.
 */

/** The origin of the browser page (or web worker) this runs in; undefined elsewhere. */
function pageOrigin(): string | undefined {
  const location = (globalThis as { location?: { origin?: unknown } }).location;
  const origin = location?.origin;
  return typeof origin === "string" && origin !== "null" ? origin : undefined;
}

/** The page's origin when `baseUrl` is on another origin (calls to it cross origins). */
export function crossOriginPage(baseUrl: string): string | undefined {
  const page = pageOrigin();
  if (page === undefined) return undefined;
  return new URL(baseUrl).origin === page ? undefined : page;
}
