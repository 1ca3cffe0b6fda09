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

/** Text of a call the caller aborted, exactly as the reference tool words it. */
export const ABORTED_TEXT = "remote_task aborted";

/**
 * Text of a call abandoned because the bridge did not answer within the timeout plus the grace
 * period, exactly as the reference tool words its own client-side timeout.
 */
function clientTimeoutText(timeoutSeconds: number): string {
  return `remote_task timed out after ${seconds(timeoutSeconds)}`;
}

/** `1 second`, `2 seconds`, `0.5 seconds`. */
function seconds(n: number): string {
  return `${n} ${n === 1 ? "second" : "seconds"}`;
}

/** An error result's text: the output, a blank line, the notice, trimmed as the reference trims. */
function errorText(output: string, notice: string): string {
  return `${output}\n\n${notice}`.trim();
}

/** The agent's view of a finished command, worded as the reference tool words it. */
export function resultFromTask(result: TaskResult, timeoutSeconds: number): RemoteTaskToolResult {
  const output = formatOutput(result).text;
  switch (result.outcome) {
    case "timeout":
      return {
        text: errorText(output, `Command timed out after ${seconds(timeoutSeconds)}`),
        isError: true,
        status: "timeout",
        result,
      };
    case "cancelled":
      return { text: errorText(output, ABORTED_TEXT), isError: true, status: "aborted", result };
    case "exited":
      if (result.exitCode === 0) return { text: output, isError: false, status: "success", result };
      return {
        text: errorText(output, `Command exited with code ${result.exitCode}`),
        isError: true,
        status: "failed",
        result,
      };
  }
}

/** The tool's result for a call its caller aborted. */
export function abortedResult(): RemoteTaskToolResult {
  return { text: ABORTED_TEXT, isError: true, status: "aborted" };
}

/** The tool's result for a call whose client-side deadline passed. */
export function clientTimeoutResult(timeoutSeconds: number): RemoteTaskToolResult {
  return { text: clientTimeoutText(timeoutSeconds), isError: true, status: "timeout" };
}

/** The tool's result for a call that failed with `message`. */
export function errorResult(message: string): RemoteTaskToolResult {
  return { text: message, isError: true, status: "error" };
}

/**
 * A result as an MCP `CallToolResult`: the text as one text block, `isError` for every status but
 * `success` (the MCP server and the Claude Agent SDK's in-process tools).
 */
export function toCallToolResult(result: RemoteTaskToolResult) {
  return { content: [{ type: "text" as const, text: result.text }], isError: result.isError };
}
