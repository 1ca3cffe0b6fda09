import { BRIDGE_TEXTS } from "@remote-task/internal";
import type { MiddlewareHandler } from "hono";
import { errorResponse } from "./responses.js";

const encoder = new TextEncoder();

/** SHA-256 of a text's UTF-8 bytes. */
export type Sha256 = (text: string) => Uint8Array | Promise<Uint8Array>;

/** The part of `node:crypto` hashing uses. */
interface NodeHashing {
  createHash(algorithm: "sha256"): { update(text: string): { digest(): Uint8Array } };
}

/** Node's hashing, found at run time (no static `node:` import: this module runs anywhere). */
const nodeHashing = (
  globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }
).process?.getBuiltinModule?.("node:crypto") as NodeHashing | undefined;

/**
 * SHA-256 where it is cheapest: Node's synchronous hash when the runtime has it (Web Crypto's
 * digest costs a thread pool round trip per request there), else Web Crypto.
 */
export const sha256: Sha256 =
  nodeHashing === undefined
    ? async (text) => new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text)))
    : (text) => nodeHashing.createHash("sha256").update(text).digest();

/**
 * A constant-time check against `secret`: what it is given is hashed whole to a fixed-length
 * digest and compared with the secret's digest (computed once) byte by byte without early exit,
 * so the time taken depends neither on where the two differ nor on their lengths.
 */
export function secretMatcher(
  secret: string,
  hash: Sha256 = sha256,
): (given: string) => Promise<boolean> {
  let expected: Promise<Uint8Array> | undefined;
  return async (given) => {
    expected ??= Promise.resolve(hash(secret));
    const [actual, wanted] = await Promise.all([hash(given), expected]);
    let diff = 0;
    for (let i = 0; i < wanted.length; i++) diff |= (actual[i] ?? 0) ^ (wanted[i] ?? 0);
    return diff === 0;
  };
}

/** The token of an `Authorization: Bearer <token>` header, or undefined. */
function bearerToken(header: string | null): string | undefined {
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
  const matches = token === undefined ? undefined : secretMatcher(token);
  return async (c, next) => {
    if (matches === undefined) {
      if (!allowUnauthenticated) return errorResponse("not_configured", BRIDGE_TEXTS.notConfigured);
    } else {
      const given = bearerToken(c.req.header("authorization") ?? null);
      if (given === undefined || !(await matches(given))) {
        return errorResponse("unauthorized", BRIDGE_TEXTS.unauthorized, {
          headers: { "www-authenticate": 'Bearer realm="remote-task"' },
        });
      }
    }
    await next();
  };
}
