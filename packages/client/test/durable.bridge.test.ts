import { execFileSync, spawn } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { silentLogger } from "@remote-task/bridge";
import { createLocalBackend, type LocalBackend } from "@remote-task/bridge/local";
import { type EmbeddedBridge, startEmbeddedBridge } from "@remote-task/bridge/node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConnectionError, createClient, InvalidRequestError } from "../src/index.js";
import { eventually } from "./helpers/assertions.js";
import { type CutProxy, startCutProxy } from "./helpers/cut-proxy.js";
import { startGateProxy } from "./helpers/gate-proxy.js";

const CHILD = fileURLToPath(new URL("./helpers/durable-child.ts", import.meta.url));
const CALLS = 100;

let bridge: EmbeddedBridge;
let proxy: CutProxy;
/** Where commands leave a line each time they run (not under /tmp: sandboxes' leftovers there are swept). */
let markers: string;

beforeAll(async () => {
  bridge = await startEmbeddedBridge({
    backend: createLocalBackend({ isolation: "none" }),
    admission: { maxConcurrent: 16 },
    logger: silentLogger,
  });
  proxy = await startCutProxy(Number(new URL(bridge.url).port), 1_500);
  markers = mkdtempSync(join(fileURLToPath(new URL(".", import.meta.url)), ".durable-"));
  chmodSync(markers, 0o777);
});

afterAll(async () => {
  await proxy?.close();
  await bridge?.close();
  if (markers !== undefined) rmSync(markers, { recursive: true, force: true });
});

function processesWith(text: string): string[] {
  const out = execFileSync("ps", ["-eo", "args"], { encoding: "utf8", maxBuffer: 1 << 28 });
  return out.split("\n").filter((line) => line.includes(text) && !line.includes("ps -eo"));
}

describe("durable calls through a proxy that cuts every connection", () => {
  it("returns each call's own output once; each command ran once; no process left", async () => {
    const client = createClient({ url: proxy.url, token: bridge.token, timeoutSeconds: 60 });
    try {
      const tasks = Array.from(
        { length: CALLS },
        (_, i) => `echo ran >> ${markers}/m-${i}; sleep 1; echo done-${i}`,
      );
      const settled = await client.runMany(tasks, { concurrency: 32 });
      // Every call ends with its own output: a cut after the bridge read the request re-attaches,
      // one before it is sent again (the bridge's status proves it never arrived). A failure, a
      // second run or a wrong output fails the test.
      const failures = settled.flatMap((task) => (task.status === "rejected" ? [task] : []));
      expect(failures.map((task) => String(task.reason))).toEqual([]);
      for (const task of settled) {
        if (task.status !== "fulfilled") continue;
        expect(task.value.stdout).toBe(`done-${task.index}\n`);
        expect(task.value.exitCode).toBe(0);
        expect(readFileSync(join(markers, `m-${task.index}`), "utf8")).toBe("ran\n");
      }
      for (const name of readdirSync(markers).filter((file) => file.startsWith("m-"))) {
        expect(readFileSync(join(markers, name), "utf8")).toBe("ran\n");
      }
      expect(proxy.cuts).toBeGreaterThan(CALLS / 2);
      await eventually(() => processesWith(markers).length === 0, 10_000);
    } finally {
      await client.close();
    }
  });

  it("a streamed call re-attaches from where it was: each line delivered once, in order", async () => {
    const client = createClient({ url: proxy.url, token: bridge.token, timeoutSeconds: 60 });
    try {
      const expected = "line-1\nline-2\nline-3\nline-4\nline-5\n";
      const calls = Array.from({ length: 10 }, async () => {
        const seen: string[] = [];
        const result = await client.run("for i in 1 2 3 4 5; do echo line-$i; sleep 0.3; done", {
          onOutput: (event) => seen.push(event.data),
        });
        return { seen: seen.join(""), stdout: result.stdout };
      });
      for (const { seen, stdout } of await Promise.all(calls)) {
        expect(seen).toBe(expected);
        expect(stdout).toBe(expected);
      }
    } finally {
      await client.close();
    }
  });

  it("without re-attach (a bridge without durable calls) the same cut is a ConnectionError", async () => {
    const plain = await startEmbeddedBridge({
      backend: createLocalBackend({ isolation: "none" }),
      durable: false,
      logger: silentLogger,
    });
    const cutting = await startCutProxy(Number(new URL(plain.url).port), 0);
    const client = createClient({ url: cutting.url, token: plain.token, timeoutSeconds: 30 });
    try {
      const error = await client.run("sleep 1; echo never-seen").catch((caught: unknown) => caught);
      expect(ConnectionError.isInstance(error)).toBe(true);
      expect((error as ConnectionError).mayHaveRun).toBe(true);
    } finally {
      await client.close();
      await cutting.close();
      await plain.close();
    }
  });
});

describe("a request cut before the bridge read it", () => {
  it("is sent again once the bridge's status proves it never arrived, and runs once", async () => {
    const gate = await startGateProxy(Number(new URL(bridge.url).port), { cutBodies: 1 });
    const client = createClient({ url: gate.url, token: bridge.token, timeoutSeconds: 30 });
    try {
      const result = await client.run(`echo ran >> ${markers}/cut-json; echo json-out`);
      expect(result).toMatchObject({ stdout: "json-out\n", exitCode: 0 });
      expect(gate.cuts).toBe(1);
      expect(readFileSync(join(markers, "cut-json"), "utf8")).toBe("ran\n");
    } finally {
      await client.close();
      await gate.close();
    }
  });

  it("a streamed call is sent again too: its output once, in order", async () => {
    const gate = await startGateProxy(Number(new URL(bridge.url).port), { cutBodies: 1 });
    const client = createClient({ url: gate.url, token: bridge.token, timeoutSeconds: 30 });
    try {
      const seen: string[] = [];
      const result = await client.run(`echo ran >> ${markers}/cut-sse; echo a; echo b`, {
        onOutput: (event) => seen.push(event.data),
      });
      expect(seen.join("")).toBe("a\nb\n");
      expect(result).toMatchObject({ stdout: "a\nb\n", exitCode: 0 });
      expect(gate.cuts).toBe(1);
      expect(readFileSync(join(markers, "cut-sse"), "utf8")).toBe("ran\n");
    } finally {
      await client.close();
      await gate.close();
    }
  });

  it("start() whose request was cut before the bridge had it sends it again: a handle, one run", async () => {
    const gate = await startGateProxy(Number(new URL(bridge.url).port), { cutBodies: 1 });
    const client = createClient({ url: gate.url, token: bridge.token, timeoutSeconds: 30 });
    try {
      const handle = await client.start(`echo ran >> ${markers}/cut-start; echo detached`);
      expect(await handle.result()).toMatchObject({ stdout: "detached\n", exitCode: 0 });
      expect(gate.cuts).toBe(1);
      expect(readFileSync(join(markers, "cut-start"), "utf8")).toBe("ran\n");
    } finally {
      await client.close();
      await gate.close();
    }
  });

  it("start() whose answer was cut gets its handle from the bridge that took the call", async () => {
    const gate = await startGateProxy(Number(new URL(bridge.url).port), { cutAnswers: 1 });
    const client = createClient({ url: gate.url, token: bridge.token, timeoutSeconds: 30 });
    try {
      const handle = await client.start(`echo ran >> ${markers}/cut-answer; echo taken`);
      expect(await handle.result()).toMatchObject({ stdout: "taken\n", exitCode: 0 });
      expect(gate.cuts).toBe(1);
      expect(readFileSync(join(markers, "cut-answer"), "utf8")).toBe("ran\n");
    } finally {
      await client.close();
      await gate.close();
    }
  });

  it("after a bridge restart (a new instance) the call may have run: never sent again", async () => {
    const first = await startEmbeddedBridge({
      backend: createLocalBackend({ isolation: "none" }),
      logger: silentLogger,
    });
    const gate = await startGateProxy(Number(new URL(first.url).port));
    const client = createClient({ url: gate.url, token: first.token, timeoutSeconds: 30 });
    let second: EmbeddedBridge<LocalBackend> | undefined;
    try {
      const marker = join(markers, "restart");
      const call = client.run(`echo ran >> ${marker}; sleep 20`).catch((caught: unknown) => caught);
      await eventually(() => existsSync(marker), 15_000);
      // The bridge restarts while the call's connection is cut: what it ran is gone with it.
      second = await startEmbeddedBridge({
        backend: createLocalBackend({ isolation: "none" }),
        token: first.token,
        logger: silentLogger,
      });
      gate.retarget(Number(new URL(second.url).port));
      gate.cutAll();
      await first.close();
      const error = await call;
      expect(ConnectionError.isInstance(error)).toBe(true);
      expect((error as ConnectionError).mayHaveRun).toBe(true);
      expect(readFileSync(marker, "utf8")).toBe("ran\n");
      expect(second.backend.liveSandboxes()).toBe(0);
    } finally {
      await client.close();
      await gate.close();
      await first.close();
      await second?.close();
    }
  });
});

describe("handles", () => {
  it("start() returns a handle: its events from a byte offset, its result, its cancel", async () => {
    const client = createClient({ url: bridge.url, token: bridge.token, timeoutSeconds: 30 });
    try {
      const handle = await client.start("echo abcdef; sleep 0.3; echo later");
      const seen: string[] = [];
      for await (const event of handle.stream({ from: { stdout: 3 } })) {
        if (event.type === "stdout") seen.push(event.data);
      }
      expect(seen.join("")).toBe("def\nlater\n");
      expect(await handle.result()).toMatchObject({ stdout: "abcdef\nlater\n", exitCode: 0 });
      expect(await handle.status()).toMatchObject({ state: "finished" });

      const long = await client.start("sleep 30");
      expect(await long.cancel()).toMatchObject({ cancelled: true });
      expect(await long.result()).toMatchObject({ outcome: "cancelled" });
    } finally {
      await client.close();
    }
  });

  it("start() against a bridge without durable calls is refused before sending", async () => {
    const plain = await startEmbeddedBridge({
      backend: createLocalBackend({ isolation: "none" }),
      durable: false,
      logger: silentLogger,
    });
    const client = createClient({ url: plain.url, token: plain.token });
    try {
      const error = await client.start("echo never").catch((caught: unknown) => caught);
      expect(InvalidRequestError.isInstance(error)).toBe(true);
      expect((error as InvalidRequestError).mayHaveRun).toBe(false);
      expect(plain.backend.liveSandboxes()).toBe(0);
    } finally {
      await client.close();
      await plain.close();
    }
  });
});

describe("re-attach from another process", () => {
  it("gets the result of a detached call after the client that started it was killed", async () => {
    const started = spawn(process.execPath, [
      CHILD,
      "start",
      bridge.url,
      bridge.token,
      `sleep 2; echo survived >> ${markers}/killed; echo survived`,
    ]);
    const line = await new Promise<string>((resolve, reject) => {
      createInterface({ input: started.stdout }).once("line", resolve);
      started.once("exit", (code) => reject(new Error(`the first client exited (${code})`)));
    });
    const { sandboxId } = JSON.parse(line) as { sandboxId: string };
    started.kill("SIGKILL");
    const restarted = spawn(process.execPath, [
      CHILD,
      "attach",
      bridge.url,
      bridge.token,
      sandboxId,
    ]);
    let out = "";
    restarted.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
    });
    const code = await new Promise((resolve) => restarted.once("exit", resolve));
    expect(code).toBe(0);
    expect(JSON.parse(out)).toMatchObject({ sandboxId, stdout: "survived\n", exitCode: 0 });
    expect(readFileSync(join(markers, "killed"), "utf8")).toBe("survived\n");
  });
});
