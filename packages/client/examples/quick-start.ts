import { silentLogger } from "@remote-task/bridge";
import { startEmbeddedBridge } from "@remote-task/bridge/node";
import { createClient, formatOutput } from "@remote-task/client";

// A bridge on loopback; each call runs in a fresh, throwaway temporary directory. It logs one
// JSON line per call to stderr; `silentLogger` drops them (leave `logger` out to see them).
const bridge = await startEmbeddedBridge({ logger: silentLogger });
const client = createClient({ url: bridge.url, token: bridge.token });

const result = await client.run("echo hello from $(pwd); exit 3");
console.log(result.outcome, result.exitCode); // exited 3 (a non-zero exit is a value)
console.log(formatOutput(result).text); // what an agent would see

const settled = await client.runMany(["uname -s", "echo $((6 * 7))", "sleep 1; echo done"], {
  concurrency: 2,
  onProgress: ({ done, failed, total }) => console.log(`${done}/${total} (${failed} failed)`),
});
for (const task of settled) {
  console.log(task.status === "fulfilled" ? task.value.stdout.trim() : task.reason.message);
}

await client.close();
await bridge.close();
