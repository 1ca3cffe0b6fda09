/**
 * The sandboxes a backend has in flight, by id, with how many it started and destroyed; an id
 * already in flight is refused in one wording on every backend. Each backend keeps its own kind
 * of entry.
 */
import { SANDBOX_TEXTS } from "@remote-task/internal";
import { BackendError } from "../backend.js";

export interface InFlightCounts {
  /** Sandboxes started and not yet destroyed. */
  live: number;
  started: number;
  destroyed: number;
}

export class InFlight<T> {
  readonly #entries = new Map<string, T>();
  #started = 0;
  #destroyed = 0;

  /** Records `entry` as `sandboxId`'s; throws a `BackendError` when that id is in flight. */
  add(sandboxId: string, entry: T): void {
    if (this.#entries.has(sandboxId)) {
      throw new BackendError("sandbox_error", SANDBOX_TEXTS.alreadyExists(sandboxId));
    }
    this.#entries.set(sandboxId, entry);
    this.#started++;
  }

  get(sandboxId: string): T | undefined {
    return this.#entries.get(sandboxId);
  }

  /** Forgets `sandboxId`, counting it destroyed (once). */
  remove(sandboxId: string): void {
    if (this.#entries.delete(sandboxId)) this.#destroyed++;
  }

  ids(): string[] {
    return [...this.#entries.keys()];
  }

  get size(): number {
    return this.#entries.size;
  }

  counts(): InFlightCounts {
    return { live: this.#entries.size, started: this.#started, destroyed: this.#destroyed };
  }
}
