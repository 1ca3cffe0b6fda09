import { silentLogger } from "@remote-task/bridge";
import { startEmbeddedBridge } from "@remote-task/bridge/node";
import { createClient, ForbiddenError } from "@remote-task/client";

const bridge = await startEmbeddedBridge({ logger: silentLogger });
const client = createClient({ url: bridge.url, token: bridge.token });

// Text goes to the command's standard input as UTF-8; bytes (Uint8Array, ArrayBuffer) unchanged.
const lines = await client.run("wc -l", { stdin: "name,size\na,1\nb,2\n" });
console.log(lines.stdout.trim()); // 3
const bytes = await client.run("od -An -tx1", { stdin: Uint8Array.of(0, 1, 255) });
console.log(bytes.stdout.trim()); // 00 01 ff

// What a call may ask for: the bridge's default and ceiling (absent: it controls no network).
const { network } = await client.health();
console.log(JSON.stringify(network));
if (network !== undefined) {
  const offline = await client.run("echo no network here", { network: "none" });
  console.log(offline.stdout.trim());
  try {
    // Only the hosts listed; a host beyond the bridge's ceiling is refused, nothing runs.
    await client.run("pip download requests", { network: { allow: ["pypi.org"] } });
  } catch (error) {
    if (!ForbiddenError.isInstance(error)) throw error;
    console.log(`refused: ${error.bridgeMessage}`);
  }
}

await client.close();
await bridge.close();
