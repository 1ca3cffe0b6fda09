/**
 * One harness "container": a local process tree under bubblewrap with its own network, PID, IPC
 * and UTS namespaces, the host's system directories read-only, a private /tmp, its own
 * /workspace (a fresh host directory), the server's files read-only, and a relay (relay.ts)
 * through which the host reaches the container's ports. Killing it kills every process in it:
 * bwrap runs as PID 1 of the namespace and takes its descendants with it.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, lstatSync, readlinkSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { constants, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { pidNamespaceOf, processesIn } from "./proc.ts";
import { strippedScript } from "./stripped.ts";

/** What a container runs: the files it needs and its command (its "image"). */
export interface ContainerImage {
  /** Shown in records and errors. */
  name: string;
  /** Host path -> path inside the container, bound read-only. */
  mounts: ReadonlyArray<{ host: string; inside: string }>;
  /** The server's command line inside the container. */
  command: readonly string[];
  /** Environment the image itself sets (the container's create request adds its own). */
  env: Readonly<Record<string, string>>;
}

const RELAY_SOURCE = strippedScript(fileURLToPath(new URL("./relay.ts", import.meta.url)));
const SYSTEM_DIRS = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"];
/** Where the harness's own files (the relay, the Node binary running it) sit inside. */
const HARNESS_DIR = "/opt/remote-task-harness";
const NODE_INSIDE = `${HARNESS_DIR}/node`;
const RELAY_SOCKET_INSIDE = `${HARNESS_DIR}/run/relay.sock`;
const LOG_LIMIT = 64 * 1024;
/** How long a command waits for the relay of a container just started. */
const RELAY_START_MS = 10_000;
/** The start of the reason `#open` gives when the relay did not answer at all. */
const UNREACHABLE = "relay unreachable: ";

function systemMounts(): string[] {
  const args: string[] = [];
  for (const dir of SYSTEM_DIRS) {
    if (!existsSync(dir)) continue;
    if (lstatSync(dir).isSymbolicLink()) args.push("--symlink", readlinkSync(dir), dir);
    else args.push("--ro-bind", dir, dir);
  }
  return args;
}

function shellQuote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/** A command run inside a container (relay.ts). */
export interface ExecSpec {
  argv: readonly string[];
  /** `NAME=value` entries added to the container's environment. */
  env?: readonly string[];
  /** Working directory (default: the container's, /workspace). */
  cwd?: string;
}

export interface ContainerOptions {
  image: ContainerImage;
  /** `NAME=value` entries of the create request. */
  env: readonly string[];
  /** What runs instead of the image's command (a create request's entrypoint and command). */
  command?: readonly string[] | undefined;
  /** Run nothing on the port (a server that never comes up). */
  neverListens?: boolean;
  /** The container's host name (`hostname` inside), as Docker sets it: its short id. */
  hostname?: string;
  /** Receives the container's stdout and stderr lines. */
  onLog?: (line: string) => void;
  /**
   * Receives each connection a command opens to the relay's outbound proxy port
   * (relay.ts); without it such connections are closed at once.
   */
  onEgress?: (socket: Socket) => void;
}

export class Container {
  readonly #root: string;
  readonly #child: ChildProcess;
  /** The last bytes the container printed (stdout and stderr). */
  log = "";
  /** Settles once bwrap has exited and no process of the container's PID namespace is left. */
  readonly exited: Promise<{ code: number }>;

  private constructor(
    root: string,
    child: ChildProcess,
    egress: Server,
    onLog?: (line: string) => void,
  ) {
    this.#root = root;
    this.#child = child;
    let partial = "";
    const collect = (chunk: Buffer) => {
      const text = chunk.toString("utf8");
      this.log = (this.log + text).slice(-LOG_LIMIT);
      if (onLog === undefined) return;
      const lines = (partial + text).split("\n");
      partial = lines.pop() ?? "";
      for (const line of lines) onLog(line);
    };
    child.stdout?.on("data", collect);
    child.stderr?.on("data", collect);
    const namespace = child.pid === undefined ? undefined : pidNamespaceOf(child.pid);
    this.exited = new Promise((resolve) => {
      child.once("exit", (code, signal) => {
        // The namespace's processes die just after bwrap, its PID 1, does.
        void emptied(namespace).then(() =>
          resolve({ code: code ?? 128 + (signal === null ? 0 : constants.signals[signal]) }),
        );
      });
      child.once("error", () => resolve({ code: 127 }));
    });
    void this.exited.then(() => egress.close());
  }

  /** The container's /workspace, as a host directory. */
  get workspace(): string {
    return join(this.#root, "workspace");
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  static async start(options: ContainerOptions): Promise<Container> {
    const root = await mkdtemp(join(tmpdir(), "rt-harness-container-"));
    await mkdir(join(root, "workspace"));
    await mkdir(join(root, "run"));
    const egress = createServer((socket) => {
      socket.on("error", () => {});
      if (options.onEgress === undefined) socket.destroy();
      else options.onEgress(socket);
    });
    await new Promise<void>((resolve) => egress.listen(join(root, "run", "egress.sock"), resolve));
    const { image } = options;
    const env: Record<string, string> = { ...image.env };
    for (const entry of options.env) {
      const equals = entry.indexOf("=");
      if (equals > 0) env[entry.slice(0, equals)] = entry.slice(equals + 1);
    }
    const settings = ["--clearenv"];
    for (const [name, value] of Object.entries(env)) settings.push("--setenv", name, value);
    const mounts = image.mounts.flatMap((m) => ["--ro-bind", m.host, m.inside]);
    const server = options.neverListens
      ? ["sleep", "infinity"]
      : (options.command ?? image.command);
    const entry = `${shellQuote(NODE_INSIDE)} ${shellQuote(`${HARNESS_DIR}/relay.mjs`)} ${shellQuote(RELAY_SOCKET_INSIDE)} & exec ${server.map(shellQuote).join(" ")}`;
    const child = spawn(
      "bwrap",
      [
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--hostname",
        options.hostname ?? "container",
        ...systemMounts(),
        "--tmpfs",
        "/tmp",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--bind",
        join(root, "workspace"),
        "/workspace",
        "--ro-bind",
        process.execPath,
        NODE_INSIDE,
        "--ro-bind",
        RELAY_SOURCE,
        `${HARNESS_DIR}/relay.mjs`,
        "--bind",
        join(root, "run"),
        `${HARNESS_DIR}/run`,
        ...mounts,
        ...settings,
        "--chdir",
        "/workspace",
        "--",
        "/bin/sh",
        "-c",
        entry,
      ],
      { stdio: ["ignore", "pipe", "pipe"], detached: true, env: { PATH: "/usr/bin:/bin" } },
    );
    return new Container(root, child, egress, options.onLog);
  }

  /**
   * Opens a connection to `port` inside the container through the relay; resolves `undefined`
   * when nothing listens there (yet).
   */
  async connect(port: number): Promise<Socket | undefined> {
    const opened = await this.#open(`${port}\n`, false);
    return typeof opened === "string" ? undefined : opened;
  }

  /**
   * Runs a command inside the container through the relay (relay.ts says what the socket then
   * carries); resolves the reason instead when it could not run.
   */
  async exec(spec: ExecSpec): Promise<Socket | string> {
    // The relay starts with the container: a command sent just after the start waits for it.
    const deadline = Date.now() + RELAY_START_MS;
    for (;;) {
      // Half-open: the command's stdin may end while its output still flows.
      const opened = await this.#open(`exec ${JSON.stringify(spec)}\n`, true);
      if (typeof opened !== "string" || !opened.startsWith(UNREACHABLE)) return opened;
      if (Date.now() > deadline || this.#child.exitCode !== null || this.#child.signalCode !== null)
        return opened;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  /** A relay connection after its first line: the socket once it says `+`, else its reason. */
  #open(first: string, allowHalfOpen: boolean): Promise<Socket | string> {
    return new Promise((resolve) => {
      const socket = createConnection({
        path: join(this.#root, "run", "relay.sock"),
        allowHalfOpen,
      });
      let answer = Buffer.alloc(0);
      const fail = (reason: string) => {
        socket.destroy();
        resolve(reason);
      };
      socket.once("error", (error) => fail(`${UNREACHABLE}${error.message}`));
      socket.once("end", () => fail(answer.toString("utf8").replace(/^-/, "").trim() || "closed"));
      socket.once("connect", () => socket.write(first));
      const onData = (chunk: Buffer) => {
        answer = Buffer.concat([answer, chunk]);
        const newline = answer.indexOf(10);
        if (newline === -1) return;
        if (answer[0] !== 0x2b /* + */) return;
        socket.off("data", onData);
        socket.removeAllListeners("error");
        socket.removeAllListeners("end");
        socket.pause();
        if (answer.length > newline + 1) socket.unshift(answer.subarray(newline + 1));
        resolve(socket);
      };
      socket.on("data", onData);
    });
  }

  /** Sends `signal` to every process of the container. */
  signal(signal: NodeJS.Signals): void {
    const pid = this.#child.pid;
    if (pid === undefined || this.#child.exitCode !== null || this.#child.signalCode !== null)
      return;
    try {
      process.kill(-pid, signal);
    } catch {
      // already gone
    }
  }

  /** Kills the container (if running), waits for it, and removes its directories. */
  async remove(): Promise<void> {
    this.signal("SIGKILL");
    await this.exited;
    await rm(this.#root, { recursive: true, force: true });
  }
}

/** Resolves once no process is left in the PID namespace (bounded: 5 s). */
async function emptied(namespace: Promise<string | undefined> | undefined): Promise<void> {
  const id = await namespace;
  if (id === undefined) return;
  const deadline = Date.now() + 5_000;
  while (processesIn(id).length > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
