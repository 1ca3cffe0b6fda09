/**
 * Hedged container starts: when a call's cold start runs long, a second container is started for
 * it, and the call runs in whichever is ready first. "Long" is a delay the deployer configures
 * (`HEDGE_START_AFTER_MS`), or by default one taken from the starts this isolate has seen: a
 * tenth more than three starts in four took, so that only the slowest starts (about one in five
 * or fewer) are hedged. Hedges in flight are capped at a share of the starts in flight, so a
 * platform that is slow for everyone is not asked for twice the containers.
 */

/** How the Worker decides when a cold start is slow enough to hedge. */
export type HedgeSetting = { after: "off" } | { after: "observed" } | { after: number };

/** Starts remembered for the observed delay. */
const SAMPLES = 50;
/** Starts seen before the observed delay is trusted; until then {@link DEFAULT_DELAY_MS}. */
const MIN_SAMPLES = 4;
const DEFAULT_DELAY_MS = 10_000;
/** The observed delay stays within these bounds. */
const MIN_DELAY_MS = 1_000;
const MAX_DELAY_MS = 30_000;
const PERCENTILE = 0.75;
const FACTOR = 1.1;
/** Hedges in flight at most: this share of the cold starts in flight (at least one). */
const MAX_HEDGE_SHARE = 0.25;

/** This isolate's hedging: how long a cold start may run before it is hedged, and room for one. */
export class HedgePolicy {
  readonly #setting: HedgeSetting;
  /** Recent start times (ms), oldest first. */
  readonly #samples: number[] = [];
  #starts = 0;
  #hedges = 0;

  constructor(setting: HedgeSetting) {
    this.#setting = setting;
  }

  /** Records how long a start took (or had taken when it was given up, a lower bound). */
  record(ms: number): void {
    this.#samples.push(ms);
    if (this.#samples.length > SAMPLES) this.#samples.shift();
  }

  /** The delay after which a start is hedged, or `undefined` when hedging is off. */
  delayMs(): number | undefined {
    const { after } = this.#setting;
    if (after === "off") return undefined;
    if (after !== "observed") return after;
    if (this.#samples.length < MIN_SAMPLES) return DEFAULT_DELAY_MS;
    const sorted = [...this.#samples].sort((a, b) => a - b);
    const at = sorted[Math.min(sorted.length - 1, Math.ceil(PERCENTILE * sorted.length) - 1)] ?? 0;
    return Math.min(MAX_DELAY_MS, Math.max(MIN_DELAY_MS, Math.round(at * FACTOR)));
  }

  /** A cold start begins; call the returned function (once or more) when it is over. */
  starting(): () => void {
    this.#starts++;
    return once(() => {
      this.#starts--;
    });
  }

  /** Takes a hedge slot if one is free; call the returned function when the hedge is over. */
  tryHedge(): (() => void) | undefined {
    if (this.#hedges >= Math.max(1, Math.floor(this.#starts * MAX_HEDGE_SHARE))) return undefined;
    this.#hedges++;
    return once(() => {
      this.#hedges--;
    });
  }
}

/** `action`, run the first time the returned function is called only. */
function once(action: () => void): () => void {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    action();
  };
}

/**
 * The sandbox name of a call's hedge container: derived from the sandbox id, so that a `/cancel`
 * reaching another isolate finds it too, and with a `.`, which no sandbox id has, so that it
 * never names another call's sandbox.
 */
export async function hedgeName(sandboxId: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(sandboxId));
  const hex = [...new Uint8Array(digest)].map((byte) => byte.toString(16).padStart(2, "0"));
  return `hedge.${hex.join("").slice(0, 40)}`;
}
