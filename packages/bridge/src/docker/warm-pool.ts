/**
 * Containers made and attached to ahead of calls, so a call only starts one. Each serves exactly
 * one call and is then removed like any other; the pool tops itself up as calls take them.
 */
import type { Containers, Prepared } from "./containers.js";

export class WarmPool {
  readonly size: number;
  readonly #containers: Containers;
  readonly #ready: Array<Promise<Prepared>> = [];
  readonly #refills = new Set<Promise<unknown>>();
  #starting = 0;
  #closed = false;

  constructor(size: number, containers: Containers) {
    this.size = size;
    this.#containers = containers;
  }

  /** A made container, if one is ready (the pool refills behind it). */
  take(): Promise<Prepared> | undefined {
    const taken = this.#ready.shift();
    this.refill();
    return taken;
  }

  /** What `/health` reports: undefined for a pool of size 0. */
  report(): { target: number; ready: number; starting: number } | undefined {
    if (this.size === 0) return undefined;
    return { target: this.size, ready: this.#ready.length, starting: this.#starting };
  }

  /** Tops the pool up to its size (each container in it serves one call, then is removed). */
  refill(): void {
    while (!this.#closed && this.#ready.length + this.#starting < this.size) {
      this.#starting++;
      const next = this.#containers.prepare();
      const settled = next.then(
        (container) => {
          this.#starting--;
          if (this.#closed) void this.#drop(Promise.resolve(container));
          else {
            // A waiting container does not keep the process alive; its call's does.
            container.socket.unref();
            this.#ready.push(Promise.resolve(container));
          }
        },
        () => {
          // The engine failed to make one: the next call makes its own (and refills again).
          this.#starting--;
        },
      );
      this.#refills.add(settled);
      void settled.then(() => this.#refills.delete(settled));
    }
  }

  /** Removes every container made ahead; the ones still being made are removed once made. */
  close(): Promise<unknown> {
    this.#closed = true;
    return Promise.allSettled([
      ...this.#ready.splice(0).map((entry) => this.#drop(entry)),
      ...this.#refills,
    ]);
  }

  async #drop(entry: Promise<Prepared>): Promise<void> {
    const container = await entry.catch(() => undefined);
    if (container === undefined) return;
    container.socket.destroy();
    await this.#containers.remove(container.id).catch(() => {});
  }
}
