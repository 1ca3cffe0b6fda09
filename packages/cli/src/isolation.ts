/**
 * What isolation `none` does not protect, said once when it is asked for explicitly, as the local
 * backend says it when `auto` falls back to it.
 */
function isolationNoneWarning(root: boolean): string {
  return `remote-task: warning: isolation "none": commands run with no namespaces, ${root ? "an unprivileged uid per sandbox" : "this program's own uid"}, host files visible and this machine's network reachable; only the per-sandbox limits apply. Use it only for commands you trust.\n`;
}

/** Writes to stderr what the local backend's isolation "none" leaves open. */
export function warnIsolationNone(): void {
  process.stderr.write(isolationNoneWarning(process.getuid?.() === 0));
}
