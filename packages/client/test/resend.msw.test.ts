// A call whose connection dropped before any answer, on a bridge with durable calls: sent again
// only when the bridge's `unknown` status proves the request never reached it (an instance that
// knows every id sent to it for longer than the request's age); otherwise the honest "may have
// run". Answered by msw handlers: the first `POST /exec` fails like a cut connection.
import type { CallStatus } from "@remote-task/protocol";
import { HttpResponse, http } from "msw";
import { describe, expect, it } from "vitest";
import { ConnectionError, createClient } from "../src/index.js";
import { execResult, fullHealth } from "./helpers/fixtures.js";
import { mswFetch } from "./helpers/msw.js";

const URL_BASE = "https://bridge.test";

/** A bridge whose first `POST /exec` is cut, whose status of the id is `unknown` (with `extra`), and whose later ones answer `second`. */
function bridge(extra: Partial<CallStatus>, second: () => Response) {
  let posts = 0;
  const f = mswFetch(
    http.get(`${URL_BASE}/health`, () => HttpResponse.json(fullHealth)),
    http.post(`${URL_BASE}/exec`, () => (++posts === 1 ? HttpResponse.error() : second())),
    http.get(`${URL_BASE}/exec/:id`, ({ params, request }) => {
      const sandboxId = String(params.id);
      if (!(request.headers.get("accept") ?? "").includes("text/event-stream")) {
        return HttpResponse.json({ sandboxId, state: "unknown", ...extra });
      }
      const events = [
        { type: "start", sandboxId, protocol: 3 },
        { type: "error", error: { error: "unknown", code: "not_found" } },
      ];
      const body = events.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
      return new HttpResponse(body.join(""), {
        headers: { "content-type": "text/event-stream" },
      });
    }),
  );
  // A network error answer stands for the cut: fetch fails as it does on a reset connection.
  const cutting = async (input: RequestInfo | URL, init?: RequestInit) => {
    const response = await f(input, init);
    if (response.type !== "error") return response;
    throw new TypeError("fetch failed", {
      cause: Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }),
    });
  };
  const client = createClient({ url: URL_BASE, token: "tok-Secret-123", fetch: cutting });
  const posted = () =>
    Promise.all(
      f.requests
        .filter((r) => r.method === "POST" && new URL(r.url).pathname === "/exec")
        .map((r) => r.clone().json() as Promise<Record<string, unknown>>),
    );
  return { client, posted };
}

const ok = () => HttpResponse.json(execResult({ stdout: "again\n" }));

describe("a request the bridge never got", () => {
  it("is sent again, the same request, when the instance knows every id since before it", async () => {
    const { client, posted } = bridge({ instance: "a", rememberedSeconds: 3_600 }, ok);
    const result = await client.run("echo again");
    expect(result.stdout).toBe("again\n");
    const [first, second, ...rest] = await posted();
    expect(rest).toEqual([]);
    expect(second).toEqual(first);
  });

  it("is not sent again by an instance that says nothing of what it remembers (an older bridge)", async () => {
    const { client, posted } = bridge({}, ok);
    const error = await client.run("echo once").catch((caught: unknown) => caught);
    expect(ConnectionError.isInstance(error) && error.mayHaveRun).toBe(true);
    expect(await posted()).toHaveLength(1);
  });

  it("is not sent again by an instance younger than the request (the bridge restarted)", async () => {
    const { client, posted } = bridge({ instance: "b", rememberedSeconds: 0 }, ok);
    const error = await client.run("echo once").catch((caught: unknown) => caught);
    expect(ConnectionError.isInstance(error) && error.mayHaveRun).toBe(true);
    expect(await posted()).toHaveLength(1);
  });

  it("ends as 'may have run' when the request sent again is refused as a conflict", async () => {
    const conflict = () => HttpResponse.json({ error: "taken", code: "conflict" }, { status: 409 });
    const { client, posted } = bridge({ instance: "a", rememberedSeconds: 3_600 }, conflict);
    const error = await client.run("echo late").catch((caught: unknown) => caught);
    expect(ConnectionError.isInstance(error) && error.mayHaveRun).toBe(true);
    expect(await posted()).toHaveLength(2);
  });

  it("a streamed call is sent again too", async () => {
    const { client, posted } = bridge({ instance: "a", rememberedSeconds: 3_600 }, ok);
    const seen: string[] = [];
    const result = await client.run("echo again", { onOutput: (event) => seen.push(event.data) });
    expect(result.stdout).toBe("again\n");
    expect(seen).toEqual(["again\n"]);
    expect(await posted()).toHaveLength(2);
  });
});
