/**
 * Option checks shared by every package, so a bad number is refused in one wording wherever it
 * is given.
 */

/**
 * Returns `value` when it is an integer of at least `least`; otherwise throws `error(message)`
 * (a `TypeError` unless the caller has an error class of its own), the message naming the
 * option and the value given.
 */
export function requireIntegerAtLeast(
  name: string,
  value: unknown,
  least: number,
  error: (message: string) => Error = (message) => new TypeError(message),
): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < least) {
    throw error(`${name} must be an integer of at least ${least}; got ${String(value)}.`);
  }
  return value;
}
