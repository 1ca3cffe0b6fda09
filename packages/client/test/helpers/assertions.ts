import type { ErrorCode } from "@remote-task/protocol";
import {
  AuthenticationError,
  BridgeError,
  CapacityError,
  ForbiddenError,
  InvalidRequestError,
  type RemoteTaskError,
} from "../../src/index.js";

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

/** The error class a bridge error code must surface as. */
export const expectedErrorClass: Record<ErrorCode, { isInstance(v: unknown): boolean }> = {
  unauthorized: AuthenticationError,
  invalid_request: InvalidRequestError,
  not_found: InvalidRequestError,
  method_not_allowed: InvalidRequestError,
  conflict: InvalidRequestError,
  forbidden: ForbiddenError,
  payload_too_large: InvalidRequestError,
  capacity_exceeded: CapacityError,
  sandbox_error: BridgeError,
  not_configured: BridgeError,
  internal: BridgeError,
};
