import { afterEach, describe, expect, it } from "vitest";
import { createBridge } from "../src/index.js";
import { createFakeBackend } from "../src/testing/index.js";
import {
  expectError,
  request,
  setupBridge,
  shutdownBridges,
  TOKEN,
  trackBridge,
} from "./helpers.js";

afterEach(shutdownBridges);

const PAGE = "https://app.example.com";

/** A browser's preflight for `POST /exec` from `origin`. */
function preflight(origin: string, path = "/exec") {
  return request(path, {
    method: "OPTIONS",
    token: null,
    headers: {
      origin,
      "access-control-request-method": "POST",
      "access-control-request-headers": "authorization,content-type",
    },
  });
}

describe("CORS, off by default", () => {
  it("answers a preflight 405 and adds no CORS headers", async () => {
    const { bridge } = setupBridge();
    const response = await bridge(preflight(PAGE));
    expect(response.status).toBe(405);
    expect(response.headers.get("access-control-allow-origin")).toBeNull();
    const health = await bridge(request("/health", { headers: { origin: PAGE } }));
    expect(health.status).toBe(200);
    expect(health.headers.get("access-control-allow-origin")).toBeNull();
  });
});

describe("CORS for the origins the deployer lists", () => {
  it("answers a listed origin's preflight with what the client sends", async () => {
    const { bridge, backend } = setupBridge({ cors: { origins: [PAGE] } });
    const response = await bridge(preflight(PAGE));
    expect(response.status).toBe(204);
    expect(response.headers.get("access-control-allow-origin")).toBe(PAGE);
    expect(response.headers.get("access-control-allow-methods")).toBe("GET, POST");
    expect(response.headers.get("access-control-allow-headers")).toBe(
      "authorization, content-type, accept",
    );
    expect(response.headers.get("vary")).toBe("origin");
    expect(backend.starts).toEqual([]);
  });

  it("runs a listed origin's call and lets its page read the answer and Retry-After", async () => {
    const { exec, backend } = setupBridge({ cors: { origins: ["http://localhost:5173", PAGE] } });
    const response = await exec({ command: "echo hi" }, { headers: { origin: PAGE } });
    expect(response.status).toBe(200);
    expect(response.headers.get("access-control-allow-origin")).toBe(PAGE);
    expect(response.headers.get("access-control-expose-headers")).toBe("retry-after");
    expect(response.headers.get("content-type")).toContain("application/json");
    expect(await response.json()).toMatchObject({ code: 0 });
    expect(backend.starts).toHaveLength(1);
  });

  it("adds the headers to error answers too (a wrong token)", async () => {
    const { bridge } = setupBridge({ cors: { origins: [PAGE] } });
    const response = await bridge(
      request("/health", { token: "wrong", headers: { origin: PAGE } }),
    );
    expect(response.headers.get("access-control-allow-origin")).toBe(PAGE);
    await expectError(response, "unauthorized");
  });

  it("refuses another origin's preflight and call with 403 and no CORS headers; nothing runs", async () => {
    const { bridge, exec, backend } = setupBridge({ cors: { origins: [PAGE] } });
    const refused = await bridge(preflight("https://evil.example"));
    expect(refused.headers.get("access-control-allow-origin")).toBeNull();
    const body = await expectError(refused, "forbidden");
    expect(body.error).toBe(
      "Requests from the web origin https://evil.example are not allowed by this bridge's CORS settings, so the command did not run. The deployer lists the origins whose pages may call the bridge.",
    );
    const call = await exec(
      { command: "echo hi" },
      { headers: { origin: "https://evil.example" } },
    );
    expect(call.headers.get("access-control-allow-origin")).toBeNull();
    await expectError(call, "forbidden");
    expect(backend.starts).toEqual([]);
  });

  it("leaves requests without an Origin header as they were", async () => {
    const { exec } = setupBridge({ cors: { origins: [PAGE] } });
    const response = await exec({ command: "echo hi" });
    expect(response.status).toBe(200);
    expect(response.headers.get("access-control-allow-origin")).toBeNull();
  });

  it.each([
    "https://app.example.com/",
    "app.example.com",
    "https://app.example.com/path",
    "*",
    "file:///x",
  ])("refuses %s as an origin when created", (origin) => {
    expect(() =>
      trackBridge(
        createBridge({ backend: createFakeBackend(), token: TOKEN, cors: { origins: [origin] } }),
      ),
    ).toThrow(/is not a web origin as browsers send it/);
  });
});
