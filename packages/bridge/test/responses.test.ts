import { errorBodySchema } from "@remote-task/protocol";
import { describe, expect, it } from "vitest";
import { BackendError, createBridge, errorResponse } from "../src/index.js";
import { HttpError } from "../src/responses.js";
import { createFakeBackend } from "../src/testing/index.js";
import { request, TOKEN } from "./helpers.js";

describe("errorResponse", () => {
  it("answers the protocol error body with the code's status, Retry-After and no caching", async () => {
    const response = errorResponse("capacity_exceeded", "busy", {
      retryAfterSeconds: 2.5,
      headers: { "x-extra": "1" },
    });
    expect(response.status).toBe(503);
    expect(response.headers.get("retry-after")).toBe("3");
    expect(response.headers.get("cache-control")).toBe("no-store");
    expect(response.headers.get("content-type")).toMatch(/^application\/json/);
    expect(response.headers.get("x-extra")).toBe("1");
    expect(errorBodySchema.parse(await response.json())).toEqual({
      error: "busy",
      code: "capacity_exceeded",
      retryAfterSeconds: 2.5,
    });
    const invalid = errorResponse("invalid_request", "bad", {
      issues: [{ path: ["command"], message: "empty" }],
    });
    expect(invalid.status).toBe(400);
    expect(invalid.headers.get("retry-after")).toBeNull();
    expect(await invalid.json()).toEqual({
      error: "bad",
      code: "invalid_request",
      issues: [{ path: ["command"], message: "empty" }],
    });
  });
});

describe("routes from the router", () => {
  it("list every route in a 404 and the methods of a path in a 405, HEAD with GET", async () => {
    const bridge = createBridge({ backend: createFakeBackend(), token: TOKEN, logger: () => {} });
    const missing = await (await bridge(request("/nope"))).json();
    expect(missing.error).toBe(
      "No route /nope; routes are /health, /exec, /cancel, /openapi.json.",
    );
    const health = await bridge(request("/health", { method: "DELETE" }));
    expect(health.headers.get("allow")).toBe("GET, HEAD");
    expect((await health.json()).error).toBe("/health accepts GET, HEAD, not DELETE.");
    // Both answer before the token is checked, as before: a wrong token still gets 404 and 405.
    expect((await bridge(request("/nope", { token: "wrong" }))).status).toBe(404);
    expect((await bridge(request("/exec", { token: "wrong" }))).status).toBe(405);
    expect((await bridge(request("/openapi.json", { token: "wrong" }))).status).toBe(200);
    await bridge.shutdown();
  });
});

describe("error brands", () => {
  it("HttpError and BackendError are recognised by their brand, as from another copy of the package", () => {
    const http = new HttpError("conflict", "taken");
    const backend = new BackendError("sandbox_error", "broke");
    expect(HttpError.isInstance(http)).toBe(true);
    expect(BackendError.isInstance(backend)).toBe(true);
    expect(HttpError.isInstance(backend)).toBe(false);
    expect(BackendError.isInstance(new Error("plain"))).toBe(false);
    // An instance of another copy: a different class whose prototype carries the same brand.
    class Copy extends Error {}
    Object.defineProperty(Copy.prototype, Symbol.for("remote-task.HttpError"), { value: true });
    expect(HttpError.isInstance(new Copy())).toBe(true);
    expect(http.name).toBe("HttpError");
  });
});
