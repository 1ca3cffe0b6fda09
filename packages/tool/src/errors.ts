import { hasBrand } from "@remote-task/internal";
import type { RemoteTaskStatus, RemoteTaskToolResult } from "./result.js";

const BRAND = Symbol.for("remote-task.RemoteTaskToolError");

/**
 * Thrown by the adapters whose framework expects a failing tool to throw (AI SDK, pi-agent-core).
 * Its `message` is exactly the result text the model should read; `result` holds the whole result.
 * Use `RemoteTaskToolError.isInstance(e)`: it works across duplicate installs.
 */
export class RemoteTaskToolError extends Error {
  readonly [BRAND] = true;
  override readonly name = "RemoteTaskToolError";
  readonly status: RemoteTaskStatus;
  readonly result: RemoteTaskToolResult;

  constructor(result: RemoteTaskToolResult) {
    super(result.text);
    this.status = result.status;
    this.result = result;
  }

  static isInstance(value: unknown): value is RemoteTaskToolError {
    return hasBrand(value, BRAND);
  }
}
