import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { silentLogger } from "@remote-task/bridge";
import { createLocalBackend } from "@remote-task/bridge/local";
import { startEmbeddedBridge } from "@remote-task/bridge/node";
import { formatOutput, PROTOCOL_VERSION, truncateTail } from "@remote-task/protocol";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AbortError,
  AuthenticationError,
  createClient,
  type RemoteTaskClient,
} from "../src/index.js";
import { eventually, failure } from "./helpers/assertions.js";

type Bridge = Awaited<
  ReturnType<typeof startEmbeddedBridge<ReturnType<typeof createLocalBackend>>>
>;
let bridge: Bridge;
let client: RemoteTaskClient;

beforeAll(async () => {
  bridge = await startEmbeddedBridge({
    backend: createLocalBackend({ isolation: "auto" }),
    limits: { maxOutputBytes: 256 * 1024 },
    logger: silentLogger,
  });
  client = createClient({ url: bridge.url, token: bridge.token, timeoutSeconds: 30 });
});

afterAll(async () => {
  await client?.close();
  await bridge?.close();
});

function processesMatching(text: string): string[] {
  const out = execFileSync("ps", ["-eo", "args"], { encoding: "utf8", maxBuffer: 1 << 28 });
  return out.split("\n").filter((line) => line.includes(text) && !line.includes("ps -eo"));
}

/** Resolves once no process's arguments contain `marker` (no bound: the test's timeout is the limit). */
async function commandGone(marker: string): Promise<void> {
  while (processesMatching(marker).length > 0) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe("against the embedded local bridge (loopback, real commands)", () => {
  it("reports its health", async () => {
    const health = await client.health();
    expect(health).toMatchObject({ ok: true, protocol: PROTOCOL_VERSION, backend: "local" });
    expect(health.limits?.maxOutputBytes).toBe(256 * 1024);
  });

  it("runs a real command: separate streams, exit code as a value", async () => {
    const result = await client.run("echo out; echo err >&2; exit 3");
    expect(result).toMatchObject({
      stdout: "out\n",
      stderr: "err\n",
      exitCode: 3,
      outcome: "exited",
      stdoutBytes: 4,
      stderrBytes: 4,
    });
    expect(result.sandboxId).toMatch(/^mikan-task-/);
  });

  it("reports a timeout as a timeout", async () => {
    const result = await client.run("sleep 5", { timeoutSeconds: 0.5 });
    expect(result).toMatchObject({ outcome: "timeout", exitCode: 124 });
  });

  it("streams output as it arrives", async () => {
    const seen: string[] = [];
    const result = await client.run("echo one; sleep 0.2; echo two >&2", {
      onOutput: (e) => seen.push(`${e.stream}:${e.data}`),
    });
    expect(seen.join("")).toBe("stdout:one\nstderr:two\n");
    expect(result.exitCode).toBe(0);
  });

  it("parallel calls get distinct ids and never see each other's files", async () => {
    const tasks = Array.from(
      { length: 8 },
      (_, i) => `echo ${i} > mine.txt; sleep 0.2; ls -A; cat mine.txt`,
    );
    const settled = await client.runMany(tasks, { concurrency: 8 });
    const ids = new Set<string>();
    settled.forEach((s, i) => {
      expect(s.status).toBe("fulfilled");
      if (s.status !== "fulfilled") return;
      ids.add(s.value.sandboxId);
      expect(s.value.stdout).toBe(`mine.txt\n${i}\n`);
    });
    expect(ids.size).toBe(8);
  });

  it("truncates a large output exactly like truncateTail of the true output", async () => {
    const lines = 300_000;
    const trueOutput = `${Array.from({ length: lines }, (_, i) => String(i + 1)).join("\n")}\n`;
    const streamed: string[] = [];
    const result = await client.run(`seq 1 ${lines}`, {
      onOutput: (e) => streamed.push(e.data),
    });
    // The bridge streams the start live (up to its cap) and retains the tail for the result.
    expect(streamed.length).toBeGreaterThan(0);
    expect(trueOutput.startsWith(streamed.join(""))).toBe(true);
    expect(result.stdoutTruncated).toBe(true);
    expect(result.stdoutBytes).toBe(Buffer.byteLength(trueOutput));
    expect(trueOutput.endsWith(result.stdout)).toBe(true);
    const shown = formatOutput(result);
    expect(shown).toEqual(formatOutput({ stdout: trueOutput, stderr: "" }));
    expect(shown.text.startsWith(truncateTail(trueOutput).text)).toBe(true);
    // The JSON mode retains the same tail.
    const json = await client.run(`seq 1 ${lines}`);
    expect(formatOutput(json)).toEqual(shown);
  });
});

describe("against the embedded local bridge: aborts, cancel and many calls", () => {
  it("an abort kills the remote command and leaves nothing running", async () => {
    const marker = "31.4159";
    const controller = new AbortController();
    const pending = client.run(`echo started; sleep ${marker}`, {
      signal: controller.signal,
      onOutput: (e) => {
        if (e.data.includes("started")) controller.abort();
      },
    });
    expect(AbortError.isInstance(await failure(pending))).toBe(true);
    await eventually(() => processesMatching(`sleep ${marker}`).length === 0, 10_000);
    await eventually(() => bridge.backend.liveSandboxes() === 0, 10_000);
  });

  it("cancel() stops a running call, which then ends as cancelled", async () => {
    const sandboxId = `cancel-me-${Date.now()}`;
    const started = new Promise<void>((resolve) => {
      void client
        .run("echo go; sleep 27.1828", {
          sandboxId,
          onOutput: () => resolve(),
        })
        .then((r) => results.push(r.outcome));
    });
    const results: string[] = [];
    await started;
    expect(await client.cancel(sandboxId)).toEqual({ sandboxId, cancelled: true, supported: true });
    await eventually(() => results.length === 1, 10_000);
    expect(results).toEqual(["cancelled"]);
    expect(await client.cancel(sandboxId)).toEqual({
      sandboxId,
      cancelled: false,
      supported: true,
    });
    await eventually(() => processesMatching("sleep 27.1828").length === 0, 10_000);
  });

  it("runMany of 200 tasks at concurrency 16 returns every result in order", async () => {
    const tasks = Array.from({ length: 200 }, (_, i) => `echo task-${i}`);
    let last = { done: 0, failed: 0, total: 0 };
    const settled = await client.runMany(tasks, {
      concurrency: 16,
      onProgress: (p) => {
        last = p;
      },
    });
    expect(settled.map((s) => (s.status === "fulfilled" ? s.value.stdout : "rejected"))).toEqual(
      tasks.map((_, i) => `task-${i}\n`),
    );
    expect(last).toEqual({ done: 200, failed: 0, total: 200 });
    await eventually(() => bridge.backend.liveSandboxes() === 0, 10_000);
  }, 60_000);

  it("a stream() consumer that falls behind is told how much it missed; the result is whole", async () => {
    const total = 16 * 1024 * 1024;
    const small = await startEmbeddedBridge({
      backend: createLocalBackend({ isolation: "none" }),
      limits: { maxOutputBytes: total },
      streamBufferBytes: 16 * 1024,
    });
    const slow = createClient({
      url: small.url,
      token: small.token,
      timeoutSeconds: 60,
      // The exit event carries the whole 16 MiB tail.
      maxResponseBytes: 3 * total,
    });
    try {
      let data = 0;
      let skipped = 0;
      let gaps = 0;
      let exitBytes: number | undefined;
      // The command ends with a no-op naming this run, so its shell is found by its arguments.
      const marker = `slow-reader-${randomUUID()}`;
      for await (const event of slow.stream(
        `head -c ${total} /dev/zero | tr '\\0' a; : ${marker}`,
      )) {
        if (event.type === "stdout") {
          // The first output makes this reader stop, as a busy consumer would, until the command
          // has written all of its output: far more than the bridge's 16 KiB stream buffer and the
          // socket buffers hold, so the bridge must have skipped some, however slow the machine.
          if (data === 0) await commandGone(marker);
          data += event.data.length;
          skipped += event.skippedBytes ?? 0;
          if (event.skippedBytes !== undefined) gaps++;
        }
        if (event.type === "exit") exitBytes = event.result.stdoutBytes;
      }
      console.info(`[slow stream() reader] ${data} bytes read, ${skipped} skipped in ${gaps} gaps`);
      expect(gaps).toBeGreaterThan(0);
      expect(data + skipped).toBe(total);
      expect(exitBytes).toBe(total);
    } finally {
      await slow.close();
      await small.close();
    }
  }, 60_000);

  // Runs once the local bridge takes stdin (it reports `limits.maxStdinBytes`); the bridge of
  // protocol 1 does not.
  it("delivers stdin byte-exact to a real command", async (context) => {
    const health = await client.health();
    if (health.limits?.maxStdinBytes === undefined) context.skip("the bridge takes no stdin yet");
    const bytes = Uint8Array.from({ length: 512 }, (_, i) => (i * 7) % 256);
    const binary = await client.run("od -An -v -tx1 | tr -d ' \\n'", { stdin: bytes });
    expect(binary.stdout).toBe(Buffer.from(bytes).toString("hex"));
    const text = await client.run("wc -l", { stdin: "a,b\n1,2\n" });
    expect(text.stdout.trim()).toBe("2");
    // A command that does not read its stdin is not held up by it.
    const ignored = await client.run("echo done", { stdin: new Uint8Array(64 * 1024) });
    expect(ignored).toMatchObject({ stdout: "done\n", exitCode: 0 });
  });

  it("refuses a wrong token", async () => {
    const wrong = createClient({ url: bridge.url, token: "not-the-token" });
    const error = await failure(wrong.run("true"));
    expect(AuthenticationError.isInstance(error)).toBe(true);
    expect(error.message).not.toContain("not-the-token");
    expect(error.message).not.toContain(bridge.token);
    await wrong.close();
  });
});
