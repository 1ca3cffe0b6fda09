// The cost of a secret on HTTPS: requests from inside a bwrap sandbox (curl) to a loopback HTTPS
// server, through the egress proxy, to a host with a secret rule (the proxy terminates TLS with
// the sandbox's CA, puts the value in, and sends the request over its own verified TLS connection
// upstream, kept open between requests) against the same server under another name (a plain
// CONNECT tunnel). Both a new connection per request (one curl each) and one kept-alive
// connection (one curl, many URLs); alternated.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEmbeddedBridge } from "@remote-task/bridge/node";
import { newSandboxId } from "@remote-task/protocol";
import type { BenchItem, BenchOptions, ItemResult } from "../lib/report.ts";
import { round, summarize } from "../lib/stats.ts";

/** A self-signed certificate for `localhost` and 127.0.0.1 (openssl, as any test server would). */
function testCertificate(): { key: string; cert: string } {
  const dir = mkdtempSync(join(tmpdir(), "rt-bench-ca-"));
  try {
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=DNS:localhost,IP:127.0.0.1",
        "-days",
        "1",
        "-keyout",
        join(dir, "key.pem"),
        "-out",
        join(dir, "cert.pem"),
      ],
      { stdio: "ignore" },
    );
    return {
      key: readFileSync(join(dir, "key.pem"), "utf8"),
      cert: readFileSync(join(dir, "cert.pem"), "utf8"),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function run(options: BenchOptions): Promise<ItemResult> {
  const rounds = options.quick ? 20 : 200;
  const tls = testCertificate();
  const server = createServer(tls, (_req, res) => res.end("ok"));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  process.env.RT_BENCH_SECRET = "bench-secret-value";
  const bridge = await startEmbeddedBridge({
    local: {
      isolation: "bwrap",
      egress: { allowPrivate: ["localhost", "127.0.0.1"], upstreamCa: tls.cert },
    },
    network: { default: "none", ceiling: { allow: [`127.0.0.1:${port}`] } },
    secrets: { TOKEN: { from: { env: "RT_BENCH_SECRET" }, hosts: [`localhost:${port}`] } },
  });
  const intercepted = `https://localhost:${port}/`;
  const tunnel = `https://127.0.0.1:${port}/`;
  const one = (url: string, flags: string) =>
    `curl -s -o /dev/null -w 'X %{time_total}\\n' ${flags} -H "Authorization: Bearer $TOKEN" ${url}`;
  const kept = (label: string, url: string, flags: string) =>
    `curl -s -w '${label} %{time_total}\\n' ${flags} -H "Authorization: Bearer $TOKEN" ${Array.from({ length: rounds }, () => `-o /dev/null ${url}`).join(" ")}`;
  // The plain tunnel reaches the real certificate: the sandbox trusts it through --cacert.
  const command = [
    // The same CA bundle size on both sides (the sandbox's bundle and the real certificate).
    'cat "$CURL_CA_BUNDLE" - > /tmp/real.pem',
    `for i in $(seq ${rounds}); do ${one(intercepted, "").replace("X", "new-intercepted")}; ${one(tunnel, "--cacert /tmp/real.pem").replace("X", "new-tunnel")}; done`,
    kept("kept-intercepted", intercepted, ""),
    kept("kept-tunnel", tunnel, "--cacert /tmp/real.pem"),
  ].join("; ");
  try {
    const response = await fetch(`${bridge.url}/exec`, {
      method: "POST",
      headers: { authorization: `Bearer ${bridge.token}`, "content-type": "application/json" },
      body: JSON.stringify({
        sandboxId: newSandboxId("bench"),
        command,
        stdin: tls.cert,
        secrets: ["TOKEN"],
        network: { allow: [`127.0.0.1:${port}`] },
        timeoutSeconds: 600,
      }),
    });
    const result = (await response.json()) as { stdout?: string; stderr?: string; code?: number };
    if (result.code !== 0) throw new Error(`the bench command failed: ${JSON.stringify(result)}`);
    const times = new Map<string, number[]>();
    for (const line of (result.stdout ?? "").trim().split("\n")) {
      const [label = "", seconds = "0"] = line.split(" ");
      times.set(label, [...(times.get(label) ?? []), Number(seconds) * 1000]);
    }
    const s = (label: string) => summarize(times.get(label) ?? []);
    const rows = [
      ["new connection per request", s("new-intercepted"), s("new-tunnel")],
      ["one kept-alive connection", s("kept-intercepted"), s("kept-tunnel")],
    ] as const;
    const ratio = round(rows[0][1].p50 / rows[0][2].p50, 2);
    return {
      id: "18",
      title: "HTTPS with a secret: intercepting proxy vs plain tunnel",
      target: "none (a cost to know)",
      met: null,
      headline: `p50 per new HTTPS request ${round(rows[0][1].p50, 2)} ms intercepted vs ${round(rows[0][2].p50, 2)} ms tunnelled (${ratio}x)`,
      tables: [
        {
          caption: `curl inside a bwrap sandbox to a loopback HTTPS server, ${rounds} requests each, alternated; ms (curl's time_total)`,
          columns: ["requests", "intercepted p50", "intercepted p99", "tunnel p50", "tunnel p99"],
          rows: rows.map(([name, a, b]) => [
            name,
            round(a.p50, 2),
            round(a.p99, 2),
            round(b.p50, 2),
            round(b.p99, 2),
          ]),
        },
      ],
      notes: [
        "Intercepted: the proxy terminates TLS with the sandbox's CA (a leaf per host, made once), rewrites the headers, and sends them over its verified TLS connection upstream, kept open between requests (pooled per sandbox and destination); tunnelled: bytes copied both ways. Both sides trust a CA bundle of the same size.",
      ],
      raw: Object.fromEntries([...times].map(([label, values]) => [label, summarize(values)])),
    };
  } finally {
    await bridge.close();
    server.close();
  }
}

export const secretProxy: BenchItem = {
  id: "secret-proxy",
  title: "HTTPS with a secret: intercepting proxy vs plain tunnel",
  run,
};
