// The baseline of the request-path item: a bare node:http server on loopback that reads the JSON
// body, parses it and answers a fixed exec result with the bridge's headers, nothing else.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { serveRpc } from "../lib/proc.ts";

const answer = JSON.stringify({
  stdout: "",
  stderr: "",
  code: 0,
  outcome: "exited",
  durationMs: 0,
  stdoutBytes: 0,
  stderrBytes: 0,
  stdoutTruncated: false,
  stderrTruncated: false,
});

const server = createServer((request, response) => {
  const parts: Buffer[] = [];
  request.on("data", (part: Buffer) => parts.push(part));
  request.on("end", () => {
    JSON.parse(Buffer.concat(parts).toString("utf8"));
    response.writeHead(200, {
      "content-type": "application/json; charset=utf-8",
      "cache-control": "no-store",
    });
    response.end(answer);
  });
});
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const { port } = server.address() as AddressInfo;

serveRpc({ url: () => ({ url: `http://127.0.0.1:${port}` }) });
