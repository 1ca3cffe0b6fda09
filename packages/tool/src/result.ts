import type { TaskResult } from "@remote-task/client";
import { formatOutput } from "@remote-task/protocol";

/**
 * How a call ended, from the agent's point of view:
 * - `success`: the command exited with code 0;
 * - `failed`: it exited with another code;
 * - `timeout`: it hit its deadline and was stopped;
 * - `aborted`: the caller's signal (or a cancel) stopped it;
 * - `error`: it could not be run (configuration, bridge, network, invalid arguments).
 */
export type RemoteTaskStatus = "success" | "failed" | "timeout" | "aborted" | "error";

/** A framework-neutral tool result: what the model should read, and whether it is an error. */
export interface RemoteTaskToolResult {
  /** The exact text the model sees. */
  text: string;
  /** True for every status but `success`. */
  isError: boolean;
  status: RemoteTaskStatus;
  /** The client's result, when the bridge ran the command. */
  result?: TaskResult;
}

/** Text of a call stopped by the caller before any result arrived. */
export const ABORTED_TEXT = "Command aborted";

function withNotice(output: string, notice: string): string {
  return `${output}\n\n${notice}`;
}

/** The agent's view of a finished command, exactly as the reference tool words it. */
export function resultFromTask(result: TaskResult, timeoutSeconds: number): RemoteTaskToolResult {
  const output = formatOutput(result).text;
  switch (result.outcome) {
    case "timeout":
      return {
        text: withNotice(output, `Command timed out after ${timeoutSeconds} seconds`),
        isError: true,
        status: "timeout",
        result,
      };
    case "cancelled":
      return { text: withNotice(output, ABORTED_TEXT), isError: true, status: "aborted", result };
    case "exited":
      if (result.exitCode === 0) return { text: output, isError: false, status: "success", result };
      return {
        text: withNotice(output, `Command exited with code ${result.exitCode}`),
        isError: true,
        status: "failed",
        result,
      };
  }
}

export function abortedResult(): RemoteTaskToolResult {
  return { text: ABORTED_TEXT, isError: true, status: "aborted" };
}

export function errorResult(message: string): RemoteTaskToolResult {
  return { text: message, isError: true, status: "error" };
}
