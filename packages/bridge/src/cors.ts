/**
 * Opt-in CORS: the web origins the deployer lists may call the bridge from a browser page. For a
 * listed origin, a preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered 204 with
 * what the client sends (its methods and headers), and every answer carries
 * `Access-Control-Allow-Origin` for it; a request from any other origin, preflight or not, is
 * refused with 403 `forbidden` before any route runs, and without CORS headers, so the browser
 * reports a failed fetch and no command runs. Requests without an `Origin` header (servers,
 * the command line, the SDK in Node.js) are not affected. Without the option nothing changes.
 */
import { BRIDGE_TEXTS } from "@remote-task/internal";
import { errorResponse } from "./responses.js";

/** Which web origins may call the bridge from a browser page. */
export interface CorsOptions {
  /**
   * Origins exactly as browsers send them: scheme, host and port (if not the default), no path,
   * e.g. `https://app.example.com` or `http://localhost:5173`.
   */
  origins: readonly string[];
}

/** What a preflight allows: the methods and request headers the client sends. */
const ALLOW_METHODS = "GET, POST";
const ALLOW_HEADERS = "authorization, content-type, accept";
/** Response headers a page's script may read: the client reads `Retry-After` on a 429 or 503. */
const EXPOSE_HEADERS = "retry-after";
/** How long a browser may reuse a preflight's answer, in seconds (browsers cap it lower). */
const PREFLIGHT_MAX_AGE_SECONDS = 600;

/** The listed origins, each checked to be an origin as a browser sends it. */
export function resolveCors(options: CorsOptions | undefined): ReadonlySet<string> | undefined {
  if (options === undefined) return undefined;
  for (const origin of options.origins) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(origin);
    } catch {
      parsed = undefined;
    }
    if (parsed?.origin !== origin || !/^https?:$/.test(parsed.protocol)) {
      throw new TypeError(
        `The CORS origin ${JSON.stringify(origin)} is not a web origin as browsers send it (scheme, host and port, no path or trailing slash), e.g. https://app.example.com or http://localhost:5173.`,
      );
    }
  }
  return new Set(options.origins);
}

type Handler<C> = (request: Request, context?: C) => Promise<Response>;

/** `handler` with the CORS rules of `origins` applied in front of it and on its answers. */
export function withCors<C>(handler: Handler<C>, origins: ReadonlySet<string>): Handler<C> {
  return async (request, context) => {
    const origin = request.headers.get("origin");
    if (origin === null) return handler(request, context);
    if (!origins.has(origin)) {
      const refused = errorResponse("forbidden", BRIDGE_TEXTS.originRefused(origin.slice(0, 200)));
      refused.headers.set("vary", "origin");
      return refused;
    }
    if (request.method === "OPTIONS" && request.headers.has("access-control-request-method")) {
      return new Response(null, {
        status: 204,
        headers: {
          "access-control-allow-origin": origin,
          "access-control-allow-methods": ALLOW_METHODS,
          "access-control-allow-headers": ALLOW_HEADERS,
          "access-control-max-age": String(PREFLIGHT_MAX_AGE_SECONDS),
          vary: "origin",
        },
      });
    }
    const response = await handler(request, context);
    const headers = new Headers(response.headers);
    headers.set("access-control-allow-origin", origin);
    headers.set("access-control-expose-headers", EXPOSE_HEADERS);
    headers.append("vary", "origin");
    return new Response(response.body, {
      status: response.status,
      statusText: response.statusText,
      headers,
    });
  };
}
