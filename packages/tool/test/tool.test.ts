import { AbortError, BridgeError, CapacityError } from "@remote-task/client";
import { DEFAULT_TIMEOUT_SECONDS } from "@remote-task/protocol";
import { describe, expect, it } from "vitest";
import {
  createRemoteTaskTool,
  isRemoteTaskAvailable,
  REMOTE_TASK_TOOL_NAME,
  remoteTaskTools,
} from "../src/index.js";
import { fakeClient, taskResult } from "./helpers/fake-client.js";

const ok = () => taskResult({ stdout: "ok\n" });

describe("createRemoteTaskTool: definition", () => {
  const tool = createRemoteTaskTool({ client: fakeClient(ok) });

  it("is named remote_task", () => {
    expect(tool.name).toBe("remote_task");
    expect(REMOTE_TASK_TOOL_NAME).toBe("remote_task");
  });

  it("describes the reference behaviour", () => {
    const d = tool.description;
    for (const phrase of [
      /fresh, throwaway remote sandbox/,
      /own new sandbox/,
      /parallel/,
      /none of your files or workspace/,
      /no credentials/,
      /Nothing persists/,
      /Put all input in the command/,
      /stdout/,
      /last 50 KB/,
      /summarise or filter/,
      /`timeout` \(seconds, default 120\)/,
    ]) {
      expect(d).toMatch(phrase);
    }
  });

  it("states the configured default timeout in description and schema", () => {
    const custom = createRemoteTaskTool({ client: fakeClient(ok), defaultTimeoutSeconds: 300 });
    expect(custom.description).toMatch(/default 300\)/);
    expect(custom.jsonSchema).toMatchObject({ properties: { timeout: { default: 300 } } });
  });

  it("accepts a replacement description", () => {
    const custom = createRemoteTaskTool({ client: fakeClient(ok), description: "Run it." });
    expect(custom.description).toBe("Run it.");
  });

  it("has exactly command (required, non-empty) and timeout (optional, positive, default 120)", () => {
    expect(tool.jsonSchema).toEqual({
      type: "object",
      properties: {
        command: { type: "string", minLength: 1, description: expect.any(String) },
        timeout: {
          type: "number",
          exclusiveMinimum: 0,
          default: DEFAULT_TIMEOUT_SECONDS,
          description: expect.any(String),
        },
      },
      required: ["command"],
    });
    expect(tool.parameters.parse({ command: "ls" })).toEqual({ command: "ls", timeout: 120 });
    expect(tool.parameters.safeParse({ command: "" }).success).toBe(false);
    expect(tool.parameters.safeParse({ command: "ls", timeout: 0 }).success).toBe(false);
    expect(tool.parameters.safeParse({ timeout: 5 }).success).toBe(false);
  });

  it("refuses a non-positive default timeout", () => {
    expect(() =>
      createRemoteTaskTool({ client: fakeClient(ok), defaultTimeoutSeconds: 0 }),
    ).toThrow(RangeError);
  });
});

describe("createRemoteTaskTool: execute", () => {
  it("sends only the command, the timeout and the signal (never env or cwd)", async () => {
    const client = fakeClient(ok);
    const tool = createRemoteTaskTool({ client });
    const signal = new AbortController().signal;
    await tool.execute(
      { command: "echo hi", env: { GH_TOKEN: "secret" }, cwd: "/etc" },
      { signal },
    );
    await tool.execute({ command: "sleep 1", timeout: 7 });
    expect(client.runs).toEqual([
      { command: "echo hi", options: { timeoutSeconds: 120, signal } },
      { command: "sleep 1", options: { timeoutSeconds: 7, signal: undefined } },
    ]);
  });

  it("returns a success result with the client's result", async () => {
    const result = await createRemoteTaskTool({ client: fakeClient(ok) }).execute({ command: "x" });
    expect(result).toEqual({ text: "ok\n", isError: false, status: "success", result: ok() });
  });

  it("turns invalid arguments into an error result without calling the bridge", async () => {
    const client = fakeClient(ok);
    const tool = createRemoteTaskTool({ client });
    const empty = await tool.execute({ command: "" });
    expect(empty).toMatchObject({ isError: true, status: "error" });
    expect(empty.text).toBe(
      'Invalid remote_task arguments: command must not be empty. Pass {"command": "<shell command>", "timeout": <seconds, optional>}.',
    );
    const notObject = await tool.execute("ls");
    expect(notObject).toMatchObject({ isError: true, status: "error" });
    expect(client.runs).toHaveLength(0);
  });

  it("names the model's parameter `timeout` (not the protocol's timeoutSeconds) in its invalid-arguments text", async () => {
    const tool = createRemoteTaskTool({ client: fakeClient(ok) });
    expect((await tool.execute({ command: "x", timeout: -1 })).text).toBe(
      'Invalid remote_task arguments: timeout must be greater than 0. Pass {"command": "<shell command>", "timeout": <seconds, optional>}.',
    );
    expect((await tool.execute({ command: "x", timeout: "a" })).text).toMatch(
      /^Invalid remote_task arguments: timeout: /,
    );
  });

  it("shows a capacity failure in the client's words, which say how long the call waited", async () => {
    const waited =
      "The bridge had no capacity for the whole of the call's 120 s (waited 119.6 s, 7 attempts; HTTP 429): the command did not run.";
    const tool = createRemoteTaskTool({
      client: fakeClient(() => {
        throw new CapacityError(waited, {
          status: 429,
          bridgeMessage: "The bridge is at its limit of 4 running and 0 waiting calls.",
        });
      }),
    });
    expect(await tool.execute({ command: "x" })).toEqual({
      text: waited,
      isError: true,
      status: "error",
    });
  });

  it("reports an abort during the call as aborted", async () => {
    const controller = new AbortController();
    const tool = createRemoteTaskTool({
      client: fakeClient(async () => {
        controller.abort();
        throw new AbortError("The call was aborted.");
      }),
    });
    const result = await tool.execute({ command: "sleep 60" }, { signal: controller.signal });
    expect(result).toEqual({ text: "remote_task aborted", isError: true, status: "aborted" });
  });

  it("does not start a call whose signal is already aborted", async () => {
    const client = fakeClient(ok);
    const result = await createRemoteTaskTool({ client }).execute(
      { command: "x" },
      { signal: AbortSignal.abort() },
    );
    expect(result.text).toBe("remote_task aborted");
    expect(client.runs).toHaveLength(0);
  });

  it("carries the client's message for bridge errors", async () => {
    const tool = createRemoteTaskTool({
      client: fakeClient(() => {
        throw new BridgeError("The bridge failed to start the sandbox (HTTP 502). Try again.");
      }),
    });
    expect(await tool.execute({ command: "x" })).toEqual({
      text: "The bridge failed to start the sandbox (HTTP 502). Try again.",
      isError: true,
      status: "error",
    });
  });

  it("never throws, even for unexpected failures", async () => {
    const tool = createRemoteTaskTool({
      client: fakeClient(() => {
        throw new TypeError("boom");
      }),
    });
    expect(await tool.execute({ command: "x" })).toEqual({
      text: "remote_task failed unexpectedly: boom",
      isError: true,
      status: "error",
    });
  });

  it("reports a missing bridge configuration as an error result", async () => {
    const tool = createRemoteTaskTool({ env: {} });
    const result = await tool.execute({ command: "x" });
    expect(result.isError).toBe(true);
    expect(result.status).toBe("error");
    expect(result.text).toMatch(/CLOUDFLARE_SANDBOX_URL/);
  });

  it("does not leak a token or URL from env into error texts", async () => {
    const tool = createRemoteTaskTool({
      env: { CLOUDFLARE_SANDBOX_URL: "not a url s3cr3t", CLOUDFLARE_SANDBOX_TOKEN: "tok-s3cr3t" },
    });
    const result = await tool.execute({ command: "x" });
    expect(result.isError).toBe(true);
    expect(result.text).not.toMatch(/s3cr3t/);
  });
});

describe("availability", () => {
  it("offers the tool only when the bridge URL is set and valid", () => {
    expect(isRemoteTaskAvailable({})).toBe(false);
    expect(isRemoteTaskAvailable({ CLOUDFLARE_SANDBOX_URL: "" })).toBe(false);
    expect(isRemoteTaskAvailable({ CLOUDFLARE_SANDBOX_URL: "not a url" })).toBe(false);
    expect(isRemoteTaskAvailable({ CLOUDFLARE_SANDBOX_URL: "https://b.example.dev" })).toBe(true);
    expect(isRemoteTaskAvailable({ MIKAN_CLOUDFLARE_SANDBOX_URL: "https://b.example.dev" })).toBe(
      true,
    );
    expect(remoteTaskTools({})).toEqual([]);
    const tools = remoteTaskTools({ CLOUDFLARE_SANDBOX_URL: "https://b.example.dev" });
    expect(tools.map((t) => t.name)).toEqual(["remote_task"]);
  });
});
