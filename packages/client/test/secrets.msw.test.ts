import { execRequestSchema } from "@remote-task/protocol";
import { fullHealthResponse } from "@remote-task/protocol/fixtures";
import { HttpResponse, http } from "msw";
import { describe, expect, it } from "vitest";
import { createClient } from "../src/index.js";
import { fullResult } from "./helpers/fixtures.js";
import { mswFetch } from "./helpers/msw.js";

const URL_BASE = "https://bridge.test";

describe("secrets", () => {
  it("run sends the secrets' names as given", async () => {
    const f = mswFetch(
      http.get(`${URL_BASE}/health`, () => HttpResponse.json(fullHealthResponse)),
      http.post(`${URL_BASE}/exec`, () => HttpResponse.json(fullResult)),
    );
    const client = createClient({ url: URL_BASE, token: "tok-Secret-123", fetch: f, retry: false });
    await client.run("gh api user", { secrets: ["GH_TOKEN"] });
    const sent = f.requests.filter((r) => new URL(r.url).pathname === "/exec");
    const body = execRequestSchema.parse(await sent[0]?.json());
    expect(body.secrets).toEqual(["GH_TOKEN"]);
  });
});
