import { HttpResponse, http } from "msw";
import { describe, expect, it } from "vitest";
import { AbortError, createClient, type Progress } from "../src/index.js";
import { errorBody, execResult } from "./helpers/fixtures.js";
import { mswFetch } from "./helpers/msw.js";

const URL_BASE = "https://bridge.test";

/**
 * A bridge that echoes each command after a short random delay; `fail-N` answers exit code N,
 * `broken` answers HTTP 500, `hang` never answers. Tracks how many calls are in flight.
 */
function echoBridge() {
  const stats = { inFlight: 0, maxInFlight: 0, cancelled: [] as string[] };
  const f = mswFetch(
    http.post(`${URL_BASE}/exec`, async ({ request }) => {
      const { command } = (await request.json()) as { command: string };
      stats.inFlight++;
      stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
      try {
        if (command === "hang") await new Promise<never>(() => {});
        await new Promise((r) => setTimeout(r, Math.random() * 8));
        if (command === "broken") {
          return HttpResponse.json(errorBody("internal"), { status: 500 });
        }
        const code = command.startsWith("fail-") ? Number(command.slice(5)) : 0;
        return HttpResponse.json(execResult({ stdout: `${command}\n`, code }));
      } finally {
        stats.inFlight--;
      }
    }),
    http.post(`${URL_BASE}/cancel`, async ({ request }) => {
      const { sandboxId } = (await request.json()) as { sandboxId: string };
      stats.cancelled.push(sandboxId);
      return HttpResponse.json({ ok: true, sandboxId, cancelled: true });
    }),
  );
  return { f, stats };
}

describe("runMany", () => {
  it("keeps input order, bounds concurrency, and reports progress", async () => {
    const { f, stats } = echoBridge();
    const client = createClient({ url: URL_BASE, fetch: f, retry: false });
    const tasks = Array.from({ length: 60 }, (_, i) =>
      i % 10 === 3 ? `fail-${i}` : i === 7 ? "broken" : `task-${i}`,
    );
    const progress: Progress[] = [];
    const settled = await client.runMany(tasks, {
      concurrency: 5,
      onProgress: (p) => progress.push(p),
    });
    expect(settled.map((s) => s.index)).toEqual(tasks.map((_, i) => i));
    expect(settled.map((s) => s.task.command)).toEqual(tasks);
    for (const s of settled) {
      if (s.task.command === "broken") {
        expect(s.status).toBe("rejected");
        continue;
      }
      expect(s.status).toBe("fulfilled");
      if (s.status === "fulfilled") expect(s.value.stdout).toBe(`${s.task.command}\n`);
    }
    expect(stats.maxInFlight).toBe(5);
    expect(progress).toHaveLength(60);
    expect(progress.map((p) => p.done)).toEqual(tasks.map((_, i) => i + 1));
    // 6 non-zero exits and 1 rejected task.
    expect(progress.at(-1)).toEqual({ done: 60, failed: 7, total: 60 });
    const ids = new Set(
      settled.flatMap((s) => (s.status === "fulfilled" ? [s.value.sandboxId] : [])),
    );
    expect(ids.size).toBe(59);
  });

  it("accepts task objects with their own options", async () => {
    const f = mswFetch(
      http.post(`${URL_BASE}/exec`, async ({ request }) => {
        const body = (await request.json()) as { cwd: string; timeoutSeconds: number };
        return HttpResponse.json(execResult({ stdout: `${body.cwd} ${body.timeoutSeconds}` }));
      }),
    );
    const client = createClient({ url: URL_BASE, fetch: f });
    const [a, b] = await client.runMany(["x", { command: "y", cwd: "/tmp", timeoutSeconds: 9 }]);
    expect(a?.status === "fulfilled" && a.value.stdout).toBe("/workspace 120");
    expect(b?.status === "fulfilled" && b.value.stdout).toBe("/tmp 9");
  });

  it("an abort stops scheduling, aborts tasks in flight and cancels their sandboxes", async () => {
    const { f, stats } = echoBridge();
    const client = createClient({ url: URL_BASE, fetch: f, retry: false });
    const controller = new AbortController();
    const tasks = ["task-0", "task-1", ...Array.from({ length: 22 }, () => "hang")];
    const settledPromise = client.runMany(tasks, {
      concurrency: 4,
      signal: controller.signal,
      onProgress: (p) => {
        if (p.done === 2) controller.abort();
      },
    });
    const settled = await settledPromise;
    const execs = f.requests.filter((r) => r.url.endsWith("/exec"));
    // Two quick tasks and the hanging ones started beside them; none after the abort.
    expect(execs.length).toBeLessThanOrEqual(5);
    expect(settled).toHaveLength(tasks.length);
    const rejected = settled.filter((s) => s.status === "rejected");
    expect(rejected).toHaveLength(tasks.length - 2);
    for (const s of rejected) {
      expect(s.status === "rejected" && AbortError.isInstance(s.reason)).toBe(true);
    }
    await client.close();
    expect(stats.cancelled.length).toBeGreaterThanOrEqual(2);
  });

  it("an already aborted signal runs nothing", async () => {
    const { f } = echoBridge();
    const client = createClient({ url: URL_BASE, fetch: f });
    const settled = await client.runMany(["a", "b"], { signal: AbortSignal.abort() });
    expect(settled.map((s) => s.status)).toEqual(["rejected", "rejected"]);
    expect(f.requests).toHaveLength(0);
  });

  it("refuses a bad concurrency, and handles no tasks", async () => {
    const client = createClient({ url: URL_BASE, fetch: mswFetch() });
    await expect(client.runMany(["a"], { concurrency: 0 })).rejects.toThrow(/concurrency/);
    expect(await client.runMany([])).toEqual([]);
  });

  it("a throwing onProgress aborts the rest and rejects with that error", async () => {
    const { f } = echoBridge();
    const client = createClient({ url: URL_BASE, fetch: f });
    const boom = new Error("progress failed");
    await expect(
      client.runMany(["a", "b", "c", "d"], {
        concurrency: 1,
        onProgress: () => {
          throw boom;
        },
      }),
    ).rejects.toBe(boom);
    expect(f.requests.filter((r) => r.url.endsWith("/exec"))).toHaveLength(1);
  });
});
