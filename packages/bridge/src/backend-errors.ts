import { BRIDGE_TEXTS } from "@remote-task/internal";
import type { ErrorBody } from "@remote-task/protocol";
import { BackendError } from "./backend.js";
import { errorBody, errorResponse } from "./responses.js";

/** What the bridge answers for a backend failure, and what it logs about it. */
export interface MappedBackendError {
  body: ErrorBody;
  /** The failure's own message for the log (unexpected failures only; redact before logging). */
  detail?: string;
}

const DEFAULT_RETRY_AFTER_SECONDS = 5;

/** Maps a backend failure to a protocol error; anything but a `BackendError` becomes generic. */
export function mapBackendError(error: unknown): MappedBackendError {
  if (BackendError.isInstance(error)) {
    switch (error.code) {
      case "invalid_request":
        return {
          body: errorBody("invalid_request", error.message, {
            issues: [{ path: [...(error.details.path ?? [])], message: error.message }],
          }),
        };
      case "capacity_exceeded":
        return {
          body: errorBody("capacity_exceeded", error.message, {
            retryAfterSeconds: error.details.retryAfterSeconds ?? DEFAULT_RETRY_AFTER_SECONDS,
          }),
        };
      default:
        return { body: errorBody("sandbox_error", error.message) };
    }
  }
  const detail =
    error instanceof Error
      ? `${error.name}: ${error.message}`
      : `non-error thrown: ${String(error)}`;
  return { body: errorBody("sandbox_error", BRIDGE_TEXTS.sandboxFailed), detail };
}

/** The HTTP answer for a backend failure. */
export function backendErrorResponse(error: unknown): Response {
  const { body } = mapBackendError(error);
  return errorResponse(body.code, body.error, body);
}
