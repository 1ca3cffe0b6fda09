/**
 * Settles like `promise`, or rejects as soon as one of `signals` aborts (with that signal's
 * reason, or `abortError()` when given), even if `promise` never settles. A signal already
 * aborted wins at once. Listeners are removed as soon as either side settles: racing many
 * promises against one long-lived signal must not keep their values reachable.
 */
export function raceAbort<T>(
  promise: Promise<T>,
  signals: AbortSignal | ReadonlyArray<AbortSignal | undefined>,
  abortError?: (signal: AbortSignal) => unknown,
): Promise<T> {
  const watched = (Array.isArray(signals) ? signals : [signals]).filter(
    (signal): signal is AbortSignal => signal !== undefined,
  );
  const reasonOf = (signal: AbortSignal) =>
    abortError === undefined ? signal.reason : abortError(signal);
  const aborted = watched.find((signal) => signal.aborted);
  if (aborted !== undefined) {
    promise.catch(() => {});
    return Promise.reject(reasonOf(aborted));
  }
  return new Promise<T>((resolve, reject) => {
    const listeners = watched.map((signal) => {
      const onAbort = () => {
        detach();
        reject(reasonOf(signal));
      };
      signal.addEventListener("abort", onAbort, { once: true });
      return () => signal.removeEventListener("abort", onAbort);
    });
    const detach = () => {
      for (const remove of listeners) remove();
    };
    promise.then(
      (value) => {
        detach();
        resolve(value);
      },
      (error: unknown) => {
        detach();
        reject(error);
      },
    );
  });
}
