import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import type { BridgeLogEntry } from "@remote-task/bridge";
import { readStreamEvents } from "@remote-task/bridge/testing";
import { newSandboxId, type StreamEvent } from "@remote-task/protocol";
import { expect } from "vitest";
import type { WorkerEnv } from "../src/config.js";
import worker from "../src/index.js";
import type { WarmPoolShardRpc } from "../src/warm-pool-rpc.js";
import { createWorker } from "../src/worker.js";
import type { FakeState, TestTaskContainer } from "./fake-container.js";

const TOKEN = "test-token-0123456789";
export const AUTH = { authorization: `Bearer ${TOKEN}` };

type Handler = {
  fetch(request: Request, env: WorkerEnv, ctx: ExecutionContext): Promise<Response>;
};

/** The test bindings (`env.TaskContainer` runs on fakes), optionally with some variables changed. */
export function workerEnv(
  overrides: Partial<
    Record<
      Exclude<keyof WorkerEnv, "TaskContainer" | "WarmPool" | "CallKeeper" | "CF_VERSION_METADATA">,
      string | undefined
    >
  > = {},
) {
  return { ...env, WarmPool: warmPoolNamespace(), ...overrides } as unknown as WorkerEnv;
}

export interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

/**
 * Sends one request to the Worker's fetch handler (the default export unless `handler` is
 * given), reads the whole response, then waits for everything it left in `waitUntil` (the
 * sandbox destroys), so a test can check the sandbox afterwards.
 */
export async function send(
  path: string,
  init: RequestInit & { env?: WorkerEnv; handler?: Handler } = {},
): Promise<Answer> {
  const { env: bindings = workerEnv(), handler = worker, ...requestInit } = init;
  const ctx = createExecutionContext();
  const response = await handler.fetch(
    new Request(`https://bridge.test${path}`, requestInit),
    bindings,
    ctx,
  );
  const text = await response.text();
  await waitOnExecutionContext(ctx);
  return { status: response.status, headers: response.headers, text };
}

/** `POST /exec` with the test token; JSON unless `stream` is set. */
export function exec(
  body: Record<string, unknown>,
  options: { env?: WorkerEnv; handler?: Handler; stream?: boolean; headers?: HeadersInit } = {},
): Promise<Answer> {
  return send("/exec", {
    method: "POST",
    headers: {
      ...AUTH,
      "content-type": "application/json",
      ...(options.stream ? { accept: "text/event-stream" } : {}),
      ...options.headers,
    },
    body: JSON.stringify(body),
    ...(options.env === undefined ? {} : { env: options.env }),
    ...(options.handler === undefined ? {} : { handler: options.handler }),
  });
}

/** Parses an SSE body into protocol stream events (each one validated). */
export function events(text: string): Promise<StreamEvent[]> {
  return readStreamEvents(new Response(text)).all();
}

/** `env.WarmPool` typed as the Worker sees it (the test binds the shard class with test hooks). */
export function warmPoolNamespace(): DurableObjectNamespace<WarmPoolShardRpc> {
  return env.WarmPool as unknown as DurableObjectNamespace<WarmPoolShardRpc>;
}

export function fakeNamespace(): DurableObjectNamespace<TestTaskContainer> {
  return env.TaskContainer as unknown as DurableObjectNamespace<TestTaskContainer>;
}

/** What the Worker did to the fake sandbox `sandboxId`. */
export function sandboxState(sandboxId: string): Promise<FakeState> {
  const ns = fakeNamespace();
  return ns.get(ns.idFromName(sandboxId)).fakeState();
}

/** Asserts that the sandbox ran one command and was destroyed. */
export async function expectDestroyed(sandboxId: string): Promise<FakeState> {
  const state = await sandboxState(sandboxId);
  expect(state.destroyCalls).toBeGreaterThanOrEqual(1);
  expect(state.destroyed).toBe(true);
  return state;
}

export function sandboxId(): string {
  return newSandboxId("wt");
}

/** A Worker handler whose bridge log entries are collected. */
export function loggingWorker(): { handler: Handler; entries: BridgeLogEntry[] } {
  const entries: BridgeLogEntry[] = [];
  return { handler: createWorker({ logger: (entry) => entries.push(entry) }), entries };
}
