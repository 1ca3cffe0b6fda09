import { execFileSync } from "node:child_process";
import { chmod, mkdtemp, readdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  ERROR_STATUS,
  type ErrorBody,
  type ErrorCode,
  errorBodySchema,
} from "@remote-task/protocol";
import { expect } from "vitest";
import {
  type BridgeHandler,
  type BridgeLogEntry,
  type BridgeLogger,
  type BridgeOptions,
  createBridge,
} from "../src/index.js";
import {
  createFakeBackend,
  type FakeBackendOptions,
  readStreamEvents,
} from "../src/testing/index.js";

export const TOKEN = "test-token-0123456789";

let counter = 0;
/** A sandbox id unique to this test run. */
export function freshId(prefix = "t"): string {
  counter++;
  return `${prefix}-${process.pid}-${counter}-${Math.random().toString(36).slice(2, 8)}`;
}

/** A Request for the bridge at a fake origin (or `base`). */
export function request(
  path: string,
  init: {
    method?: string;
    body?: unknown;
    raw?: BodyInit;
    token?: string | null;
    headers?: Record<string, string>;
    stream?: boolean;
    signal?: AbortSignal;
    base?: string;
  } = {},
): Request {
  const headers: Record<string, string> = { ...init.headers };
  const token = init.token === undefined ? TOKEN : init.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (init.stream) headers.accept = "text/event-stream";
  let body: BodyInit | undefined = init.raw;
  if (init.body !== undefined) {
    body = JSON.stringify(init.body);
    headers["content-type"] ??= "application/json";
  }
  return new Request(`${init.base ?? "http://bridge.test"}${path}`, {
    method: init.method ?? (body === undefined ? "GET" : "POST"),
    headers,
    ...(body === undefined ? {} : { body }),
    ...(init.signal ? { signal: init.signal } : {}),
    ...(body instanceof ReadableStream ? { duplex: "half" } : {}),
  } as RequestInit);
}

const openBridges: BridgeHandler[] = [];

/** A bridge (token {@link TOKEN}, memory logger) over a fake backend; see {@link shutdownBridges}. */
export function setupBridge(options: Partial<BridgeOptions> = {}, fake: FakeBackendOptions = {}) {
  const backend = createFakeBackend(fake);
  const logger = memoryLogger();
  const bridge = createBridge({ backend, token: TOKEN, logger, ...options });
  openBridges.push(bridge);
  const exec = (body: Record<string, unknown>, init: Parameters<typeof request>[1] = {}) =>
    bridge(request("/exec", { body: { sandboxId: freshId(), ...body }, ...init }));
  return { backend, bridge, logger, exec };
}

/** Has {@link shutdownBridges} shut `bridge` down too. */
export function trackBridge(bridge: BridgeHandler): void {
  openBridges.push(bridge);
}

/** Shuts down every bridge {@link setupBridge} made or {@link trackBridge} was given (for `afterEach`). */
export async function shutdownBridges(): Promise<void> {
  for (const bridge of openBridges.splice(0)) await bridge.shutdown();
}

/** Asserts a protocol error response with `code` and its status; returns the body. */
export async function expectError(response: Response, code: ErrorCode): Promise<ErrorBody> {
  const json: unknown = await response.json();
  const body = errorBodySchema.parse(json);
  expect(body.code, JSON.stringify(json)).toBe(code);
  expect(response.status).toBe(ERROR_STATUS[code]);
  return body;
}

/** Reads SSE events one at a time. */
export const events = readStreamEvents;

export async function eventually(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A logger that keeps every entry. */
export function memoryLogger(): BridgeLogger & { entries: BridgeLogEntry[] } {
  const entries: BridgeLogEntry[] = [];
  const logger = ((entry: BridgeLogEntry) => {
    entries.push(entry);
  }) as BridgeLogger & { entries: BridgeLogEntry[] };
  logger.entries = entries;
  return logger;
}

/**
 * `ps -eo <columns>` lines of every process. Room for a machine with thousands of processes with
 * long command lines (other checkouts' containers): `execFileSync`'s default 1 MiB is not.
 */
export function psLines(columns: string): string[] {
  return execFileSync("ps", ["-eo", columns], { encoding: "utf8", maxBuffer: 1 << 28 }).split("\n");
}

/** Command lines of running processes that contain `marker`. */
export function processesWith(marker: string): string[] {
  return psLines("pid=,stat=,args=")
    .filter((line) => line.includes(marker) && !/\sZ/.test(line.slice(0, 16)))
    .filter((line) => !line.includes("ps -eo"));
}

/**
 * Command lines of running processes that contain `marker` and descend from this process: what
 * this test started, never another test's or checkout's processes on the same machine.
 */
export function descendantsWith(marker: string): string[] {
  const rows = psLines("pid=,ppid=,stat=,args=")
    .map((line) => /^\s*(\d+)\s+(\d+)\s+(\S+)\s(.*)$/.exec(line))
    .filter((match): match is RegExpExecArray => match !== null)
    .map(([, pid, ppid, stat, args]) => ({ pid: Number(pid), ppid: Number(ppid), stat, args }));
  const parentOf = new Map(rows.map((row) => [row.pid, row.ppid]));
  const descends = (pid: number): boolean => {
    for (let at = parentOf.get(pid); at !== undefined && at > 1; at = parentOf.get(at)) {
      if (at === process.pid) return true;
    }
    return false;
  };
  return rows
    .filter((row) => row.args?.includes(marker) && !row.stat?.startsWith("Z") && descends(row.pid))
    .map((row) => `${row.pid} ${row.args}`);
}

/** A `sleep` whose argument is unique, so `ps` can find it: `sleep 1000.<n>`. */
export function markedSleep(): { command: string; marker: string } {
  const marker = `1000.${process.pid}${Math.floor(Math.random() * 1e6)}`;
  return { command: `sleep ${marker}`, marker };
}

/**
 * A fresh directory for a local backend's `tmpRoot`, traversable by other users (a root bridge
 * runs each sandbox as an unprivileged uid, which must reach its directory).
 */
export async function makeTmpRoot(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  await chmod(dir, 0o711);
  return dir;
}

/** Per-call directories a local backend has not removed (its state directory minus its own files). */
export async function leftoverCallDirs(backend: { stateDir: string }): Promise<string[]> {
  const entries = await readdir(backend.stateDir);
  return entries.filter((name) => name !== "passwd" && name !== "group");
}
