/**
 * Sandboxes are started by a small helper process, not by the bridge itself. Node starts a process
 * with fork(), whose cost grows with the memory of the process that forks: about 1 ms from a fresh
 * Node process, 4 to 16 ms (with the event loop blocked) from a bridge that grew to 130 MB. The
 * helper stays small. For each command it spawns the process (the sandbox's first process stops at
 * its gate), hands its stdout and stderr to the bridge (descriptor passing over the IPC channel),
 * reports the first process, puts it in the sandbox's cgroups, opens the gate and reports the exit.
 * When the bridge goes away, even by SIGKILL, the helper kills every sandbox it started and exits,
 * so a command does not outlive its bridge.
 */
import { type ChildProcess, type StdioOptions, spawn } from "node:child_process";
import type { Socket } from "node:net";
import type { Readable, Writable } from "node:stream";

/** One command to start; every extra descriptor (3 and up) is a pipe. */
export interface SpawnRequest {
  file: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
  uid?: number;
  /**
   * Whether the command's standard input is a pipe the bridge writes (handed over like the
   * output pipes); otherwise it is `/dev/null`.
   */
  stdin: boolean;
  /** How many pipes after stdout and stderr (descriptors 3, 4, ...). */
  extraPipes: number;
  /**
   * Written to pipes right after the start, then closed (bubblewrap's `--args`, `--seccomp`):
   * `data` is text, or bytes in base64 with `base64: true`.
   */
  inputs?: Array<{ fd: number; data: string; base64?: boolean }>;
  /**
   * A pipe on which the process reports the pid of the sandbox's first process as JSON
   * `"child-pid": N` (bubblewrap's `--info-fd`); without it the spawned process is the first.
   */
  infoFd?: number;
  /**
   * The gate: the sandbox's first process waits reading this pipe (bubblewrap's `--block-fd`, or
   * the sandbox shell's `read`) until it is in the sandbox's cgroups; then `data` is written.
   */
  gate: { fd: number; data: string };
  /** The sandbox's cgroup directories (none: the gate opens at once). */
  cgroups: string[];
}

/** How the spawned process ended, or why it could not be run after all. */
type Exit = { code: number | null; signal: NodeJS.Signals | null; error?: string };

export interface SandboxProcess {
  /** The spawned process (it leads the sandbox's process group). */
  readonly pid: number;
  /**
   * The sandbox's first process: `pid`, or the PID namespace's first process under bubblewrap
   * (undefined if bubblewrap failed before it had one).
   */
  readonly first: Promise<number | undefined>;
  /** The command's standard input, when the request asked for a pipe. */
  readonly stdin: Writable | undefined;
  readonly stdout: Readable;
  readonly stderr: Readable;
  /**
   * Settles when the spawned process has exited: its code, or the signal that ended it, or
   * `error` when it was killed because it could not be confined (it never ran the command).
   */
  readonly exit: Promise<Exit>;
  /** True once the exit is known. */
  readonly exited: boolean;
}

type HelperMessage =
  | { t: "fd"; id: number; fd: 0 }
  | { t: "fd"; id: number; fd: 1; pid: number }
  | { t: "fd"; id: number; fd: 2 }
  | { t: "first"; id: number; first: number | null }
  | { t: "error"; id: number; message: string }
  | { t: "exit"; id: number; code: number | null; signal: NodeJS.Signals | null };

/**
 * The helper's program, run with `node -e`: self-contained, builtin modules only (this
 * function's source text is what runs).
 */
function helperMain(): void {
  // `node -e` code has a global `require`; the bundler must not see (and rewrite) a call to it.
  const load = (process.getBuiltinModule ??
    (globalThis as unknown as { require: NodeJS.Require }).require) as (id: string) => unknown;
  const { spawn: start } = load("node:child_process") as typeof import("node:child_process");
  const { readFileSync, writeFileSync } = load("node:fs") as typeof import("node:fs");
  const { writeFile } = load("node:fs/promises") as typeof import("node:fs/promises");
  const send = (message: unknown, handle?: unknown) => {
    if (process.connected) (process.send as (m: unknown, h?: unknown) => boolean)(message, handle);
  };
  const kill = (pid: number) => {
    try {
      process.kill(pid, "SIGKILL");
    } catch {}
  };
  const running = new Map<number, { pid: number; cgroup: string | undefined }>();
  process.on("disconnect", () => {
    for (const { pid, cgroup } of running.values()) {
      kill(-pid);
      if (cgroup === undefined) continue;
      try {
        writeFileSync(`${cgroup}/cgroup.kill`, "1");
        continue;
      } catch {}
      try {
        for (const member of readFileSync(`${cgroup}/cgroup.procs`, "utf8").split("\n"))
          if (member !== "") kill(Number(member));
      } catch {}
    }
    process.exit(0);
  });
  process.on("message", (request: SpawnRequest & { id: number }) => {
    const { id } = request;
    const stdio: ("ignore" | "pipe")[] = [request.stdin ? "pipe" : "ignore", "pipe", "pipe"];
    for (let i = 0; i < request.extraPipes; i++) stdio.push("pipe");
    let child: ReturnType<typeof start>;
    try {
      child = start(request.file, request.args, {
        cwd: request.cwd,
        env: request.env,
        detached: true,
        stdio,
        ...(request.uid === undefined ? {} : { uid: request.uid, gid: request.uid }),
      });
    } catch (error) {
      send({ t: "error", id, message: (error as Error).message });
      return;
    }
    type Pipe = {
      _handle?: { readStop(): void };
      on(event: string, listener: (chunk: string) => void): void;
      end(data?: string | Uint8Array): void;
      setEncoding(encoding: string): void;
    };
    const pipes = child.stdio as unknown as (Pipe | null)[];
    // Not one byte of the output may be read here: it belongs to the bridge, which gets the pipes.
    pipes[1]?._handle?.readStop();
    pipes[2]?._handle?.readStop();
    child.once("error", (error) => send({ t: "error", id, message: error.message }));
    const pid = child.pid;
    if (pid === undefined) return;
    running.set(id, { pid, cgroup: request.cgroups[0] });
    child.once("exit", (code, signal) => {
      running.delete(id);
      send({ t: "exit", id, code, signal });
    });
    for (const pipe of pipes.slice(3)) pipe?.on("error", () => {});
    for (const { fd, data, base64 } of request.inputs ?? [])
      pipes[fd]?.end(base64 === true ? Buffer.from(data, "base64") : data);
    // The pipes go to the bridge at once (what the command writes before the bridge reads waits
    // in them, unread here; the bridge writes its input). Once the sandbox's first process is known it joins the
    // cgroups (a migration waits for an RCU grace period: off this loop, so that other spawns go
    // on; under bubblewrap it overlaps the sandbox's setup), then the gate opens.
    if (child.stdin !== null) send({ t: "fd", id, fd: 0 }, child.stdin);
    send({ t: "fd", id, fd: 1, pid }, child.stdout);
    send({ t: "fd", id, fd: 2 }, child.stderr);
    const known = (first: number | undefined) => {
      send({ t: "first", id, first: first ?? null });
      // No first process: bubblewrap failed before it made the sandbox; its exit and its message
      // on stderr say why.
      if (first === undefined) return;
      void Promise.all(
        request.cgroups.map((dir) => writeFile(`${dir}/cgroup.procs`, String(first))),
      )
        .then(() => pipes[request.gate.fd]?.end(request.gate.data))
        .catch((error: Error) => {
          kill(-pid);
          kill(first);
          send({ t: "error", id, message: `cannot join its cgroup: ${error.message}` });
        });
    };
    const info = request.infoFd === undefined ? undefined : pipes[request.infoFd];
    if (info == null) {
      known(pid);
      return;
    }
    let text = "";
    info.setEncoding("utf8");
    info.on("data", (chunk) => {
      text += chunk;
    });
    info.on("close", () => {
      const first = /"child-pid":\s*(\d+)/.exec(text)?.[1];
      known(first === undefined ? undefined : Number(first));
    });
  });
}

function deferred<T>(): { promise: Promise<T>; resolve(value: T): void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** A command between the spawn request and its exit. */
interface Call {
  resolve(process: SandboxProcess): void;
  reject(error: Error): void;
  stdin?: Writable | undefined;
  stdout?: Readable | undefined;
  pid?: number;
  first: ReturnType<typeof deferred<number | undefined>>;
  started: boolean;
  exit: ReturnType<typeof deferred<Exit>>;
  exited: boolean;
}

/** One helper process and the commands it has in flight. */
class Helper {
  private readonly calls = new Map<number, Call>();
  private nextId = 1;
  readonly process: ChildProcess;

  constructor(stdio: StdioOptions) {
    this.process = spawn(process.execPath, ["-e", `(${helperMain.toString()})()`], {
      stdio,
      env: {},
    });
    this.process.on("message", (message: HelperMessage, handle?: Socket) =>
      this.onMessage(message, handle),
    );
    this.process.once("exit", () => this.failAll());
    this.process.on("error", () => this.failAll());
    this.setRef(false);
  }

  get load(): number {
    return this.calls.size;
  }

  get usable(): boolean {
    return this.process.connected;
  }

  spawn(request: SpawnRequest): Promise<SandboxProcess> {
    const id = this.nextId++;
    return new Promise<SandboxProcess>((resolve, reject) => {
      const call: Call = {
        resolve,
        reject,
        first: deferred<number | undefined>(),
        started: false,
        exit: deferred<Exit>(),
        exited: false,
      };
      this.calls.set(id, call);
      this.setRef(true);
      this.process.send({ id, ...request });
    });
  }

  close(): void {
    if (this.process.connected) this.process.disconnect();
  }

  private onMessage(message: HelperMessage, handle?: Socket): void {
    const { id } = message;
    const call = this.calls.get(id);
    if (call === undefined) return;
    switch (message.t) {
      case "fd": {
        if (message.fd === 0) {
          call.stdin = handle;
          return;
        }
        if (message.fd === 1) {
          call.stdout = handle;
          call.pid = message.pid;
          return;
        }
        const { stdout, pid } = call;
        if (stdout === undefined || handle === undefined || pid === undefined) return;
        call.started = true;
        if (call.exited) this.finish(id);
        call.resolve({
          pid,
          first: call.first.promise,
          stdin: call.stdin,
          stdout,
          stderr: handle,
          exit: call.exit.promise,
          get exited() {
            return call.exited;
          },
        });
        return;
      }
      case "first":
        call.first.resolve(message.first ?? undefined);
        return;
      case "error":
        this.finish(id);
        call.first.resolve(undefined);
        if (call.started) {
          call.exit.resolve({ code: null, signal: null, error: message.message });
          return;
        }
        call.stdin?.destroy();
        call.stdout?.destroy();
        handle?.destroy();
        call.reject(new Error(message.message));
        return;
      case "exit":
        // A command may end before its output was handed over (bubblewrap refusing its
        // arguments); the handover or "error" that follows settles the start.
        call.exited = true;
        call.first.resolve(undefined);
        if (call.started) this.finish(id);
        call.exit.resolve({ code: message.code, signal: message.signal });
        return;
    }
  }

  private finish(id: number): void {
    this.calls.delete(id);
    if (this.calls.size === 0) this.setRef(false);
  }

  private failAll(): void {
    for (const [id, call] of this.calls) {
      this.calls.delete(id);
      if (!call.started) {
        call.stdin?.destroy();
        call.stdout?.destroy();
        call.reject(new Error("the process that starts sandboxes exited"));
      }
      call.first.resolve(undefined);
      call.exit.resolve({ code: null, signal: "SIGKILL" });
    }
  }

  /** A helper keeps the bridge's event loop alive only while one of its sandboxes runs. */
  private setRef(on: boolean): void {
    const channel = this.process.channel as { ref?: () => void; unref?: () => void } | undefined;
    if (on) {
      this.process.ref();
      channel?.ref?.();
    } else {
      this.process.unref();
      channel?.unref?.();
    }
  }
}

/**
 * Up to `size` helpers, started on demand: a spawn blocks its helper for about a millisecond, so
 * with several cores several helpers start sandboxes side by side.
 */
export class Spawner {
  private helpers: Helper[] = [];

  /** `stdio` of each helper: what the bridge inherited is /dev/null in it (see descriptors.ts). */
  constructor(
    private readonly helperStdio: StdioOptions,
    private readonly size: number,
  ) {}

  /** Starts a command; resolves once its output is handed over (it runs once inside its cgroups). */
  spawn(request: SpawnRequest): Promise<SandboxProcess> {
    this.helpers = this.helpers.filter((helper) => helper.usable);
    let helper = this.helpers.reduce<Helper | undefined>(
      (best, next) => (best === undefined || next.load < best.load ? next : best),
      undefined,
    );
    if (helper === undefined || (helper.load > 0 && this.helpers.length < this.size)) {
      helper = new Helper(this.helperStdio);
      this.helpers.push(helper);
    }
    return helper.spawn(request);
  }

  /** Stops the helpers (each kills what it still runs). */
  close(): void {
    for (const helper of this.helpers) helper.close();
    this.helpers = [];
  }
}
