// The client in its own process, so its RSS is measured apart from the bridge's and the runner's.
import { createClient, type RemoteTaskClient } from "@remote-task/client";
import { serveRpc } from "../lib/proc.ts";

interface RunParams {
  url: string;
  token: string;
  command: string;
  mode: "json" | "sse";
}

const clients = new Map<string, RemoteTaskClient>();

async function run(params: RunParams) {
  let client = clients.get(params.url);
  if (client === undefined) {
    client = createClient({ url: params.url, token: params.token, timeoutSeconds: 600 });
    clients.set(params.url, client);
  }
  let streamedBytes = 0;
  let events = 0;
  const started = performance.now();
  const result = await client.run(
    params.command,
    params.mode === "sse"
      ? {
          onOutput: (event) => {
            events++;
            streamedBytes += Buffer.byteLength(event.data);
          },
        }
      : {},
  );
  return {
    ms: performance.now() - started,
    exitCode: result.exitCode,
    stdoutBytes: result.stdoutBytes,
    retainedBytes: Buffer.byteLength(result.stdout),
    streamedBytes,
    events,
  };
}

serveRpc({ run });
