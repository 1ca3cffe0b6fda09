/**
 * A client in a browser page calling a bridge on another origin: the bridge's real CORS rules,
 * and a fetch that enforces CORS as browsers do (a preflight before each request that needs one,
 * `TypeError: Failed to fetch` when the preflight or the answer lacks the page's permission).
 */
import { createBridge, silentLogger } from "@remote-task/bridge";
import { createFakeBackend } from "@remote-task/bridge/testing";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ConnectionError, createClient } from "../src/index.js";

const PAGE = "https://app.example.com";
const BRIDGE = "https://bridge.example.net";
const TOKEN = "cross-origin-token-0123456789";

/** The bridge behind a browser's CORS checks, and every request that reached the bridge. */
function browserFetch(cors: { origins: string[] } | undefined) {
  const backend = createFakeBackend();
  const bridge = createBridge({ backend, token: TOKEN, logger: silentLogger, cors });
  const reached: string[] = [];
  const fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = new URL(String(input));
    const headers = new Headers(init?.headers);
    const preflight = new Request(url, {
      method: "OPTIONS",
      headers: {
        origin: PAGE,
        "access-control-request-method": init?.method ?? "GET",
        "access-control-request-headers": [...headers.keys()].join(","),
      },
    });
    reached.push(`OPTIONS ${url.pathname}`);
    const answer = await bridge(preflight);
    if (!answer.ok || answer.headers.get("access-control-allow-origin") !== PAGE) {
      throw new TypeError("Failed to fetch");
    }
    headers.set("origin", PAGE);
    reached.push(`${init?.method ?? "GET"} ${url.pathname}`);
    const response = await bridge(new Request(url, { ...init, headers }));
    if (response.headers.get("access-control-allow-origin") !== PAGE) {
      throw new TypeError("Failed to fetch");
    }
    return response;
  };
  return { fetch: fetch as typeof globalThis.fetch, backend, bridge, reached };
}

afterEach(() => {
  vi.unstubAllGlobals();
});

describe("a browser page calling a bridge on another origin", () => {
  it("does not send the command when the bridge does not allow the page (the call did not run)", async () => {
    vi.stubGlobal("location", { origin: PAGE });
    const { fetch, backend, bridge, reached } = browserFetch(undefined);
    const client = createClient({ url: BRIDGE, token: TOKEN, fetch, retry: false });
    const error = await client.run("echo hi").catch((e: unknown) => e);
    expect(ConnectionError.isInstance(error)).toBe(true);
    expect(error).toMatchObject({ mayHaveRun: false, retryable: false });
    expect((error as Error).message).toBe(
      `The browser could not fetch the bridge's /health from this page (origin ${PAGE}): the bridge does not allow this origin (CORS; its deployer lists the origins whose pages may call it, e.g. \`remote-task serve --cors-origin ${PAGE}\`), or it cannot be reached. The command was not sent.`,
    );
    expect(reached).toEqual(["OPTIONS /health"]);
    expect(backend.starts).toEqual([]);
    await client.close();
    await bridge.shutdown();
  });

  it("runs commands once the bridge allows the page, asking /health once per bridge", async () => {
    vi.stubGlobal("location", { origin: PAGE });
    const { fetch, backend, bridge, reached } = browserFetch({ origins: [PAGE] });
    const client = createClient({ url: BRIDGE, token: TOKEN, fetch });
    expect((await client.run("echo one")).exitCode).toBe(0);
    expect((await client.run("echo two")).exitCode).toBe(0);
    expect(reached.filter((r) => !r.startsWith("OPTIONS"))).toEqual([
      "GET /health",
      "POST /exec",
      "POST /exec",
    ]);
    expect(backend.starts).toHaveLength(2);
    await client.close();
    await bridge.shutdown();
  });

  it("asks nothing first where there is no page (Node.js, Workers) or the bridge is on the page's origin", async () => {
    for (const location of [undefined, { origin: BRIDGE }]) {
      vi.stubGlobal("location", location);
      const { bridge } = browserFetch(undefined);
      const paths: string[] = [];
      const fetch = (async (input: string | URL | Request, init?: RequestInit) => {
        paths.push(new URL(String(input)).pathname);
        return bridge(new Request(String(input), init));
      }) as typeof globalThis.fetch;
      const client = createClient({ url: BRIDGE, token: TOKEN, fetch });
      expect((await client.run("echo hi")).exitCode).toBe(0);
      expect(paths).toEqual(["/exec"]);
      await client.close();
      await bridge.shutdown();
    }
  });
});
