import { type ChildProcess, fork } from "node:child_process";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { constants, type PerformanceEntry, PerformanceObserver } from "node:perf_hooks";
import { fileURLToPath } from "node:url";

/** Resident set now and its high-water mark, in bytes, read from /proc/<pid>/status. */
export interface MemoryStatus {
  rss: number;
  hwm: number;
}

export function memoryStatus(pid: number | "self"): MemoryStatus {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const field = (name: string): number => {
    const match = new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status);
    if (match?.[1] === undefined) throw new Error(`/proc/${pid}/status has no ${name} field`);
    return Number(match[1]) * 1024;
  };
  return { rss: field("VmRSS"), hwm: field("VmHWM") };
}

/** Resets the process's peak RSS (VmHWM) to its current RSS (Linux: clear_refs value 5). */
export function resetPeak(pid: number | "self"): void {
  writeFileSync(`/proc/${pid}/clear_refs`, "5");
}

/**
 * Peak RSS growth of a process over one operation: the high-water mark is reset first, and RSS is
 * also sampled every few milliseconds in case the kernel refuses the reset.
 */
export class PeakWatch {
  readonly pid: number | "self";
  readonly baseline: number;
  private sampled: number;
  private hwmUsable = true;
  private readonly timer: NodeJS.Timeout;

  constructor(pid: number | "self") {
    this.pid = pid;
    let resetWorked = true;
    try {
      resetPeak(pid);
    } catch {
      resetWorked = false;
    }
    this.baseline = memoryStatus(pid).rss;
    this.sampled = this.baseline;
    this.timer = setInterval(() => this.sample(), 5);
    if (!resetWorked) this.hwmUsable = false;
  }

  private sample(): void {
    try {
      this.sampled = Math.max(this.sampled, memoryStatus(this.pid).rss);
    } catch {
      // the process ended
    }
  }

  /** Stops sampling; returns the baseline, the peak and the growth, in bytes. */
  stop(): { baseline: number; peak: number; growth: number } {
    clearInterval(this.timer);
    this.sample();
    let peak = this.sampled;
    if (this.hwmUsable) {
      try {
        peak = Math.max(peak, memoryStatus(this.pid).hwm);
      } catch {
        // the process ended
      }
    }
    return { baseline: this.baseline, peak, growth: Math.max(0, peak - this.baseline) };
  }
}

interface RpcReply {
  id: number;
  ok: boolean;
  value?: unknown;
  error?: string;
}

/** A Node child process running one of bench/src/children/*.ts, driven by request/response messages. */
export class ChildRpc {
  private nextId = 1;
  private readonly pending = new Map<
    number,
    { resolve: (value: unknown) => void; reject: (error: Error) => void }
  >();
  private readonly exited: Promise<void>;
  readonly child: ChildProcess;

  private constructor(child: ChildProcess) {
    this.child = child;
    child.on("message", (message: RpcReply) => {
      const waiter = this.pending.get(message.id);
      if (waiter === undefined) return;
      this.pending.delete(message.id);
      if (message.ok) waiter.resolve(message.value);
      else waiter.reject(new Error(message.error ?? "child failed"));
    });
    this.exited = new Promise((resolve) => {
      child.once("exit", (code, signal) => {
        for (const waiter of this.pending.values()) {
          waiter.reject(new Error(`child exited (${code ?? signal}) before answering`));
        }
        this.pending.clear();
        resolve();
      });
    });
  }

  get pid(): number {
    if (this.child.pid === undefined) throw new Error("child has no pid");
    return this.child.pid;
  }

  /** Forks `bench/src/children/<name>.ts` with `args`; resolves once it answered `ready`. */
  static async start(
    name: string,
    args: readonly string[] = [],
    execArgv: readonly string[] = [],
  ): Promise<ChildRpc> {
    const script = fileURLToPath(new URL(`../children/${name}.ts`, import.meta.url));
    const child = fork(script, [...args], {
      execArgv: ["--expose-gc", ...execArgv],
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    const rpc = new ChildRpc(child);
    await rpc.call("ready");
    return rpc;
  }

  call<T = unknown>(op: string, params: unknown = {}): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.child.send({ id, op, params });
    });
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGTERM");
    await this.exited;
  }
}

type Handler = (params: never) => unknown;

/** The child side of {@link ChildRpc}: answers each `{id, op, params}` with its handler's value. */
export function serveRpc(handlers: Record<string, Handler>): void {
  const all: Record<string, Handler> = { ready: () => true, ...handlers };
  process.on("message", async (message: { id: number; op: string; params: unknown }) => {
    const handler = all[message.op];
    try {
      if (handler === undefined) throw new Error(`unknown op ${message.op}`);
      const value = await (handler as (params: unknown) => unknown)(message.params);
      process.send?.({ id: message.id, ok: true, value });
    } catch (error) {
      process.send?.({
        id: message.id,
        ok: false,
        error: error instanceof Error ? (error.stack ?? error.message) : String(error),
      });
    }
  });
  process.on("disconnect", () => process.exit(0));
}

/** Collects garbage when the process runs with --expose-gc (every bench child does). */
export function collectGarbage(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

/** Pids of the descendants of `root` whose command name is `name` (e.g. the `workerd` Miniflare runs). */
export function descendantsNamed(root: number, name: string): number[] {
  const parents = new Map<number, number>();
  const names = new Map<number, string>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      // pid (comm) state ppid ...; comm may contain spaces and parentheses.
      const close = stat.lastIndexOf(")");
      const comm = stat.slice(stat.indexOf("(") + 1, close);
      const ppid = Number(stat.slice(close + 2).split(" ")[1]);
      parents.set(Number(entry), ppid);
      names.set(Number(entry), comm);
    } catch {
      // the process ended while listing
    }
  }
  const isDescendant = (pid: number): boolean => {
    for (let p = parents.get(pid); p !== undefined && p > 1; p = parents.get(p)) {
      if (p === root) return true;
    }
    return false;
  };
  return [...names].filter(([pid, comm]) => comm === name && isDescendant(pid)).map(([pid]) => pid);
}

/** CPU time (user + system) a process has used so far, in ms, from /proc/<pid>/stat. */
export function cpuTimeMs(pid: number | "self"): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // Fields 14 and 15 of stat (utime, stime) are the 12th and 13th after the command name.
  const ticks = Number(fields[11]) + Number(fields[12]);
  return (ticks * 1000) / CLOCK_TICKS_PER_SECOND;
}

/** USER_HZ: 100 on every Linux architecture Node supports. */
const CLOCK_TICKS_PER_SECOND = 100;

/** Garbage collection in this process so far: time and the number of full and young collections. */
export interface GcTotals {
  ms: number;
  major: number;
  minor: number;
}

/** Starts counting this process's garbage collections; the function reads the totals so far. */
export function gcClock(): () => GcTotals {
  const totals: GcTotals = { ms: 0, major: 0, minor: 0 };
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      totals.ms += entry.duration;
      const kind = (entry as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) totals.major++;
      if (kind === constants.NODE_PERFORMANCE_GC_MINOR) totals.minor++;
    }
  });
  observer.observe({ entryTypes: ["gc"] });
  return () => ({ ...totals });
}

export function gcDelta(after: GcTotals, before: GcTotals): GcTotals {
  return {
    ms: after.ms - before.ms,
    major: after.major - before.major,
    minor: after.minor - before.minor,
  };
}
