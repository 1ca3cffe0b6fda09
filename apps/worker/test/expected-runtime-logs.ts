/**
 * Lines the test runtime prints for failures the tests cause on purpose, and the filter that
 * keeps them out of the test output (every other line, and every other failure, still shows).
 *
 * Why they are printed at all: workerd reports every exception thrown out of a Durable Object
 * RPC method, or out of a stream returned over RPC, as an `uncaught exception` of the callee,
 * even when the caller catches it (cloudflare/workers-sdk#14736). The fake container throws these
 * on purpose, as the platform does, so the tests can check how the Worker maps each failure; the
 * real `TaskContainer` refuses a second start or command (tests check it) and says containers are
 * off in a runtime without them (one test checks it); cancelling a command's stream at its
 * deadline makes workerd log the aborted read.
 */

/** What the fake container throws on purpose. */
export const INJECTED_FAILURES = {
  capacity: "Maximum number of running container instances exceeded",
  start: "fake container could not run the command",
  connectionLost: "fake container connection lost",
  destroy: "fake destroy failed",
} as const;

const UNCAUGHT = "uncaught exception; source = Uncaught (in promise); stack = ";
/**
 * How what the Worker's own `TaskContainer` throws for the tests that check it begins (the
 * texts of CLOUDFLARE_TEXTS `containersDisabled` and `sandboxUsed`; this module is loaded by the
 * test config, before the workspace's sources can be).
 */
const OWN_REFUSALS = [
  "BackendError: Containers are not available to this Worker, so the command did not run: ",
  "BackendError: This sandbox's container object was used already (",
];
/** A durable-calls test resets a `CallKeeper` (`ctx.abort("keeper reset by test")`), as an eviction would. */
const KEEPER_RESET =
  /^uncaught exception; exception = workerd\/api\/actor-state\.c\+\+:\d+: failed: broken\.outputGateBroken; jsg\.Error: keeper reset by test/;
const CANCELLED_STREAM_READ =
  /^exception = kj\/async-io\.c\+\+:\d+: disconnected: abortRead\(\) has been called\n/;

const COLOURS = new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, "g");

/** True for one of the lines above, as one write of the runtime's log (first line and stack). */
export function isExpectedRuntimeLog(written: string): boolean {
  const text = written.replace(COLOURS, "");
  if (CANCELLED_STREAM_READ.test(text) || KEEPER_RESET.test(text)) return true;
  if (!text.startsWith(UNCAUGHT)) return false;
  const firstLine = text.slice(UNCAUGHT.length).split("\n", 1)[0] ?? "";
  if (OWN_REFUSALS.some((start) => firstLine.startsWith(start))) return true;
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
