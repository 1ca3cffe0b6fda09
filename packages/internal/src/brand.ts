/**
 * True when `value` carries `brand` (a `Symbol.for(...)` key set by the error's constructor).
 * Unlike `instanceof`, it holds across duplicate copies of a package in one program.
 */
export function hasBrand(value: unknown, brand: symbol): boolean {
  return typeof value === "object" && value !== null && brand in value;
}
