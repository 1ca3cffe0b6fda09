import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ConfigError, readConfig, type WorkerEnv } from "../src/config.js";

type Vars = Partial<Record<Exclude<keyof WorkerEnv, "Sandbox">, string>>;
const bindings = (vars: Vars): WorkerEnv => ({ ...vars, Sandbox: env.Sandbox });

describe("readConfig", () => {
  it("reads every variable", () => {
    expect(
      readConfig(
        bindings({
          BRIDGE_TOKEN: "t",
          ALLOW_UNAUTHENTICATED: " TRUE ",
          DEFAULT_CWD: "/srv",
          HEARTBEAT_INTERVAL_MS: "15000",
          SANDBOX_SLEEP_AFTER: "300",
          MAX_REQUEST_BYTES: "1000",
          MAX_COMMAND_BYTES: "100",
          MAX_ENV_ENTRIES: "0",
          MAX_ENV_ENTRY_BYTES: "10",
          MAX_TIMEOUT_SECONDS: "1.5",
          MAX_OUTPUT_BYTES: "65536",
          MAX_CONCURRENT_CALLS: "5",
          MAX_QUEUED_CALLS: "0",
        }),
      ),
    ).toEqual({
      token: "t",
      allowUnauthenticated: true,
      defaultCwd: "/srv",
      heartbeatIntervalMs: 15_000,
      sleepAfter: 300,
      limits: {
        maxRequestBytes: 1000,
        maxCommandBytes: 100,
        maxEnvEntries: 0,
        maxEnvEntryBytes: 10,
        maxTimeoutSeconds: 1.5,
        maxOutputBytes: 65_536,
      },
      admission: { maxConcurrent: 5, maxQueued: 0 },
    });
  });

  it("treats empty values as unset and keeps auth on by default", () => {
    expect(
      readConfig(
        bindings({ BRIDGE_TOKEN: "", ALLOW_UNAUTHENTICATED: "", SANDBOX_SLEEP_AFTER: "" }),
      ),
    ).toEqual({
      token: undefined,
      allowUnauthenticated: false,
      limits: {},
      admission: { maxConcurrent: 32, maxQueued: 32 },
    });
    expect(readConfig(bindings({ SANDBOX_SLEEP_AFTER: "2h" })).sleepAfter).toBe("2h");
  });

  it("sizes the admission per isolate from the memory two full tails take, unless set", () => {
    const admission = (vars: Vars) => readConfig(bindings(vars)).admission;
    expect(admission({})).toEqual({ maxConcurrent: 32, maxQueued: 32 });
    expect(admission({ MAX_OUTPUT_BYTES: String(16 * 1024 * 1024) })).toEqual({
      maxConcurrent: 2,
      maxQueued: 2,
    });
    expect(admission({ MAX_OUTPUT_BYTES: "65536" }).maxConcurrent).toBe(512);
    expect(admission({ MAX_CONCURRENT_CALLS: "3" })).toEqual({ maxConcurrent: 3, maxQueued: 3 });
    expect(admission({ MAX_QUEUED_CALLS: "7" })).toEqual({ maxConcurrent: 32, maxQueued: 7 });
    for (const [variable, value] of [
      ["MAX_CONCURRENT_CALLS", "0"],
      ["MAX_CONCURRENT_CALLS", "2.5"],
      ["MAX_CONCURRENT_CALLS", "many"],
      ["MAX_QUEUED_CALLS", "-1"],
    ] as const) {
      expect(() => readConfig(bindings({ [variable]: value })), `${variable}=${value}`).toThrow(
        variable,
      );
    }
  });

  it("names the variable at fault in a branded error", () => {
    let caught: unknown;
    try {
      readConfig(bindings({ MAX_ENV_ENTRIES: "1.5" }));
    } catch (error) {
      caught = error;
    }
    expect(ConfigError.isInstance(caught)).toBe(true);
    expect((caught as ConfigError).variable).toBe("MAX_ENV_ENTRIES");
    expect(ConfigError.isInstance(new Error("x"))).toBe(false);
  });
});
