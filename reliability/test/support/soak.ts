import {
  AbortError,
  createClient,
  type RemoteTaskClient,
  type RemoteTaskError,
} from "@remote-task/client";

export type SoakKind = "success" | "nonzero" | "timeout" | "cancel" | "disconnect";

/** The kind of task `index` is: 1% timeouts, 3% cancels, 3% disconnects, 30% non-zero, the rest succeed. */
export function kindOf(index: number): SoakKind {
  const slot = ((index % 100) + 100) % 100;
  if (slot === 0) return "timeout";
  if (slot <= 3) return "cancel";
  if (slot <= 6) return "disconnect";
  if (slot <= 36) return "nonzero";
  return "success";
}

export interface SoakTally {
  /** Tasks that ended with exactly the expected outcome, per kind. */
  ok: Record<SoakKind, number>;
  /** Tasks that ended otherwise (with what), per kind; must stay empty. */
  wrong: { index: number; kind: SoakKind; got: string }[];
  elapsedMs: number;
}

const MARK_VAR = "RT_SOAK_MARK";

/** Runs one task of its kind and says how it ended, or throws describing a wrong ending. */
async function runTask(client: RemoteTaskClient, index: number, mark: string): Promise<void> {
  const kind = kindOf(index);
  const env = { [MARK_VAR]: mark };
  switch (kind) {
    case "success": {
      const result = await client.run(`echo ok-${index}`, { env });
      if (result.exitCode !== 0 || result.stdout !== `ok-${index}\n` || result.outcome !== "exited")
        throw new Error(`success: ${JSON.stringify(result)}`);
      return;
    }
    case "nonzero": {
      const code = 1 + (((index % 120) + 120) % 120);
      const result = await client.run(`echo e-${index} >&2; exit ${code}`, { env });
      if (
        result.exitCode !== code ||
        result.stderr !== `e-${index}\n` ||
        result.outcome !== "exited"
      )
        throw new Error(`nonzero: ${JSON.stringify(result)}`);
      return;
    }
    case "timeout": {
      const result = await client.run("sleep 30", { env, timeoutSeconds: 1 });
      if (result.exitCode !== 124 || result.outcome !== "timeout")
        throw new Error(`timeout: ${JSON.stringify(result)}`);
      return;
    }
    case "cancel": {
      // Aborted once the command has provably started (its first output arrived).
      const controller = new AbortController();
      try {
        await client.run("echo go; sleep 30", {
          env,
          timeoutSeconds: 60,
          signal: controller.signal,
          onOutput: () => controller.abort(),
        });
      } catch (error) {
        if (AbortError.isInstance(error)) return;
        throw new Error(`cancel: ${(error as RemoteTaskError).name}: ${(error as Error).message}`);
      }
      throw new Error("cancel: the call was not aborted");
    }
    case "disconnect": {
      for await (const event of client.stream("echo go; sleep 30", { env, timeoutSeconds: 60 })) {
        if (event.type === "stdout") return; // leaves the iteration: the client hangs up
      }
      throw new Error("disconnect: the stream ended before any output");
    }
  }
}

/** Runs `count` mixed tasks at `concurrency` against the bridge; every task is tallied. */
export async function soak(options: {
  url: string;
  token: string;
  /** First task index (kinds follow the index, so rounds continue the same mix). */
  offset?: number;
  count: number;
  concurrency: number;
  mark: string;
}): Promise<SoakTally> {
  const client = createClient({ url: options.url, token: options.token, graceSeconds: 10 });
  const tally: SoakTally = {
    ok: { success: 0, nonzero: 0, timeout: 0, cancel: 0, disconnect: 0 },
    wrong: [],
    elapsedMs: 0,
  };
  const started = performance.now();
  const offset = options.offset ?? 0;
  const end = offset + options.count;
  let next = offset;
  const worker = async () => {
    for (let index = next++; index < end; index = next++) {
      const kind = kindOf(index);
      try {
        await runTask(client, index, options.mark);
        tally.ok[kind]++;
      } catch (error) {
        tally.wrong.push({
          index,
          kind,
          got: error instanceof Error ? error.message : String(error),
        });
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: options.concurrency }, worker));
  } finally {
    await client.close();
  }
  tally.elapsedMs = performance.now() - started;
  return tally;
}

export { MARK_VAR };
