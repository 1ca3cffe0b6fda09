import { setMaxListeners } from "node:events";
import { DEFAULT_CONCURRENCY } from "./config.js";
import { AbortError, ConfigurationError, RemoteTaskError } from "./errors.js";
import type {
  Progress,
  RunManyOptions,
  RunOptions,
  SettledTask,
  Task,
  TaskResult,
} from "./types.js";

type Run = (command: string, options: RunOptions) => Promise<TaskResult>;

/** A task failed when it was rejected or its command did not exit with 0. */
function isFailure(settled: SettledTask): boolean {
  return (
    settled.status === "rejected" ||
    settled.value.outcome !== "exited" ||
    settled.value.exitCode !== 0
  );
}

/**
 * Runs `tasks` with at most `concurrency` in flight; resolves with one settled entry per task,
 * in input order. An abort stops scheduling, aborts the tasks in flight, and settles the tasks
 * not started as rejected with an `AbortError`.
 */
export async function runMany(
  run: Run,
  tasks: ReadonlyArray<string | Task>,
  options: RunManyOptions,
): Promise<SettledTask[]> {
  const concurrency = options.concurrency ?? DEFAULT_CONCURRENCY;
  if (!Number.isSafeInteger(concurrency) || concurrency < 1) {
    throw new ConfigurationError("concurrency must be a positive integer.");
  }
  const normalized: Task[] = tasks.map((task) =>
    typeof task === "string" ? { command: task } : task,
  );
  const total = normalized.length;
  const results = new Array<SettledTask>(total);
  const progress: Progress = { done: 0, failed: 0, total };
  // One signal for every task in flight: the caller's abort, or a throwing onProgress.
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  const onCallerAbort = () => controller.abort(options.signal?.reason);
  if (options.signal?.aborted) onCallerAbort();
  else options.signal?.addEventListener("abort", onCallerAbort, { once: true });
  let callbackError: { error: unknown } | undefined;
  let next = 0;

  const settle = (settled: SettledTask) => {
    results[settled.index] = settled;
    progress.done++;
    if (isFailure(settled)) progress.failed++;
    if (options.onProgress === undefined || callbackError !== undefined) return;
    try {
      options.onProgress({ ...progress }, settled);
    } catch (error) {
      callbackError = { error };
      controller.abort(error);
    }
  };

  const worker = async () => {
    for (let index = next++; index < total; index = next++) {
      const task = normalized[index] as Task;
      if (controller.signal.aborted) {
        settle({
          status: "rejected",
          reason: new AbortError("The task was not started: runMany was aborted."),
          task,
          index,
        });
        continue;
      }
      const { command, ...runOptions } = task;
      try {
        const value = await run(command, { ...runOptions, signal: controller.signal });
        settle({ status: "fulfilled", value, task, index });
      } catch (error) {
        const reason = RemoteTaskError.isInstance(error)
          ? error
          : new RemoteTaskError("The task failed unexpectedly.", { cause: error });
        settle({ status: "rejected", reason, task, index });
      }
    }
  };

  try {
    await Promise.all(Array.from({ length: Math.min(concurrency, total) }, worker));
  } finally {
    options.signal?.removeEventListener("abort", onCallerAbort);
  }
  if (callbackError !== undefined) throw callbackError.error;
  return results;
}
