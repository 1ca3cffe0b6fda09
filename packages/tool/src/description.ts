import { DEFAULT_TIMEOUT_SECONDS } from "@remote-task/protocol";

/** The name every adapter advertises the tool under. */
export const REMOTE_TASK_TOOL_NAME = "remote_task";

/** Short human-readable title (MCP `title`, pi `label`). */
export const REMOTE_TASK_TOOL_TITLE = "Remote task";

/**
 * What the model reads about `remote_task`. With `secrets` (the names the integrator offers) it
 * also says how to ask for them and that the command sees placeholders, never the values.
 */
export function remoteTaskDescription(
  defaultTimeoutSeconds: number = DEFAULT_TIMEOUT_SECONDS,
  secrets: readonly string[] = [],
): string {
  const offered = secrets.map((name) => `\`${name}\``).join(", ");
  return [
    "Run one shell command in a fresh, throwaway remote sandbox and get its output back.",
    "Every call gets its own new sandbox, so calls never see or disturb each other and are safe to run in parallel: use it to fan work out.",
    secrets.length === 0
      ? "It is not your computer: none of your files or workspace are there, and no credentials, tokens or environment variables are passed in."
      : "It is not your computer: none of your files or workspace are there, and no credentials, tokens or environment variables are passed in except the secrets below.",
    ...(secrets.length === 0
      ? []
      : [
          `Secrets: list any of ${offered} in \`secrets\` and the command gets each as an environment variable of that name (e.g. \`curl -H "Authorization: Bearer $${secrets[0]}" ...\`).`,
          "The variable holds a placeholder, never the value: printing it shows the placeholder, and the sandbox's network proxy swaps it for the real value only in request headers to the hosts that credential is meant for; anywhere else it stays a placeholder.",
        ]),
    "Put all input in the command itself (inline data or a heredoc) and have the command print its results to stdout.",
    "Nothing persists: the sandbox is discarded when the command ends, so anything written there is gone.",
    "You see stdout followed by stderr. Only the last 50 KB (at most 2000 lines) is shown and there is nowhere to keep the rest, so have the command summarise or filter large output itself.",
    "A non-zero exit code is reported as an error.",
    `Set \`timeout\` (seconds, default ${defaultTimeoutSeconds}) for long-running commands.`,
  ].join(" ");
}
