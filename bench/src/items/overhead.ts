// 1. Per-call overhead of client.run against a bare undici POST, same bridge, same Agent settings.
import { createClient } from "@remote-task/client";
import { execResultSchema, newSandboxId } from "@remote-task/protocol";
import { Agent, request } from "undici";
import { startBridgeProcess } from "../lib/bridges.ts";
import type { BenchItem, BenchOptions, ItemResult } from "../lib/report.ts";
import { round, summarize } from "../lib/stats.ts";

const TARGET = 1.15;

/** The Agent settings the client gives its own pool (packages/client/src/transport.ts). */
function clientLikeAgent(): Agent {
  return new Agent({
    connections: 128,
    pipelining: 1,
    allowH2: false,
    keepAliveTimeout: 4_000,
    connect: { timeout: 10_000 },
  });
}

async function run(options: BenchOptions): Promise<ItemResult> {
  const calls = options.quick ? 300 : 5000;
  const warmup = options.quick ? 100 : 500;
  const bridge = await startBridgeProcess({ backend: "fake" });
  const client = createClient({ url: bridge.url, token: bridge.token });
  const agent = clientLikeAgent();
  const url = `${bridge.url}/exec`;
  const headers = {
    accept: "application/json",
    "content-type": "application/json",
    authorization: `Bearer ${bridge.token}`,
  };

  const viaClient = async (): Promise<number> => {
    const started = performance.now();
    const result = await client.run("true");
    const elapsed = performance.now() - started;
    if (result.exitCode !== 0) throw new Error(`client.run exited ${result.exitCode}`);
    return elapsed;
  };
  const bare = async (): Promise<number> => {
    const started = performance.now();
    const response = await request(url, {
      method: "POST",
      headers,
      body: JSON.stringify({
        sandboxId: newSandboxId("mikan-task"),
        command: "true",
        cwd: "/workspace",
        timeoutSeconds: 120,
      }),
      dispatcher: agent,
      headersTimeout: 0,
      bodyTimeout: 0,
    });
    const value = (await response.body.json()) as { code?: number };
    const elapsed = performance.now() - started;
    if (response.statusCode !== 200 || value.code !== 0) {
      throw new Error(`bare POST answered ${response.statusCode}`);
    }
    return elapsed;
  };

  try {
    for (let i = 0; i < warmup; i++) {
      await viaClient();
      await bare();
    }
    const a: number[] = [];
    const b: number[] = [];
    // Alternate the order every iteration so drift and ordering effects hit both sides alike.
    for (let i = 0; i < calls; i++) {
      if (i % 2 === 0) {
        a.push(await viaClient());
        b.push(await bare());
      } else {
        b.push(await bare());
        a.push(await viaClient());
      }
    }
    const sa = summarize(a);
    const sb = summarize(b);
    const p50 = sa.p50 / sb.p50;
    const p99 = sa.p99 / sb.p99;
    const mean = sa.mean / sb.mean;
    const met = p50 <= TARGET && p99 <= TARGET;
    const ms = (v: number) => round(v, 3);
    // Sanity: the bare POST's answer is a valid protocol result too (same work on the bridge).
    execResultSchema.parse(
      await (
        await request(url, {
          method: "POST",
          headers,
          body: JSON.stringify({ sandboxId: newSandboxId("check"), command: "true" }),
          dispatcher: agent,
        })
      ).body.json(),
    );
    return {
      id: "1",
      title: "Client overhead: `client.run` vs bare undici POST",
      target: `p50 and p99 ratio <= ${TARGET}`,
      met,
      headline: `ratio p50 ${round(p50, 2)}, p99 ${round(p99, 2)} (${calls} calls each)`,
      tables: [
        {
          columns: ["", "calls", "p50 ms", "p99 ms", "mean ms"],
          rows: [
            ["client.run", sa.runs, ms(sa.p50), ms(sa.p99), ms(sa.mean)],
            ["bare undici request()", sb.runs, ms(sb.p50), ms(sb.p99), ms(sb.mean)],
            ["ratio", "", round(p50, 3), round(p99, 3), round(mean, 3)],
          ],
        },
      ],
      notes: [
        `Sequential calls (one in flight), ${warmup} warm-up calls of each first, then A and B alternated every iteration (order swapped every other iteration).`,
        "Bridge in its own process with the fake backend answering at once (`true`: exit 0, no output); both sides use a keep-alive undici Agent with the client's settings (128 connections, pipelining 1, HTTP/1.1).",
        "The bare side sends the same JSON body shape and parses the JSON answer, without id checks, validation, deadlines or abort wiring.",
      ],
      raw: { calls, warmup, client: sa, bare: sb, ratio: { p50, p99, mean } },
    };
  } finally {
    await client.close();
    await agent.close();
    await bridge.stop();
  }
}

export const overhead: BenchItem = { id: "overhead", title: "Client overhead", run };
