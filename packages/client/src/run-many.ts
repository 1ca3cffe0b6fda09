/**
 * Fan-out: many tasks, each one call, with as many in flight as the bridges can take. The number
 * in flight is a window that adapts, AIMD-style, within the caller's `concurrency` (a ceiling): it
 * starts from the free capacity the bridges' `/health` reports (or 8 when they report none, then
 * doubles each round until the first refusal), grows by one task per window of successes, and
 * halves (at most once per window) when a bridge refuses a call for capacity. A refused call is not
 * lost: it waits for room (see `bridges.ts`) and the window shrinks so no more pile up behind it.
 */
import { requireIntegerAtLeast } from "@remote-task/internal";
import { DEFAULT_CONCURRENCY, MAX_DEFAULT_FAN_OUT } from "./config.js";
import { AbortError, ConfigurationError, RemoteTaskError } from "./errors.js";
import type {
  Progress,
  RunManyOptions,
  RunOptions,
  SettledTask,
  Task,
  TaskResult,
} from "./types.js";

/** Runs one task; calls `onRefused` each time a bridge refuses it for capacity. */
type Run = (
  command: string,
  options: RunOptions,
  onRefused: (() => void) | undefined,
) => Promise<TaskResult>;

/** The tasks in flight a fan-out allows: grows on success, halves on refusal, within a ceiling. */
export class FanOutWindow {
  #size: number;
  /** Before the first refusal with no capacity reported: the window doubles each round. */
  #slowStart: boolean;
  /** Successes since the window was last halved; it is not halved again within one window. */
  #sinceCut = Number.POSITIVE_INFINITY;

  /** `start`: the free capacity the bridges report, or undefined when they report none. */
  constructor(
    readonly ceiling: number,
    start: number | undefined,
  ) {
    this.#slowStart = start === undefined;
    this.#size = Math.min(ceiling, Math.max(1, start ?? DEFAULT_CONCURRENCY));
  }

  /** How many tasks may be in flight now. */
  get size(): number {
    return Math.max(1, Math.floor(this.#size));
  }

  succeeded(): void {
    this.#sinceCut++;
    this.#size = Math.min(this.ceiling, this.#size + (this.#slowStart ? 1 : 1 / this.#size));
  }

  refused(): void {
    this.#slowStart = false;
    if (this.#sinceCut < this.size) return;
    this.#size = Math.max(1, this.#size / 2);
    this.#sinceCut = 0;
  }
}

/** A task failed when it was rejected or its command did not exit with 0. */
function isFailure(settled: SettledTask): boolean {
  return (
    settled.status === "rejected" ||
    settled.value.outcome !== "exited" ||
    settled.value.exitCode !== 0
  );
}

/**
 * Runs `tasks` with at most `concurrency` in flight, fewer while the bridges can take fewer
 * (`freeCapacity` asks them); resolves with one settled entry per task, in input order. An abort
 * stops scheduling, aborts the tasks in flight, and settles the tasks not started as rejected
 * with an `AbortError`.
 */
export async function runMany(
  run: Run,
  tasks: ReadonlyArray<string | Task>,
  options: RunManyOptions,
  freeCapacity: () => Promise<number | undefined>,
): Promise<SettledTask[]> {
  const ceiling = options.concurrency ?? MAX_DEFAULT_FAN_OUT;
  requireIntegerAtLeast("concurrency", ceiling, 1, (message) => new ConfigurationError(message));
  const normalized: Task[] = tasks.map((task) =>
    typeof task === "string" ? { command: task } : task,
  );
  const total = normalized.length;
  const results = new Array<SettledTask>(total);
  if (total === 0) return results;
  const progress: Progress = { done: 0, failed: 0, total };
  // Ends every task in flight: the caller's abort, or a throwing onProgress. Each task gets a
  // signal of its own (one listener each, not hundreds on one signal).
  const controller = new AbortController();
  const inFlight = new Set<AbortController>();
  controller.signal.addEventListener(
    "abort",
    () => {
      for (const task of inFlight) task.abort(controller.signal.reason);
    },
    { once: true },
  );
  const onCallerAbort = () => controller.abort(options.signal?.reason);
  if (options.signal?.aborted) onCallerAbort();
  else options.signal?.addEventListener("abort", onCallerAbort, { once: true });
  let callbackError: { error: unknown } | undefined;

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

  const runTask = async (index: number, window: FanOutWindow) => {
    const task = normalized[index] as Task;
    const { command, ...runOptions } = task;
    const own = new AbortController();
    inFlight.add(own);
    try {
      const value = await run(command, { ...runOptions, signal: own.signal }, () =>
        window.refused(),
      );
      window.succeeded();
      settle({ status: "fulfilled", value, task, index });
    } catch (error) {
      const reason = RemoteTaskError.isInstance(error)
        ? error
        : new RemoteTaskError("The task failed unexpectedly.", { cause: error });
      settle({ status: "rejected", reason, task, index });
    } finally {
      inFlight.delete(own);
    }
  };

  try {
    const start = controller.signal.aborted ? undefined : await freeCapacity();
    const window = new FanOutWindow(Math.min(ceiling, total), start);
    let next = 0;
    let running = 0;
    await new Promise<void>((done) => {
      const pump = () => {
        while (next < total && controller.signal.aborted) {
          const index = next++;
          settle({
            status: "rejected",
            reason: new AbortError("The task was not started: runMany was aborted."),
            task: normalized[index] as Task,
            index,
          });
        }
        while (next < total && running < window.size) {
          running++;
          void runTask(next++, window).finally(() => {
            running--;
            pump();
          });
        }
        if (running === 0 && next >= total) done();
      };
      pump();
    });
  } finally {
    options.signal?.removeEventListener("abort", onCallerAbort);
  }
  if (callbackError !== undefined) throw callbackError.error;
  return results;
}
