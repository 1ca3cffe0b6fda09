import { BRIDGE_TEXTS } from "@remote-task/internal";
import type { MiddlewareHandler } from "hono";
import { errorResponse } from "./responses.js";

const encoder = new TextEncoder();

async function digest(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
}

/**
 * Compares two secrets in time independent of where they differ and of their lengths: both are
 * hashed to fixed-length digests first, then every byte is compared without early exit.
 */
export async function timingSafeEqual(a: string, b: string): Promise<boolean> {
  const [da, db] = await Promise.all([digest(a), digest(b)]);
  let diff = 0;
  for (let i = 0; i < da.length; i++) diff |= (da[i] ?? 0) ^ (db[i] ?? 0);
  return diff === 0;
}

/** The token of an `Authorization: Bearer <token>` header, or undefined. */
export function bearerToken(header: string | null): string | undefined {
  if (header === null) return undefined;
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  return match?.[1];
}

/**
 * The middleware guarding every route that runs or reveals something: without a configured
 * token (and no explicit opt-out) it refuses with `not_configured`; with one, a request must
 * present it as `Authorization: Bearer <token>` or gets 401.
 */
export function requireToken(
  token: string | undefined,
  allowUnauthenticated: boolean,
): MiddlewareHandler {
  return async (c, next) => {
    if (token === undefined) {
      if (!allowUnauthenticated) return errorResponse("not_configured", BRIDGE_TEXTS.notConfigured);
    } else {
      const given = bearerToken(c.req.header("authorization") ?? null);
      if (given === undefined || !(await timingSafeEqual(given, token))) {
        return errorResponse("unauthorized", BRIDGE_TEXTS.unauthorized, {
          headers: { "www-authenticate": 'Bearer realm="remote-task"' },
        });
      }
    }
    await next();
  };
}
