// The framework-neutral tool: wire it into any agent loop by hand.
import { remoteTaskTools } from "@remote-task/tool";

// `[remote_task]` when CLOUDFLARE_SANDBOX_URL is set and valid, otherwise `[]`.
const tools = remoteTaskTools(process.env);

for (const tool of tools) {
  console.log(tool.name, tool.jsonSchema); // what to show the model
  const result = await tool.execute({ command: "uname -a && nproc", timeout: 30 });
  console.log(result.isError ? "error:" : "ok:", result.text);
  await tool.close();
}
