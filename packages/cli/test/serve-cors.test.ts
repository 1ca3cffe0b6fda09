import { once } from "node:events";
import { describe, expect, it } from "vitest";
import { runCli, startCli } from "./helpers.js";

const PAGE = "https://app.example.com";

/** The bridge URL `serve` prints on its `export` line. */
async function servedUrl(server: ReturnType<typeof startCli>): Promise<string> {
  let out = "";
  server.stdout?.setEncoding("utf8");
  for await (const chunk of server.stdout ?? []) {
    out += chunk;
    const url = /CLOUDFLARE_SANDBOX_URL=(\S+)/.exec(out)?.[1];
    if (url) return url;
  }
  throw new Error(`serve printed no URL: ${out}`);
}

function preflight(url: string, origin: string) {
  return fetch(`${url}/exec`, {
    method: "OPTIONS",
    headers: { origin, "access-control-request-method": "POST" },
  });
}

describe("serve --cors-origin", () => {
  it("answers the listed origins' preflights and refuses other origins", async () => {
    const server = startCli([
      "serve",
      "--local",
      "--isolation",
      "none",
      "--cors-origin",
      PAGE,
      "--cors-origin",
      "http://localhost:5173",
    ]);
    try {
      const url = await servedUrl(server);
      for (const origin of [PAGE, "http://localhost:5173"]) {
        const allowed = await preflight(url, origin);
        expect(allowed.status).toBe(204);
        expect(allowed.headers.get("access-control-allow-origin")).toBe(origin);
      }
      const refused = await preflight(url, "https://other.example");
      expect(refused.status).toBe(403);
      expect(refused.headers.get("access-control-allow-origin")).toBeNull();
    } finally {
      server.kill("SIGINT");
      await once(server, "exit");
    }
  });

  it("refuses an origin with a path as a usage error", async () => {
    const result = await runCli(["serve", "--local", "--cors-origin", `${PAGE}/app`]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      'The CORS origin "https://app.example.com/app" is not a web origin as browsers send it',
    );
  });

  it("serves without CORS when no origin is listed", async () => {
    const server = startCli(["serve", "--local", "--isolation", "none"]);
    try {
      const url = await servedUrl(server);
      expect((await preflight(url, PAGE)).status).toBe(405);
    } finally {
      server.kill("SIGINT");
      await once(server, "exit");
    }
  });
});
