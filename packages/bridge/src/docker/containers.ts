/**
 * The containers of one docker backend on its engine: made and attached to (not started),
 * removed, swept by owner label, and the trial start that tells whether this engine can run a
 * call at all. A container's exit status is read here too.
 */
import type { Socket } from "node:net";
import { DOCKER_TEXTS } from "@remote-task/internal";
import { type ContainerSettings, createBody, LABELS } from "./container.js";
import type { EngineClient, EngineEndpoint } from "./engine.js";
import { FrameReader } from "./frames.js";
import { engineProcessLimit, isNprocRefusal } from "./rlimit.js";

/** How long a removal may take before it counts as failed. */
const REMOVE_TIMEOUT_MS = 30_000;

/** A container made for a call (or ahead of one), attached to, not started. */
export interface Prepared {
  id: string;
  socket: Socket;
  reader: FrameReader;
}

export interface Containers {
  /**
   * A container made and attached to (on Podman the attach also sets up its runtime, the slow
   * half of a start), its shell waiting for its script. Attached before the start, so not one
   * byte of output is missed.
   */
  prepare(): Promise<Prepared>;
  start(id: string): Promise<void>;
  remove(id: string): Promise<void>;
  /** Removes the containers of this machine's bridges that `dead` says are gone. */
  sweep(dead: (owner: string, labels: Record<string, string>) => boolean): Promise<void>;
  /** The engine's reason for a failed start, with how to get past it where that is known. */
  withFix(reason: string): string;
}

/** `settings` is read at each `prepare`: what the engine turns out to be may still change it. */
export function engineContainers(
  engine: EngineClient,
  endpoint: EngineEndpoint,
  settings: ContainerSettings,
): Containers {
  async function remove(id: string): Promise<void> {
    await engine.json({
      method: "DELETE",
      path: `/containers/${id}`,
      query: { force: "1", v: "1" },
      accept: [404],
      signal: AbortSignal.timeout(REMOVE_TIMEOUT_MS),
    });
  }
  return {
    async prepare() {
      const created = await engine.json<{ Id: string }>({
        method: "POST",
        path: "/containers/create",
        body: createBody(settings),
      });
      const id = created.body.Id;
      try {
        const socket = await engine.attach(id);
        return { id, socket, reader: new FrameReader(socket) };
      } catch (error) {
        await remove(id).catch(() => {});
        throw error;
      }
    },
    async start(id) {
      await engine.json({ method: "POST", path: `/containers/${id}/start`, accept: [304] });
    },
    remove,
    async sweep(dead) {
      const { body } = await engine.json<Array<{ Id: string; Labels?: Record<string, string> }>>({
        method: "GET",
        path: "/containers/json",
        query: { all: "1", filters: JSON.stringify({ label: [LABELS.owner] }) },
      });
      await Promise.all(
        (body ?? [])
          .filter((c) => {
            const owner = c.Labels?.[LABELS.owner];
            return owner !== undefined && dead(owner, c.Labels ?? {});
          })
          .map((c) => remove(c.Id)),
      );
    },
    withFix(reason) {
      if (!isNprocRefusal(reason)) return reason;
      const limit = engineProcessLimit(endpoint);
      return `${reason}. ${limit === undefined ? DOCKER_TEXTS.nprocRefusedUnknown : DOCKER_TEXTS.nprocRefused(String(limit))}`;
    },
  };
}

/**
 * One container made, attached to and started, then removed: every call needs that much, so an
 * engine that cannot (an rlimit it may not set, a runtime it lacks) is found before the first
 * call. Throws the engine's reason (see {@link Containers.withFix}).
 */
export async function trialStart(containers: Containers): Promise<void> {
  let container: Prepared | undefined;
  try {
    container = await containers.prepare();
    await containers.start(container.id);
    // An empty script: the shell ends at once. Removed once it has (Podman refuses to kill a
    // container that is stopping meanwhile).
    container.socket.end();
    const { reader } = container;
    const drained = (async () => {
      while ((await reader.next()) !== undefined) {}
    })();
    await Promise.race([drained, new Promise((resolve) => setTimeout(resolve, 10_000).unref())]);
  } finally {
    if (container !== undefined) {
      container.socket.destroy();
      const { id } = container;
      // Left behind only if the engine refuses twice: close() sweeps this backend's own.
      await containers.remove(id).catch(async () => {
        await new Promise((resolve) => setTimeout(resolve, 500));
        await containers.remove(id).catch(() => {});
      });
    }
  }
}

/**
 * The command's exit status. The engine's wait endpoint answers late on Podman (it polls), so
 * once the output has ended the container's state is asked at once; the wait stands in when
 * that state is not final yet (Docker may close the stream a moment before it records the exit).
 */
export function exitCode(engine: EngineClient, id: string, reader: FrameReader): Promise<number> {
  const waited = engine
    .json<{ StatusCode: number }>({ method: "POST", path: `/containers/${id}/wait` })
    .then(({ body }) => body.StatusCode);
  waited.catch(() => {});
  const inspected = reader.ended.then(async () => {
    const { body } = await engine.json<{ State?: { Running?: boolean; ExitCode?: number } }>({
      method: "GET",
      path: `/containers/${id}/json`,
    });
    const state = body.State;
    return state?.Running === false && typeof state.ExitCode === "number" ? state.ExitCode : waited;
  });
  return Promise.any([inspected, waited]).catch((error: AggregateError) => {
    throw error.errors[0];
  });
}
