// The bridge's HTTP request path alone: POST /exec to a bridge whose fake backend answers at once,
// against a bare node:http server that reads and parses the same body and answers the same JSON.
import { newSandboxId } from "@remote-task/protocol";
import { Agent, request } from "undici";
import { startBridgeProcess } from "../lib/bridges.ts";
import { ChildRpc, cpuTimeMs } from "../lib/proc.ts";
import type { BenchItem, BenchOptions, ItemResult } from "../lib/report.ts";
import { round, summarize } from "../lib/stats.ts";

interface Server {
  name: string;
  url: string;
  token: string;
  pid: number;
}

async function run(options: BenchOptions): Promise<ItemResult> {
  const calls = options.quick ? 300 : 5000;
  const warmup = options.quick ? 100 : 500;
  const parallel = options.quick ? 500 : 5000;
  const bridgeProcess = await startBridgeProcess({ backend: "fake" });
  const bareProcess = await ChildRpc.start("bare-http");
  const agent = new Agent({ connections: 128, pipelining: 1, keepAliveTimeout: 4_000 });
  const bridge: Server = { name: "bridge (fake backend)", ...bridgeProcess };
  const bare: Server = {
    name: "bare node:http",
    url: (await bareProcess.call<{ url: string }>("url")).url,
    token: "",
    pid: bareProcess.pid,
  };

  const post = async (server: Server): Promise<number> => {
    const started = performance.now();
    const response = await request(`${server.url}/exec`, {
      method: "POST",
      dispatcher: agent,
      headers: { "content-type": "application/json", authorization: `Bearer ${server.token}` },
      body: JSON.stringify({
        sandboxId: newSandboxId("mikan-task"),
        command: "true",
        cwd: "/workspace",
        timeoutSeconds: 120,
      }),
    });
    const value = (await response.body.json()) as { code?: number };
    if (response.statusCode !== 200 || value.code !== 0) {
      throw new Error(`${server.name} answered ${response.statusCode}`);
    }
    return performance.now() - started;
  };

  try {
    for (let i = 0; i < warmup; i++) {
      await post(bridge);
      await post(bare);
    }
    const latency = { bridge: [] as number[], bare: [] as number[] };
    const cpu0 = { bridge: cpuTimeMs(bridge.pid), bare: cpuTimeMs(bare.pid) };
    // Alternate the order every iteration so drift hits both sides alike.
    for (let i = 0; i < calls; i++) {
      const order = i % 2 === 0 ? [bridge, bare] : [bare, bridge];
      for (const server of order) {
        (server === bridge ? latency.bridge : latency.bare).push(await post(server));
      }
    }
    const cpuPerCall = {
      bridge: (cpuTimeMs(bridge.pid) - cpu0.bridge) / calls,
      bare: (cpuTimeMs(bare.pid) - cpu0.bare) / calls,
    };
    // 16 calls in flight: calls per second, each side twice, alternated.
    const throughput = { bridge: [] as number[], bare: [] as number[] };
    for (const server of [bridge, bare, bare, bridge]) {
      let sent = 0;
      const started = performance.now();
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          while (sent < parallel) {
            sent++;
            await post(server);
          }
        }),
      );
      const perSecond = parallel / ((performance.now() - started) / 1000);
      (server === bridge ? throughput.bridge : throughput.bare).push(perSecond);
    }
    const a = summarize(latency.bridge);
    const b = summarize(latency.bare);
    const best = (values: number[]) => Math.max(...values);
    const ms = (value: number) => round(value, 3);
    return {
      id: "request-path",
      title:
        "Bridge request path: POST /exec with a backend that answers at once vs bare node:http",
      target: "none (where the per-call time of the bridge itself goes)",
      met: null,
      headline: `p50 ${ms(a.p50)} vs ${ms(b.p50)} ms (+${ms(a.p50 - b.p50)} ms, ${round(a.p50 / b.p50, 2)}x); server CPU ${ms(cpuPerCall.bridge)} vs ${ms(cpuPerCall.bare)} ms per call`,
      tables: [
        {
          columns: [
            "",
            "calls",
            "p50 ms",
            "p99 ms",
            "mean ms",
            "server CPU ms/call",
            "calls/s at 16",
          ],
          rows: [
            [
              bridge.name,
              a.runs,
              ms(a.p50),
              ms(a.p99),
              ms(a.mean),
              ms(cpuPerCall.bridge),
              round(best(throughput.bridge), 0),
            ],
            [
              bare.name,
              b.runs,
              ms(b.p50),
              ms(b.p99),
              ms(b.mean),
              ms(cpuPerCall.bare),
              round(best(throughput.bare), 0),
            ],
            [
              "ratio",
              "",
              round(a.p50 / b.p50, 2),
              round(a.p99 / b.p99, 2),
              round(a.mean / b.mean, 2),
              round(cpuPerCall.bridge / cpuPerCall.bare, 2),
              round(best(throughput.bridge) / best(throughput.bare), 2),
            ],
          ],
        },
      ],
      notes: [
        `Sequential calls (one in flight), ${warmup} warm-up calls of each first, then the two alternated every iteration (order swapped every other one); then ${parallel} calls with 16 in flight, each side twice, the better run shown.`,
        "Each server in its own process; one keep-alive undici Agent (128 connections, HTTP/1.1) for both. The bridge checks the token, reads and validates the body, admits the call, runs it on the fake backend (exit 0, no output), logs nothing (silentLogger) and answers the result; the bare server reads and parses the same body and answers the same JSON.",
        "Server CPU is user plus system time of each server process (/proc) over the sequential calls, divided by the calls.",
      ],
      raw: { calls, warmup, parallel, bridge: a, bare: b, cpuPerCall, throughput },
    };
  } finally {
    await agent.close();
    await bridgeProcess.stop();
    await bareProcess.stop();
  }
}

export const requestPath: BenchItem = { id: "request-path", title: "Bridge request path", run };
