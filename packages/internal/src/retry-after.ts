/** The `Retry-After` header value for a wait in seconds: whole seconds, rounded up, never negative. */
export function retryAfterHeader(seconds: number): string {
  return String(Math.max(0, Math.ceil(seconds)));
}
