/**
 * With durable calls on, the Worker hands every request about one call to that call's
 * `CallKeeper` (the Durable Object named by its sandbox id): `POST /exec` and `POST /cancel` by
 * the `sandboxId` of their body, `GET /exec/{sandboxId}` by its path. Whatever names no valid id
 * is left to the isolate's own bridge, which answers it (a 400, a 401, a 404) as before.
 */

import { DEFAULT_LIMITS, errorResponse } from "@remote-task/bridge";
import { BRIDGE_TEXTS } from "@remote-task/internal";
import { sandboxIdSchema } from "@remote-task/protocol";
import type { WorkerConfig, WorkerEnv } from "./config.js";

const decoder = new TextDecoder();

/** The body's bytes, or undefined once it grows past `maxBytes`. */
async function readBounded(request: Request, maxBytes: number): Promise<Uint8Array | undefined> {
  const parts: Uint8Array[] = [];
  let size = 0;
  if (request.body !== null) {
    for await (const part of request.body as unknown as AsyncIterable<Uint8Array>) {
      size += part.byteLength;
      if (size > maxBytes) return undefined;
      parts.push(part);
    }
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const part of parts) {
    bytes.set(part, at);
    at += part.byteLength;
  }
  return bytes;
}

/** A valid sandbox id as the bridge takes it (lower-cased), or undefined. */
function validId(value: unknown): string | undefined {
  if (typeof value !== "string") return undefined;
  const parsed = sandboxIdSchema.safeParse(value.toLowerCase());
  return parsed.success ? parsed.data : undefined;
}

/** The sandbox id a JSON body names, if any. */
function bodyId(bytes: Uint8Array): string | undefined {
  try {
    const body: unknown = JSON.parse(decoder.decode(bytes));
    return typeof body === "object" && body !== null
      ? validId((body as { sandboxId?: unknown }).sandboxId)
      : undefined;
  } catch {
    return undefined;
  }
}

/** The Worker's string variables: a keeper builds the same configuration from them. */
function stringVars(env: WorkerEnv): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (typeof value === "string") vars[name] = value;
  }
  return vars;
}

/**
 * The keeper's answer to a request about one call; undefined when the request names no call
 * (the isolate's bridge answers it then; `request` is untouched unless a body was read, and
 * then `retry` carries it).
 */
export async function routeToKeeper(
  request: Request,
  env: WorkerEnv,
  config: WorkerConfig,
): Promise<{ response: Response } | { retry: Request } | undefined> {
  const namespace = env.CallKeeper;
  if (namespace === undefined) return undefined;
  const url = new URL(request.url);
  let sandboxId: string | undefined;
  let forward = request;
  if (request.method === "GET" && url.pathname.startsWith("/exec/")) {
    let raw = url.pathname.slice("/exec/".length);
    try {
      raw = decodeURIComponent(raw);
    } catch {
      return undefined;
    }
    sandboxId = validId(raw);
    if (sandboxId === undefined) return undefined;
  } else if (
    request.method === "POST" &&
    (url.pathname === "/exec" || url.pathname === "/cancel")
  ) {
    const maxBytes = config.limits.maxRequestBytes ?? DEFAULT_LIMITS.maxRequestBytes;
    const bytes = await readBounded(request, maxBytes);
    if (bytes === undefined) {
      return {
        response: errorResponse("payload_too_large", BRIDGE_TEXTS.payloadTooLarge(maxBytes)),
      };
    }
    forward = new Request(request.url, {
      method: request.method,
      headers: request.headers,
      body: bytes,
      signal: request.signal,
    });
    sandboxId = bodyId(bytes);
    if (sandboxId === undefined) return { retry: forward };
  } else {
    return undefined;
  }
  const keeper = namespace.get(namespace.idFromName(sandboxId));
  return { response: await keeper.serve(forward, sandboxId, stringVars(env)) };
}
