/**
 * A call's secret end to end on the Worker as deployed: the built bundle in Miniflare with SECRETS
 * declared and the value as a binding, its real `TaskContainer` and `EgressGate`, and a container
 * of the fake engine whose plain HTTP (port 80) goes through workerd's egress listener to the gate.
 * The gate's own requests to the secret's host (`api.github.com`) are carried by the harness to a
 * loopback server standing in for the API (Miniflare's outbound service), so no request leaves
 * the machine. The command sends the placeholder it holds; the server gets the value; the value
 * is in no answer. HTTPS is not carried here: on Cloudflare it goes through the platform's
 * sidecar, which does not run on this machine (the fake engine answers CONNECT with 502).
 */
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { execResultSchema, newSandboxId } from "@remote-task/protocol";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { WorkerHarness } from "./worker.ts";

const VALUE = `ghp_${crypto.randomUUID().replaceAll("-", "")}`;
/** Where the fake engine's containers find the emulated interception (engine.ts). */
const EGRESS_PROXY = "http://127.0.0.1:3128";

let harness: WorkerHarness;
let server: Server;
/** What the stand-in API received: the URL the gate fetched, and the headers. */
const received: Array<{ url: string; headers: IncomingHttpHeaders }> = [];
/** The URLs the gate fetched. */
const fetched: string[] = [];

beforeAll(async () => {
  server = createServer((request, response) => {
    received.push({ url: request.url ?? "", headers: request.headers });
    response.end("hello from the API\n");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  harness = await WorkerHarness.start({
    vars: {
      SECRETS: JSON.stringify({
        // Port 80 named: the fake engine carries plain HTTP only, and a bare host would get its
        // value over HTTPS only.
        GH_TOKEN: { hosts: ["api.github.com:80"], header: "X-Declared: token {value}" },
      }),
      GH_TOKEN: VALUE,
    },
    // The gate's requests go to the loopback server instead of the internet.
    outbound: async (request) => {
      fetched.push(request.url);
      const url = new URL(request.url);
      const headers = new Headers(request.headers);
      headers.delete("host");
      return fetch(`http://127.0.0.1:${port}${url.pathname}${url.search}`, {
        method: request.method,
        headers,
        redirect: "manual",
      });
    },
  });
}, 120_000);

afterEach(() => {
  expect(harness.engine.problems).toEqual([]);
});

afterAll(async () => {
  await harness?.close();
  await new Promise((resolve) => server?.close(resolve));
}, 60_000);

describe("a secret through the built Worker's egress gate", () => {
  it("reaches the secret's host as the value while the command holds only the placeholder", async () => {
    const answer = await harness.exec({
      sandboxId: newSandboxId("harness"),
      command: `wget -q -O - --header "Authorization: Bearer $GH_TOKEN" http://api.github.com/user && echo "env=$GH_TOKEN"`,
      secrets: ["GH_TOKEN"],
      // The fake engine carries intercepted HTTP through a proxy in the container (on Cloudflare
      // the interception is transparent), so the command is told where it is.
      env: { http_proxy: EGRESS_PROXY },
    });
    expect(answer.status, answer.text).toBe(200);
    const result = execResultSchema.parse(JSON.parse(answer.text));
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^hello from the API\nenv=rt_secret_[0-9a-f]{32}\n$/);
    expect(fetched).toEqual(["http://api.github.com/user"]);
    expect(received).toMatchObject([
      {
        url: "/user",
        headers: { authorization: `Bearer ${VALUE}`, "x-declared": `token ${VALUE}` },
      },
    ]);
    expect(answer.text).not.toContain(VALUE);
    expect(harness.logs.join("\n")).not.toContain(VALUE);
    expect((await harness.health()).secrets).toEqual([
      { name: "GH_TOKEN", hosts: ["api.github.com:80"] },
    ]);
  });

  it("refuses the placeholder to another host the call may reach, which never sees the request", async () => {
    const before = fetched.length;
    const answer = await harness.exec({
      sandboxId: newSandboxId("harness"),
      command: `wget -q -O - --content-on-error --header "Authorization: Bearer $GH_TOKEN" http://example.com/`,
      secrets: ["GH_TOKEN"],
      network: { allow: ["example.com"] },
      env: { http_proxy: EGRESS_PROXY },
    });
    const result = execResultSchema.parse(JSON.parse(answer.text));
    expect(result.code).not.toBe(0);
    expect(result.stdout).toContain("carries the placeholder of secret GH_TOKEN");
    expect(fetched.length).toBe(before);
  });
});
