import type { Agent, Dispatcher } from "undici";
import { ConfigurationError } from "./errors.js";
import { type CallAbort, raceCall } from "./scope.js";

type Undici = typeof import("undici");
let undici: Undici | undefined;

/**
 * The module name in a variable, so that bundlers leave the import to run time: a bundle for a
 * browser or a Worker that passes `fetch` never contains undici.
 */
const UNDICI = "undici";

/**
 * undici is loaded on the first request, not when the client is imported: on a Node.js older
 * than it needs it fails while loading, and `createClient` reports that clearly first. Where it
 * cannot be loaded at all (a Worker, a browser), the request fails before anything is sent.
 */
async function loadUndici(): Promise<Undici> {
  try {
    undici ??= (await import(/* webpackIgnore: true */ /* @vite-ignore */ UNDICI)) as Undici;
  } catch (error) {
    throw new ConfigurationError(
      "This runtime cannot load undici, the client's default HTTP stack (it is for Node.js); nothing was sent. Pass the runtime's Fetch API as the `fetch` option: createClient({ url, token, fetch }).",
      { cause: error },
    );
  }
  return undici;
}

/** One HTTP exchange, as the rest of the client sees it: undici and fetch look the same here. */
interface TransportRequest {
  method: "GET" | "POST";
  url: string;
  headers: Record<string, string>;
  body?: string | undefined;
  /** Its abort must end the exchange, before or after the headers. */
  abort: CallAbort;
}

export interface TransportResponse {
  status: number;
  header(name: string): string | undefined;
  /** The body, chunk by chunk; read at most once (either this or `readAll`). */
  body: AsyncIterable<Uint8Array>;
  /** The whole body at once; only used when `Content-Length` declares it within the limit. */
  readAll(): Promise<Uint8Array>;
  /** Stops reading and releases the connection; safe to call more than once. */
  discard(): void;
}

export interface Transport {
  /**
   * Gets ready to send (loads undici on first use); nothing is sent yet. Undefined when ready
   * already; rejects with a `ConfigurationError` when the transport cannot work in this runtime.
   */
  prepare(): Promise<void> | undefined;
  send(request: TransportRequest): Promise<TransportResponse>;
  /** Releases what the transport owns (not an injected dispatcher). */
  close(): Promise<void>;
}

/**
 * Keep-alive HTTP/1.1 through undici. Without an injected dispatcher the transport owns an Agent
 * sized for fan-out; undici's own header/body timeouts are off because the client's deadlines
 * (task timeout + grace, stream idle watchdog) bound every exchange instead.
 */
export function undiciTransport(
  injected: Dispatcher | undefined,
  maxConnections: number,
): Transport {
  let owned: Agent | undefined;
  let dispatcher = injected;
  const urls = new UrlCache();
  return {
    prepare() {
      return undici === undefined ? loadUndici().then(() => {}) : undefined;
    },
    async send(req) {
      const { Agent, request } = undici ?? (await loadUndici());
      dispatcher ??= owned = new Agent({
        connections: maxConnections,
        pipelining: 1,
        allowH2: false,
        keepAliveTimeout: 4_000,
        connect: { timeout: 10_000 },
      });
      const { abort } = req;
      const pending = request(urls.parse(req.url), {
        method: req.method,
        headers: req.headers,
        body: req.body ?? null,
        // An injected dispatcher gets the AbortSignal itself, whatever it does with it.
        signal:
          dispatcher === owned
            ? (new EmitterSignal(abort) as unknown as UndiciSignal)
            : abort.signal,
        dispatcher,
        headersTimeout: 0,
        bodyTimeout: 0,
      });
      // A response that arrives after the abort is released at once.
      pending.then(
        (late) => {
          if (abort.reason !== undefined) late.body.destroy();
        },
        () => {},
      );
      // End at once even if a custom dispatcher ignores the signal.
      const response = await raceCall(pending, abort);
      const body = response.body;
      return {
        status: response.statusCode,
        header(name) {
          const value = response.headers[name.toLowerCase()];
          return Array.isArray(value) ? value[0] : value;
        },
        body,
        readAll: () => body.bytes(),
        discard() {
          if (!body.destroyed) body.destroy();
        },
      };
    },
    async close() {
      if (owned !== undefined && !owned.closed) await owned.close();
    },
  };
}

/** Most request URLs a transport keeps parsed: a few bridges' `/exec`, `/health` and `/cancel`. */
const MAX_PARSED_URLS = 64;

/**
 * Request URLs parsed once: a client sends to the same few URLs again and again, which undici
 * would parse on every request given their text. A URL with a query (a call's own status) is
 * parsed each time.
 */
class UrlCache {
  readonly #parsed = new Map<string, URL>();

  parse(url: string): URL {
    let parsed = this.#parsed.get(url);
    if (parsed === undefined) {
      parsed = new URL(url);
      if (!url.includes("?") && this.#parsed.size < MAX_PARSED_URLS) this.#parsed.set(url, parsed);
    }
    return parsed;
  }
}

/** The `signal` option of undici's request(), which takes an EventEmitter as well as an AbortSignal. */
type UndiciSignal = NonNullable<Dispatcher.RequestOptions["signal"]>;

/**
 * The call's abort as the EventEmitter-style signal undici's request() takes as well as an
 * AbortSignal: the call's scope tells undici's abort listener directly, instead of undici adding
 * it to and removing it from an AbortSignal on every request (a cost per call the client's own
 * Agent need not pay). undici reads the abort's reason from it, as from an AbortSignal.
 */
class EmitterSignal {
  readonly #abort: CallAbort;
  /** undici's listener (it adds one per request). */
  #listener: (() => void) | undefined;

  constructor(abort: CallAbort) {
    this.#abort = abort;
    abort.onAbort(() => this.#listener?.());
  }

  get reason(): unknown {
    return this.#abort.reason;
  }

  on(_event: "abort", listener: () => void): this {
    this.#listener = listener;
    return this;
  }

  once(_event: "abort", listener: () => void): this {
    this.#listener = listener;
    return this;
  }

  removeListener(_event: "abort", listener: () => void): this {
    if (this.#listener === listener) this.#listener = undefined;
    return this;
  }
}

/** Any Fetch API implementation (msw in tests, runtimes without undici). Redirects are not followed. */
export function fetchTransport(fetchImpl: typeof globalThis.fetch): Transport {
  return {
    prepare: () => undefined,
    async send(req) {
      const init: RequestInit = {
        method: req.method,
        headers: req.headers,
        signal: req.abort.signal,
        redirect: "manual",
      };
      if (req.body !== undefined) init.body = req.body;
      const response = await raceCall(fetchImpl(req.url, init), req.abort);
      const stream = response.body;
      let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
      async function* chunks(): AsyncGenerator<Uint8Array> {
        if (stream === null) return;
        reader = stream.getReader();
        try {
          for (;;) {
            const { done, value } = await reader.read();
            if (done) return;
            yield value;
          }
        } finally {
          reader.cancel().catch(() => {});
        }
      }
      return {
        status: response.status,
        header: (name) => response.headers.get(name) ?? undefined,
        body: chunks(),
        readAll: async () => new Uint8Array(await response.arrayBuffer()),
        discard() {
          // Cancelling the reader also ends a read that is waiting for a stalled body.
          if (reader !== undefined) reader.cancel().catch(() => {});
          else if (stream !== null && !stream.locked) stream.cancel().catch(() => {});
        },
      };
    },
    async close() {},
  };
}

/**
 * A 200 JSON answer held in memory, read like any other: what the client reads in place of an
 * answer it translated (a reference bridge's timeout, see `referenceTimeout`).
 */
export function jsonResponse(value: unknown): TransportResponse {
  const bytes = new TextEncoder().encode(JSON.stringify(value));
  return {
    status: 200,
    header: (name) =>
      ({ "content-type": "application/json", "content-length": String(bytes.byteLength) })[
        name.toLowerCase()
      ],
    body: (async function* () {
      yield bytes;
    })(),
    readAll: async () => bytes,
    discard() {},
  };
}
