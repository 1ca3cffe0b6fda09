import { brandClass } from "@remote-task/internal";
import type { RemoteTaskStatus, RemoteTaskToolResult } from "./result.js";

/**
 * Thrown by the adapters whose framework expects a failing tool to throw (AI SDK, pi-agent-core).
 * Its `message` is exactly the result text the model should read; `result` holds the whole result.
 * Use `RemoteTaskToolError.isInstance(e)`: it works across duplicate installs.
 */
export class RemoteTaskToolError extends Error {
  static readonly isInstance = brandClass(this, "remote-task.RemoteTaskToolError");
  override readonly name = "RemoteTaskToolError";
  readonly status: RemoteTaskStatus;
  readonly result: RemoteTaskToolResult;

  constructor(result: RemoteTaskToolResult) {
    super(result.text);
    this.status = result.status;
    this.result = result;
  }
}
