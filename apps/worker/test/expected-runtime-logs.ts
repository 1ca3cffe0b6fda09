/**
 * Lines the test runtime prints for failures the tests cause on purpose, and the filter that
 * keeps them out of the test output (every other line, and every other failure, still shows).
 *
 * Why they are printed at all: workerd reports every exception thrown out of a Durable Object
 * RPC method, or out of a stream returned over RPC, as an `uncaught exception` of the callee,
 * even when the caller catches it (cloudflare/workers-sdk#14736). The fake Sandbox throws these
 * on purpose, as the SDK does, so the tests can check how the Worker maps each failure; the
 * SDK's real `Sandbox` throws `Containers have not been enabled` in a runtime without
 * containers, which one test checks; cancelling a command's stream at its deadline makes
 * workerd log the aborted read. Vite warns that `@cloudflare/containers` publishes source maps
 * whose sources it does not ship.
 */

/** What the fake Sandbox throws on purpose. */
export const INJECTED_FAILURES = {
  capacity: "Maximum number of running container instances exceeded",
  start: "fake sandbox could not start the command",
  connectionLost: "fake container connection lost",
  destroy: "fake destroy failed",
} as const;

const UNCAUGHT = "uncaught exception; source = Uncaught (in promise); stack = ";
const CONTAINERS_DISABLED =
  "Error: Containers have not been enabled for this Durable Object class.";
const CANCELLED_STREAM_READ =
  /^exception = kj\/async-io\.c\+\+:\d+: disconnected: abortRead\(\) has been called\n/;
const THIRD_PARTY_SOURCE_MAP =
  /^Sourcemap for "[^"]*\/node_modules\/@cloudflare\/containers\/[^"]*" points to missing source files\n?$/;

const COLOURS = new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, "g");

/** True for one of the lines above, as one write of the runtime's log (first line and stack). */
export function isExpectedRuntimeLog(written: string): boolean {
  const text = written.replace(COLOURS, "");
  if (CANCELLED_STREAM_READ.test(text) || THIRD_PARTY_SOURCE_MAP.test(text)) return true;
  if (!text.startsWith(UNCAUGHT)) return false;
  const firstLine = text.slice(UNCAUGHT.length).split("\n", 1)[0] ?? "";
  if (firstLine.startsWith(CONTAINERS_DISABLED)) return true;
  return Object.values(INJECTED_FAILURES).some((message) => firstLine.endsWith(`: ${message}`));
}

/** The part of `process.stdout` / `process.stderr` the filter wraps. */
interface OutputStream {
  write: (...args: never[]) => boolean;
}

/** Drops the expected lines from what is written to `stream` (the test runner's own output). */
export function dropExpectedRuntimeLogs(stream: OutputStream): void {
  const write = stream.write.bind(stream) as unknown as (...args: unknown[]) => boolean;
  const filtered = (chunk: unknown, ...rest: unknown[]): boolean => {
    if (typeof chunk === "string" && isExpectedRuntimeLog(chunk)) {
      const callback = rest.find((arg) => typeof arg === "function") as (() => void) | undefined;
      callback?.();
      return true;
    }
    return write(chunk, ...rest);
  };
  stream.write = filtered as OutputStream["write"];
}
