export interface RaceAbortOptions {
  /** A second signal that ends the race too (`signal` wins when both are already aborted). */
  other?: AbortSignal | undefined;
  /** What to reject with when a signal aborts (default: that signal's reason). */
  abortError?: ((signal: AbortSignal) => unknown) | undefined;
}

/**
 * Settles like `promise`, or rejects as soon as `signal` (or `options.other`) aborts, even if
 * `promise` never settles. A signal already aborted wins at once. Listeners are removed as soon
 * as either side settles: racing many promises against one long-lived signal must not keep their
 * values reachable.
 */
export function raceAbort<T>(
  promise: Promise<T>,
  signal: AbortSignal,
  options?: RaceAbortOptions,
): Promise<T> {
  const other = options?.other;
  const reasonOf = (aborted: AbortSignal): unknown =>
    options?.abortError === undefined ? aborted.reason : options.abortError(aborted);
  if (signal.aborted || other?.aborted) {
    promise.catch(() => {});
    return Promise.reject(reasonOf(signal.aborted ? signal : (other as AbortSignal)));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      signal.removeEventListener("abort", onAbort);
      other?.removeEventListener("abort", onAbort);
      reject(reasonOf(signal.aborted ? signal : (other as AbortSignal)));
    };
    signal.addEventListener("abort", onAbort, { once: true });
    other?.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        other?.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        other?.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}
