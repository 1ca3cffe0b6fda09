import { type AnyHandler, getResponse, type RequestHandler } from "msw";

/**
 * A Fetch API function answered by msw handlers, without patching any global: the client gets
 * it through its `fetch` option. Requests no handler matches fail like a refused connection.
 */
export function mswFetch(...handlers: AnyHandler[]): typeof globalThis.fetch & {
  requests: Request[];
} {
  const requests: Request[] = [];
  const fetchImpl = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const request = new Request(input, init);
    requests.push(request.clone());
    const response = await getResponse(handlers as RequestHandler[], request);
    if (response === undefined) {
      throw new TypeError("fetch failed", {
        cause: Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }),
      });
    }
    return response;
  };
  return Object.assign(fetchImpl as typeof globalThis.fetch, { requests });
}

/** A body stream that sends `prefix`, then never another byte (until cancelled). */
export function stallingBody(prefix: string): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(prefix);
  return new ReadableStream({
    start(controller) {
      if (bytes.byteLength > 0) controller.enqueue(bytes);
    },
  });
}

/** A body of `totalBytes` bytes of `fill`, generated chunk by chunk as it is read. */
export function hugeBody(
  totalBytes: number,
  fill = 0x61,
): ReadableStream<Uint8Array> & {
  sent: () => number;
} {
  const chunk = new Uint8Array(64 * 1024).fill(fill);
  let sent = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent >= totalBytes) {
        controller.close();
        return;
      }
      const size = Math.min(chunk.byteLength, totalBytes - sent);
      sent += size;
      controller.enqueue(size === chunk.byteLength ? chunk : chunk.subarray(0, size));
    },
  });
  return Object.assign(stream, { sent: () => sent });
}

export type StreamStep = string | { waitMs: number } | "stall";

/** A body that sends each string, waits where asked, and ends (or stalls for ever at "stall"). */
export function scriptedBody(steps: StreamStep[]): ReadableStream<Uint8Array> & {
  cancelled: () => boolean;
} {
  const encoder = new TextEncoder();
  let cancelled = false;
  const stream = new ReadableStream<Uint8Array>({
    async start(controller) {
      for (const step of steps) {
        if (cancelled) return;
        if (step === "stall") return;
        if (typeof step === "string") controller.enqueue(encoder.encode(step));
        else await new Promise((r) => setTimeout(r, step.waitMs));
      }
      if (!cancelled) controller.close();
    },
    cancel() {
      cancelled = true;
    },
  });
  return Object.assign(stream, { cancelled: () => cancelled });
}
