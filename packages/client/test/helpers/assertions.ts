import type { RemoteTaskError } from "../../src/index.js";

/** The error a call fails with; throws when it does not fail. */
export async function failure(promise: Promise<unknown>): Promise<RemoteTaskError> {
  try {
    await promise;
  } catch (error) {
    return error as RemoteTaskError;
  }
  throw new Error("expected the call to fail");
}

/** Waits until `predicate` holds, polling every 10 ms, or fails after `ms`. */
export async function eventually(predicate: () => boolean, ms = 3000): Promise<void> {
  const until = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > until) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 10));
  }
}
