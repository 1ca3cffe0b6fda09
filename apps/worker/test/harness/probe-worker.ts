/**
 * A test-only Worker with one Durable Object that drives `ctx.container` directly (no SDK, no
 * server in the container), for the harness's probes of workerd's native container path against
 * real Podman (podman-shim.test.ts) and the fake engine (fake-native.test.ts). Its source is a
 * string that Miniflare runs as a module (`Probe.start` runs it).
 *
 * `POST /<name>/<op>` goes to the Durable Object named `<name>`; the body is JSON:
 * - `start` `{ enableInternet, entrypoint, env }`: `ctx.container.start(...)`.
 * - `exec` `{ argv, cwd, env, stdin }`: runs it to the end (`stdin` a string written to the
 *   process, then closed); answers `{ stdout, stderr, exitCode }`.
 * - `kill` `{ argv }`: runs it, waits for its first output, `kill()`s it; answers
 *   `{ first, exitCode }`.
 * - `intercept`: `interceptAllOutboundHttp` and `interceptOutboundHttps("*")` to the Worker's
 *   `Gate` entrypoint (which answers every request itself); answers `{}`.
 * - `destroy`: `ctx.container.destroy()`; answers `{ running }`.
 * - `state`: answers `{ running }`.
 */
import { convertV4MiniflareOptions, Miniflare } from "miniflare";

const PROBE_CLASS = "Probe";

const PROBE_WORKER = `
import { DurableObject, WorkerEntrypoint } from "cloudflare:workers";

export class Gate extends WorkerEntrypoint {
  fetch(request) {
    return new Response("gate: " + request.method + " " + request.url + "\\n");
  }
}

const text = (buffer) => new TextDecoder().decode(buffer);

export class ${PROBE_CLASS} extends DurableObject {
  async fetch(request) {
    const op = new URL(request.url).pathname.split("/").at(-1);
    const body = request.method === "POST" ? await request.json() : {};
    const container = this.ctx.container;
    try {
      if (op === "start") {
        container.start({
          enableInternet: body.enableInternet ?? false,
          ...(body.entrypoint ? { entrypoint: body.entrypoint } : {}),
          ...(body.env ? { env: body.env } : {}),
        });
        return Response.json({ running: container.running });
      }
      if (op === "exec") {
        const process = await container.exec(body.argv, {
          ...(body.cwd ? { cwd: body.cwd } : {}),
          ...(body.env ? { env: body.env } : {}),
          ...(body.stdin === undefined ? {} : { stdin: "pipe" }),
        });
        if (body.stdin !== undefined) {
          const writer = process.stdin.getWriter();
          await writer.write(new TextEncoder().encode(body.stdin));
          await writer.close();
        }
        const output = await process.output();
        return Response.json({
          stdout: text(output.stdout),
          stderr: text(output.stderr),
          exitCode: output.exitCode,
        });
      }
      if (op === "kill") {
        const process = await container.exec(body.argv, {});
        const reader = process.stdout.getReader();
        const { value } = await reader.read();
        process.kill();
        const exitCode = await process.exitCode;
        reader.releaseLock();
        return Response.json({ first: value === undefined ? "" : text(value), exitCode });
      }
      if (op === "intercept") {
        const gate = this.ctx.exports.Gate({ props: {} });
        await container.interceptAllOutboundHttp(gate);
        await container.interceptOutboundHttps("*", gate);
        return Response.json({});
      }
      if (op === "destroy") {
        await container.destroy();
        return Response.json({ running: container.running });
      }
      if (op === "state") return Response.json({ running: container.running });
      return new Response("unknown op " + op, { status: 404 });
    } catch (error) {
      return Response.json({ error: String(error && error.stack || error) }, { status: 500 });
    }
  }
}

export default {
  async fetch(request, env) {
    const name = new URL(request.url).pathname.split("/")[1];
    return env.PROBE.get(env.PROBE.idFromName(name)).fetch(request);
  },
};
`;

/** What `exec` answers. */
export interface ExecAnswer {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/** The probe Worker in Miniflare, its containers on the Docker API at `socketPath`. */
export class Probe {
  readonly #mf: Miniflare;
  readonly url: URL;

  private constructor(mf: Miniflare, url: URL) {
    this.#mf = mf;
    this.url = url;
  }

  /** `image`: the image its containers run (the Durable Object namespace's default). */
  static async start(socketPath: string, image: string): Promise<Probe> {
    const mf = new Miniflare(
      convertV4MiniflareOptions({
        host: "127.0.0.1",
        port: 0,
        containerEngine: { localDocker: { socketPath: `unix:${socketPath}` } },
        workers: [
          {
            name: "probe",
            modules: true,
            script: PROBE_WORKER,
            compatibilityDate: "2026-11-01",
            durableObjects: {
              PROBE: { className: PROBE_CLASS, useSQLite: true, container: { imageName: image } },
            },
          },
        ],
      }),
    );
    return new Probe(mf, await mf.ready);
  }

  /** Sends `op` to the Durable Object `name`; throws unless it answers 200. */
  async call<T = Record<string, unknown>>(
    name: string,
    op: string,
    body: unknown = {},
  ): Promise<T> {
    const response = await fetch(new URL(`/${name}/${op}`, this.url), {
      method: "POST",
      body: JSON.stringify(body),
    });
    const text = await response.text();
    if (response.status !== 200) throw new Error(`${op}: ${response.status} ${text}`);
    return JSON.parse(text) as T;
  }

  /** `ctx.container.start` with `entrypoint`, internet off unless asked. */
  async start(name: string, entrypoint: readonly string[], enableInternet = false): Promise<void> {
    await this.call(name, "start", { enableInternet, entrypoint });
  }

  /** `bash -c cmd` in the container of `name`, to its end. */
  bash(name: string, cmd: string, options: Record<string, unknown> = {}): Promise<ExecAnswer> {
    return this.call<ExecAnswer>(name, "exec", { argv: ["/bin/bash", "-c", cmd], ...options });
  }

  /** The hex id of the Durable Object `name` (in its container's name). */
  async durableObjectId(name: string): Promise<string> {
    const namespace = await this.#mf.getDurableObjectNamespace("PROBE");
    return namespace.idFromName(name).toString();
  }

  async dispose(): Promise<void> {
    await this.#mf.dispose();
  }
}
