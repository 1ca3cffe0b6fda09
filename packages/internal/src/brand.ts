/*
 * How every error class of the project is marked, so a check holds across duplicate copies of a
 * package in one program (where `instanceof` fails): the class gets a `Symbol.for(name)` key on
 * its prototype, which its instances and those of its subclasses inherit, and its
 * `static isInstance` is the check `brandClass` returns:
 *
 *   export class HttpError extends Error {
 *     static readonly isInstance = brandClass(this, "remote-task.HttpError");
 *   }
 *
 * A subclass with a brand of its own does the same (`static override readonly isInstance = ...`);
 * one without inherits its parent's check.
 */

/**
 * True when `value` carries `brand` (a `Symbol.for(...)` key, own or inherited).
 * Unlike `instanceof`, it holds across duplicate copies of a package in one program.
 */
export function hasBrand(value: unknown, brand: symbol): boolean {
  return typeof value === "object" && value !== null && brand in value;
}

/**
 * Brands `target` with `Symbol.for(name)` (on its prototype, so its instances and its subclasses'
 * carry it) and returns the check for its `static isInstance`. `name` is `remote-task.<Class>`.
 */
export function brandClass<T extends object>(
  // biome-ignore lint/suspicious/noExplicitAny: any constructor signature may be branded.
  target: abstract new (...args: any[]) => T,
  name: string,
): (value: unknown) => value is T {
  const brand = Symbol.for(name);
  Object.defineProperty(target.prototype, brand, { value: true });
  return (value: unknown): value is T => hasBrand(value, brand);
}
