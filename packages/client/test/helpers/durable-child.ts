// A client in a process of its own, to be killed and started again:
// `node durable-child.ts start <url> <token> <command>` starts a detached call, prints its id as
// one JSON line, then waits for its result (the test kills it meanwhile);
// `node durable-child.ts attach <url> <token> <id>` re-attaches by id and prints the result.
// Runs the built client (Node.js runs this file as TypeScript).
import { createClient } from "@remote-task/client";

const [mode = "", url = "", token = "", argument = ""] = process.argv.slice(2);
const client = createClient({ url, token, timeoutSeconds: 60 });

if (mode === "start") {
  const handle = await client.start(argument, { timeoutSeconds: 60 });
  process.stdout.write(`${JSON.stringify({ sandboxId: handle.sandboxId })}\n`);
  await handle.result();
} else {
  const result = await client.attach(argument).result();
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
await client.close();
