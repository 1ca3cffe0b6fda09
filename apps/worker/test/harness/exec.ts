/**
 * Docker exec sessions on the fake engine's containers (engine.ts): what workerd's
 * `ctx.container.exec` uses. `POST /containers/{id}/exec` makes a session, `POST /exec/{id}/start`
 * runs its command as a process of the container's tree (through its relay: container.ts,
 * relay.ts), and `GET /exec/{id}/json` reports whether it runs and its exit code.
 *
 * An attached start is hijacked (`Upgrade: tcp`, answered `101 UPGRADED`): the bytes that follow
 * are the command's stdin until the client closes its side, and its output goes back as Docker's
 * multiplexed frames (stream 1 stdout, 2 stderr), or raw when the session asked for a TTY (no
 * terminal is made: stdout and stderr are simply merged). A detached start (`Detach: true`, how
 * workerd sends `kill()`) answers at once and runs the command with its output dropped.
 * The stream ends once the command has exited and its exit code is known; a command whose
 * container dies under it ends with 137, as after a SIGKILL.
 */
import { randomBytes } from "node:crypto";
import type { Socket } from "node:net";
import type { Readable } from "node:stream";
import type { Container } from "./container.ts";

/** The body of `POST /containers/{id}/exec`, as workerd sends it. */
export interface ExecConfig {
  Cmd?: string[];
  Env?: string[];
  WorkingDir?: string;
  User?: string;
  Tty?: boolean;
  AttachStdin?: boolean;
  AttachStdout?: boolean;
  AttachStderr?: boolean;
}

/** One command run in a container, as the engine's records keep it. */
export interface ExecRecord {
  id: string;
  argv: readonly string[];
  env: readonly string[];
  cwd: string | undefined;
  /** Set once it was started; `detached` when its output was not asked for. */
  startedAt?: number;
  detached?: boolean;
  /** Set once it has exited. */
  exitCode?: number;
  /** Why it could not run (the relay's words), if it could not. */
  error?: string;
}

/** The shell line workerd wraps each command in, so that `kill()` can find its pid. */
const WORKERD_WRAPPER = /^echo \$\$ > \/tmp\/\.workerd-exec-[\w-]+\.pid; exec "\$@"$/;

/**
 * The command a Durable Object passed to `ctx.container.exec`: workerd runs it as
 * `/bin/sh -c 'echo $$ > /tmp/.workerd-exec-<uuid>.pid; exec "$@"' sh <argv...>`; `undefined`
 * for an exec workerd made itself (its `kill()`: `kill -15 "$(cat <that file>)"`, detached).
 */
export function commandOf(record: ExecRecord): readonly string[] | undefined {
  const [shell, flag, line, name, ...argv] = record.argv;
  if (shell !== "/bin/sh" || flag !== "-c" || name !== "sh" || !WORKERD_WRAPPER.test(line ?? "")) {
    return undefined;
  }
  return argv;
}

/** The frame stream relay.ts carries the exit code on. */
const EXIT_STREAM = 3;
/** Exit codes when a command cannot run, as Docker's: not found, or not executable. */
const NOT_FOUND = 127;
const CANNOT_RUN = 126;
/** A command whose container died under it (no exit code came back). */
const KILLED = 137;

function frame(stream: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(8);
  header[0] = stream;
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}

/** Splits Docker multiplexed frames out of a byte stream. */
class FrameReader {
  #pending: Buffer = Buffer.alloc(0);
  readonly #onFrame: (stream: number, payload: Buffer) => void;

  constructor(onFrame: (stream: number, payload: Buffer) => void) {
    this.#onFrame = onFrame;
  }

  push(chunk: Buffer): void {
    this.#pending = this.#pending.length === 0 ? chunk : Buffer.concat([this.#pending, chunk]);
    while (this.#pending.length >= 8) {
      const length = this.#pending.readUInt32BE(4);
      if (this.#pending.length < 8 + length) return;
      this.#onFrame(this.#pending[0] ?? 0, this.#pending.subarray(8, 8 + length));
      this.#pending = this.#pending.subarray(8 + length);
    }
  }
}

export class ExecSession {
  readonly record: ExecRecord;
  readonly #config: ExecConfig;
  readonly #containerId: string;
  /** The container's process once it runs (it may still be in a cold start). */
  readonly #ready: () => Promise<Container | undefined>;
  /** Variables the engine adds (the outbound proxy), before the session's own. */
  readonly #engineEnv: readonly string[];
  #running = false;

  constructor(
    containerId: string,
    config: ExecConfig,
    ready: () => Promise<Container | undefined>,
    engineEnv: readonly string[] = [],
  ) {
    this.#containerId = containerId;
    this.#config = config;
    this.#ready = ready;
    this.#engineEnv = engineEnv;
    this.record = {
      id: randomBytes(32).toString("hex"),
      argv: config.Cmd ?? [],
      env: config.Env ?? [],
      cwd: config.WorkingDir || undefined,
    };
  }

  get started(): boolean {
    return this.record.startedAt !== undefined;
  }

  /** `GET /exec/{id}/json`. */
  inspect(): Record<string, unknown> {
    const [entrypoint, ...args] = this.record.argv;
    return {
      ID: this.record.id,
      ContainerID: this.#containerId,
      Running: this.#running,
      ExitCode: this.record.exitCode ?? null,
      Pid: 0,
      OpenStdin: this.#config.AttachStdin === true,
      OpenStdout: this.#config.AttachStdout === true,
      OpenStderr: this.#config.AttachStderr === true,
      CanRemove: false,
      DetachKeys: "",
      ProcessConfig: {
        tty: this.#config.Tty === true,
        entrypoint: entrypoint ?? "",
        arguments: args,
        privileged: false,
        user: this.#config.User ?? "",
      },
    };
  }

  /**
   * Runs the command. With `client` (a hijacked connection, the 101 already sent), `stdin` (what
   * the client sent after its request, to its end) is its stdin and its output goes to the
   * client; without, it runs detached. Resolves once it has exited.
   */
  async start(client: Socket | undefined, stdin?: Readable): Promise<void> {
    this.record.startedAt = Date.now();
    if (client === undefined) this.record.detached = true;
    this.#running = true;
    const tty = this.#config.Tty === true;
    const send = (stream: number, payload: Buffer) => {
      if (client === undefined || client.destroyed) return;
      if (stream === 1 && this.#config.AttachStdout === false) return;
      if (stream === 2 && this.#config.AttachStderr === false) return;
      client.write(tty ? payload : frame(stream, payload));
    };
    const container = await this.#ready();
    const relay =
      container === undefined ? "the container is not running" : await container.exec(this.#spec());
    if (typeof relay === "string") {
      this.record.error = relay;
      send(2, Buffer.from(`harness exec: ${relay}\n`));
      this.#finish(/^spawn .* ENOENT$/.test(relay) ? NOT_FOUND : CANNOT_RUN, client);
      return;
    }
    let exitCode: number | undefined;
    const reader = new FrameReader((stream, payload) => {
      if (stream === EXIT_STREAM) exitCode = payload.readInt32BE(0);
      else send(stream, payload);
    });
    relay.on("data", (chunk: Buffer) => reader.push(chunk));
    relay.on("error", () => {});
    const ended = new Promise<void>((resolve) => relay.once("close", () => resolve()));
    if (stdin !== undefined && this.#config.AttachStdin === true) stdin.pipe(relay);
    else relay.end();
    client?.on("error", () => {});
    relay.resume();
    await ended;
    this.#finish(exitCode ?? KILLED, client);
  }

  #spec() {
    return {
      argv: this.record.argv,
      env: [...this.#engineEnv, ...this.record.env],
      ...(this.record.cwd === undefined ? {} : { cwd: this.record.cwd }),
    };
  }

  /** The exit code is known before the stream ends: workerd asks for it once it has ended. */
  #finish(exitCode: number, client: Socket | undefined): void {
    this.record.exitCode = exitCode;
    this.#running = false;
    if (client !== undefined && !client.destroyed) client.end();
  }
}
