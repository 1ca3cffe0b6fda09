import type { RunOptions, TaskResult } from "@remote-task/client";
import type { RemoteTaskToolClient } from "../../src/index.js";

/** A complete `TaskResult` with sensible defaults (exit 0, byte totals computed). */
export function taskResult(partial: Partial<TaskResult> = {}): TaskResult {
  const stdout = partial.stdout ?? "";
  const stderr = partial.stderr ?? "";
  return {
    sandboxId: "mikan-task-00000000-0000-4000-8000-000000000000",
    exitCode: 0,
    outcome: "exited",
    durationMs: 1,
    stdoutBytes: Buffer.byteLength(stdout),
    stderrBytes: Buffer.byteLength(stderr),
    stdoutTruncated: false,
    stderrTruncated: false,
    ...partial,
    stdout,
    stderr,
  };
}

export interface RecordedRun {
  command: string;
  options: RunOptions | undefined;
}

/** A client whose `run` answers with `respond`, recording every call. */
export function fakeClient(
  respond: (command: string, options: RunOptions | undefined) => TaskResult | Promise<TaskResult>,
): RemoteTaskToolClient & { runs: RecordedRun[] } {
  const runs: RecordedRun[] = [];
  return {
    runs,
    async run(command, options) {
      runs.push({ command, options });
      return respond(command, options);
    },
  };
}
