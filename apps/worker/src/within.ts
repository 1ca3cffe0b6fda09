/** Settles as `promise` does, or rejects with `timeoutError()` after `ms`. */
export function withinMs<T>(
  promise: Promise<T>,
  ms: number,
  timeoutError: () => Error,
): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(timeoutError()), ms);
  });
  return Promise.race([promise, timedOut]).finally(() => {
    if (timer !== undefined) clearTimeout(timer);
  });
}
