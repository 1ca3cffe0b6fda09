import { CLOUDFLARE_TEXTS } from "@remote-task/internal";
import { describe, expect, it } from "vitest";
import { INJECTED_FAILURES, isExpectedRuntimeLog } from "./expected-runtime-logs.js";

const uncaught = (stack: string) =>
  `uncaught exception; source = Uncaught (in promise); stack = ${stack}\n    at #start (/x/fake-container.ts:1:1)\n`;

describe("the test output filter", () => {
  it("drops the failures the tests inject on purpose", () => {
    for (const message of Object.values(INJECTED_FAILURES)) {
      expect(isExpectedRuntimeLog(uncaught(`Error: ${message}`))).toBe(true);
    }
    expect(
      isExpectedRuntimeLog(uncaught(`BackendError: ${CLOUDFLARE_TEXTS.containersDisabled}`)),
    ).toBe(true);
    expect(
      isExpectedRuntimeLog(uncaught(`BackendError: ${CLOUDFLARE_TEXTS.sandboxUsed("ran")}`)),
    ).toBe(true);
    expect(
      isExpectedRuntimeLog(
        "exception = kj/async-io.c++:1697: disconnected: abortRead() has been called\nstack: /x/workerd@1\n",
      ),
    ).toBe(true);
  });

  it("keeps every other failure and line", () => {
    expect(isExpectedRuntimeLog(uncaught("TypeError: x is not a function"))).toBe(false);
    expect(isExpectedRuntimeLog(uncaught("Error: fake destroy failed twice"))).toBe(false);
    expect(isExpectedRuntimeLog(uncaught(`BackendError: ${CLOUDFLARE_TEXTS.stopped}`))).toBe(false);
    expect(isExpectedRuntimeLog("exception = kj/async-io.c++:1: disconnected: other\n")).toBe(
      false,
    );
    expect(
      isExpectedRuntimeLog('Sourcemap for "/r/src/index.ts" points to missing source files\n'),
    ).toBe(false);
    expect(isExpectedRuntimeLog("✓ test/worker.test.ts (34 tests)\n")).toBe(false);
  });
});
