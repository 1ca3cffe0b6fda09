/**
 * What a bridge keeps of its calls (durable calls): the outcome of each ended call for
 * `keptSeconds`, and room held for each detached call in flight, within `maxKept` calls and
 * `maxKeptBytes`. A detached call beyond them is refused (429, nothing ran); an outcome a caller
 * already received makes room first, oldest first. An outcome gone (expired or pushed out) leaves
 * its id behind as `expired`, so a late question about it is answered so, never with "unknown"
 * or a wrong result; those ids are bounded in number too (the oldest become `unknown`), and the
 * table says since when it has forgotten none (`forgottenUpTo`), which `unknown` answers report.
 */
import { BRIDGE_TEXTS, timerDelay } from "@remote-task/internal";
import { type ErrorBody, type ExecResult, utf8ByteLength } from "@remote-task/protocol";
import { type DurableSettings, keptCallBytes } from "./limits.js";
import { HttpError } from "./responses.js";

/** An ended call's outcome as it is kept: its result, or the error it was answered with. */
export type KeptOutcome =
  | { kind: "result"; result: ExecResult }
  | { kind: "failed"; error: ErrorBody };

/** One kept outcome. */
export interface KeptCall {
  readonly sandboxId: string;
  /** The call's command: a later request with the same id must carry the same one. */
  readonly command: string;
  readonly outcome: KeptOutcome;
  /** When it is dropped, in `Date.now()` time. */
  readonly expiresAt: number;
  readonly bytes: number;
  /** A caller received the outcome: it is the first to make room. */
  delivered: boolean;
}

/** What the table knows of an id. */
export type KeptLookup = { kind: "kept"; call: KeptCall } | { kind: "expired" } | undefined;

/** Bounds of the `Retry-After` of a detached call refused for want of room. */
const RETRY_AFTER_SECONDS = { min: 1, max: 60 } as const;
/** Ids of dropped outcomes remembered (as `expired`) per call the table keeps, at least 1024. */
const EXPIRED_IDS_PER_KEPT = 4;
/** Bytes an error outcome is counted at besides the overhead. */
const ERROR_OUTCOME_BYTES = 512;

function outcomeBytes(outcome: KeptOutcome): number {
  return outcome.kind === "result"
    ? utf8ByteLength(outcome.result.stdout) + utf8ByteLength(outcome.result.stderr)
    : ERROR_OUTCOME_BYTES;
}

/** The kept outcomes and the room held for detached calls in flight, with their TTL sweep. */
export class KeptCalls {
  /** Kept outcomes, oldest first (all are kept equally long, so this is also expiry order). */
  readonly #kept = new Map<string, KeptCall>();
  /** Bytes held for each detached call in flight. */
  readonly #reserved = new Map<string, number>();
  /** Ids whose outcome was dropped, oldest first, with when each was (`now()` time). */
  readonly #expired = new Map<string, number>();
  #forgottenUpTo: number | undefined;
  #bytes = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;

  constructor(
    readonly settings: DurableSettings,
    readonly now: () => number = Date.now,
  ) {}

  /** Calls kept: outcomes and detached calls in flight. */
  get count(): number {
    return this.#kept.size + this.#reserved.size;
  }

  /**
   * The latest time (`now()` time) an id the table forgot was dropped as `expired`; undefined
   * while it forgot none. Every call sent after it is still known here: a call is sent before
   * its id is dropped.
   */
  get forgottenUpTo(): number | undefined {
    return this.#forgottenUpTo;
  }

  /** Bytes the kept calls are counted at (see `keptCallBytes`). */
  get bytes(): number {
    return this.#bytes;
  }

  /**
   * Holds room for a detached call until it ends (two caps of output, its command): throws the
   * 429 refusal when there is none, even after outcomes already received made room.
   */
  reserve(sandboxId: string, command: string, cap: number): void {
    this.sweep();
    const bytes = keptCallBytes(command, 2 * cap);
    if (!this.#makeRoom(bytes)) {
      const { maxKept, maxKeptBytes } = this.settings;
      const retryAfterSeconds = this.#retryAfterSeconds();
      throw new HttpError(
        "capacity_exceeded",
        BRIDGE_TEXTS.keptFull(maxKept, maxKeptBytes, retryAfterSeconds),
        { retryAfterSeconds, status: 429 },
      );
    }
    this.#reserved.set(sandboxId, bytes);
    this.#bytes += bytes;
  }

  /**
   * Keeps the outcome of an ended call (in place of the room it held, if it was detached). A call
   * that held no room is kept only if there is room for it; otherwise, and when nothing is kept
   * at all (`keptSeconds` 0), its id is `expired` at once.
   */
  keep(sandboxId: string, command: string, outcome: KeptOutcome, delivered: boolean): void {
    this.sweep();
    const reserved = this.#reserved.get(sandboxId);
    if (reserved !== undefined) {
      this.#reserved.delete(sandboxId);
      this.#bytes -= reserved;
    }
    const bytes = keptCallBytes(command, outcomeBytes(outcome));
    const fits = reserved !== undefined || this.#makeRoom(bytes);
    if (this.#closed || this.settings.keptSeconds <= 0 || !fits) {
      this.#expire(sandboxId);
      return;
    }
    this.#expired.delete(sandboxId);
    this.#kept.set(sandboxId, {
      sandboxId,
      command,
      outcome,
      expiresAt: this.now() + this.settings.keptSeconds * 1000,
      bytes,
      delivered,
    });
    this.#bytes += bytes;
    this.#schedule();
  }

  /** The kept outcome of `sandboxId`, or that it expired; undefined when the id is unknown here. */
  lookup(sandboxId: string): KeptLookup {
    this.sweep();
    const call = this.#kept.get(sandboxId);
    if (call !== undefined) return { kind: "kept", call };
    return this.#expired.has(sandboxId) ? { kind: "expired" } : undefined;
  }

  /** Drops the outcomes whose time is up; their ids become `expired`. */
  sweep(): void {
    const now = this.now();
    for (const call of this.#kept.values()) {
      if (call.expiresAt > now) break;
      this.#drop(call);
    }
  }

  /** Stops the sweep timer and drops every outcome (the bridge is shutting down). */
  close(): void {
    this.#closed = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const call of [...this.#kept.values()]) this.#drop(call);
  }

  /**
   * Whether one more call of `bytes` fits, after dropping outcomes a caller already received,
   * oldest first, as far as needed.
   */
  #makeRoom(bytes: number): boolean {
    const { maxKept, maxKeptBytes } = this.settings;
    const fits = () => this.count + 1 <= maxKept && this.#bytes + bytes <= maxKeptBytes;
    if (fits()) return true;
    for (const call of [...this.#kept.values()]) {
      if (!call.delivered) continue;
      this.#drop(call);
      if (fits()) return true;
    }
    return false;
  }

  #drop(call: KeptCall): void {
    this.#kept.delete(call.sandboxId);
    this.#bytes -= call.bytes;
    this.#expire(call.sandboxId);
  }

  #expire(sandboxId: string): void {
    this.#expired.delete(sandboxId);
    this.#expired.set(sandboxId, this.now());
    const most = Math.max(1_024, this.settings.maxKept * EXPIRED_IDS_PER_KEPT);
    for (const [oldest, droppedAt] of this.#expired) {
      if (this.#expired.size <= most) break;
      this.#expired.delete(oldest);
      this.#forgottenUpTo = Math.max(this.#forgottenUpTo ?? droppedAt, droppedAt);
    }
  }

  /** Seconds until the oldest kept outcome expires (room then), within bounds. */
  #retryAfterSeconds(): number {
    const oldest = this.#kept.values().next().value;
    const seconds =
      oldest === undefined
        ? RETRY_AFTER_SECONDS.min
        : Math.ceil((oldest.expiresAt - this.now()) / 1000);
    return Math.min(RETRY_AFTER_SECONDS.max, Math.max(RETRY_AFTER_SECONDS.min, seconds));
  }

  /** Sweeps when the oldest outcome expires; the timer never keeps a process alive. */
  #schedule(): void {
    if (this.#timer !== undefined || this.#closed) return;
    const oldest = this.#kept.values().next().value;
    if (oldest === undefined) return;
    const timer = setTimeout(
      () => {
        this.#timer = undefined;
        this.sweep();
        this.#schedule();
      },
      timerDelay(Math.max(0, oldest.expiresAt - this.now())),
    );
    (timer as { unref?: () => void }).unref?.();
    this.#timer = timer;
  }
}
