import type { ErrorBody } from "@remote-task/protocol";
import { BackendError } from "./backend.js";
import { errorBody } from "./responses.js";

/** What the bridge answers for a backend failure, and what it logs about it. */
export interface MappedBackendError {
  body: ErrorBody;
  headers: Record<string, string>;
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
          headers: {},
        };
      case "capacity_exceeded": {
        const retryAfterSeconds = error.details.retryAfterSeconds ?? DEFAULT_RETRY_AFTER_SECONDS;
        return {
          body: errorBody("capacity_exceeded", error.message, { retryAfterSeconds }),
          headers: { "retry-after": String(Math.max(0, Math.ceil(retryAfterSeconds))) },
        };
      }
      default:
        return { body: errorBody("sandbox_error", error.message), headers: {} };
    }
  }
  const detail =
    error instanceof Error
      ? `${error.name}: ${error.message}`
      : `non-error thrown: ${String(error)}`;
  return {
    body: errorBody(
      "sandbox_error",
      "The sandbox failed while running the command; the bridge log has details. Try again.",
    ),
    headers: {},
    detail,
  };
}
