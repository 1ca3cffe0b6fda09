/**
 * A test-only Worker with one Durable Object that drives `ctx.container` directly (no SDK, no
 * server in the container), for the harness's probe of workerd's native container path against
 * real Podman (podman-shim.test.ts). Its source is a string that Miniflare runs as a module.
 *
 * `POST /<name>/<op>` goes to the Durable Object named `<name>`; the body is JSON:
 * - `start` `{ enableInternet, entrypoint, env }`: `ctx.container.start(...)`.
 * - `exec` `{ argv, cwd, env, stdin }`: runs it to the end (`stdin` a string written to the
 *   process, then closed); answers `{ stdout, stderr, exitCode }`.
 * - `kill` `{ argv }`: runs it, waits for its first output, `kill()`s it; answers
 *   `{ first, exitCode }`.
 * - `destroy`: `ctx.container.destroy()`; answers `{ running }`.
 * - `state`: answers `{ running }`.
 */
export const PROBE_CLASS = "Probe";

export const PROBE_WORKER = `
import { DurableObject } from "cloudflare:workers";

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
