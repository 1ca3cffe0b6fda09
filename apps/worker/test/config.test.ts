import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ConfigError, readConfig, type WorkerEnv, workerConfig } from "../src/config.js";
import { warmPoolNamespace } from "./helpers.js";

type Vars = Partial<
  Record<
    Exclude<keyof WorkerEnv, "TaskContainer" | "WarmPool" | "CallKeeper" | "CF_VERSION_METADATA">,
    string
  >
>;
const bindings = (vars: Vars): WorkerEnv => ({
  ...vars,
  TaskContainer: env.TaskContainer,
  WarmPool: warmPoolNamespace(),
});

/** The ConfigError `readConfig` throws for `vars`. */
function configError(vars: Vars): ConfigError {
  try {
    readConfig(bindings(vars));
  } catch (error) {
    if (ConfigError.isInstance(error)) return error;
    throw error;
  }
  throw new Error("readConfig accepted the variables");
}

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
          WARM_POOL_TARGET: "10",
          WARM_POOL_MAX_IDLE: "15m",
          WARM_POOL_REFILL_BATCH: "2",
          MAX_INSTANCES: "20",
          MAX_CONCURRENT_CALLS: "5",
          MAX_QUEUED_CALLS: "0",
          MAX_STDIN_BYTES: "4096",
          NETWORK_DEFAULT: "none",
          NETWORK_CEILING: " OPEN ",
          HEDGE_START_AFTER_MS: "2500",
        }),
      ),
    ).toEqual({
      token: "t",
      allowUnauthenticated: true,
      defaultCwd: "/srv",
      heartbeatIntervalMs: 15_000,
      backstopMs: 300_000,
      limits: {
        maxRequestBytes: 1000,
        maxCommandBytes: 100,
        maxEnvEntries: 0,
        maxEnvEntryBytes: 10,
        maxTimeoutSeconds: 1.5,
        maxOutputBytes: 65_536,
        maxStdinBytes: 4096,
      },
      warmPool: { target: 10, maxIdleSeconds: 900, refillBatch: 2, shards: 2, ceiling: 10 },
      admission: { maxConcurrent: 5, maxQueued: 0, maxQueuedBytes: 16 * 1024 * 1024 },
      network: { default: "none", ceiling: "open" },
      hedge: { after: 2500 },
      version: "unversioned",
    });
  });

  it("reads when a slow start is hedged: auto (observed), off, or whole milliseconds", () => {
    const hedge = (value: string) => readConfig(bindings({ HEDGE_START_AFTER_MS: value })).hedge;
    expect(hedge("")).toEqual({ after: "observed" });
    expect(hedge(" Auto ")).toEqual({ after: "observed" });
    expect(hedge("OFF")).toEqual({ after: "off" });
    expect(hedge("1")).toEqual({ after: 1 });
    for (const value of ["0", "1.5", "-3", "3s", "120001"]) {
      expect(configError({ HEDGE_START_AFTER_MS: value }).message, value).toContain(
        'HEDGE_START_AFTER_MS must be "auto", "off" or a whole number of milliseconds',
      );
    }
  });

  it("reads one bindings object once, its error too, and each new one afresh", () => {
    const env = bindings({ WARM_POOL_TARGET: "2", MAX_INSTANCES: "4" });
    const config = workerConfig(env);
    expect(workerConfig(env)).toBe(config);
    expect(workerConfig({ ...env })).not.toBe(config);
    const wrong = bindings({ WARM_POOL_TARGET: "3", MAX_INSTANCES: "4" });
    const error = workerConfig(wrong);
    expect(ConfigError.isInstance(error) && error.variable).toBe("WARM_POOL_TARGET");
    expect(workerConfig(wrong)).toBe(error);
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
      warmPool: { target: 0, maxIdleSeconds: 600, refillBatch: 4, shards: 0, ceiling: 0 },
      admission: { maxConcurrent: 32, maxQueued: 32, maxQueuedBytes: 16 * 1024 * 1024 },
      network: { default: "none", ceiling: "none" },
      hedge: { after: "observed" },
      version: "unversioned",
    });
    expect(readConfig(bindings({ SANDBOX_SLEEP_AFTER: "2h" })).backstopMs).toBe(7_200_000);
    expect(readConfig(bindings({ SANDBOX_SLEEP_AFTER: "45" })).backstopMs).toBe(45_000);
  });

  it("sizes the admission per isolate from the memory two full tails take, unless set", () => {
    const admission = (vars: Vars) => readConfig(bindings(vars)).admission;
    expect(admission({})).toEqual({
      maxConcurrent: 32,
      maxQueued: 32,
      maxQueuedBytes: 16 * 1024 * 1024,
    });
    expect(admission({ MAX_OUTPUT_BYTES: String(16 * 1024 * 1024) })).toEqual({
      maxConcurrent: 2,
      maxQueued: 2,
      maxQueuedBytes: 16 * 1024 * 1024,
    });
    expect(admission({ MAX_OUTPUT_BYTES: "65536" }).maxConcurrent).toBe(512);
    expect(admission({ MAX_CONCURRENT_CALLS: "3" })).toEqual({
      maxConcurrent: 3,
      maxQueued: 3,
      maxQueuedBytes: 16 * 1024 * 1024,
    });
    expect(admission({ MAX_QUEUED_CALLS: "7" })).toEqual({
      maxConcurrent: 32,
      maxQueued: 7,
      maxQueuedBytes: 16 * 1024 * 1024,
    });
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
});

describe("readConfig: the network policy", () => {
  it("reads the network policy: none or open, the ceiling the default unless set", () => {
    const network = (vars: Vars) => readConfig(bindings(vars)).network;
    expect(network({})).toEqual({ default: "none", ceiling: "none" });
    expect(network({ NETWORK_DEFAULT: "open" })).toEqual({ default: "open", ceiling: "open" });
    expect(network({ NETWORK_CEILING: "open" })).toEqual({ default: "none", ceiling: "open" });
    expect(network({ NETWORK_DEFAULT: '"none"', NETWORK_CEILING: '"open"' })).toEqual({
      default: "none",
      ceiling: "open",
    });
  });

  it("reads an allowlist as host patterns separated by commas or the protocol's JSON form", () => {
    for (const value of [
      "pypi.org, *.pythonhosted.org",
      '{"allow":["pypi.org","*.pythonhosted.org"]}',
    ]) {
      expect(readConfig(bindings({ NETWORK_CEILING: value })).network.ceiling).toEqual({
        allow: ["pypi.org", "*.pythonhosted.org"],
      });
    }
    expect(
      readConfig(bindings({ NETWORK_DEFAULT: "pypi.org", NETWORK_CEILING: "open" })).network,
    ).toEqual({ default: { allow: ["pypi.org"] }, ceiling: "open" });
  });

  it("refuses a network default wider than the ceiling, and anything not a policy", () => {
    expect(configError({ NETWORK_DEFAULT: "open", NETWORK_CEILING: "none" }).message).toContain(
      "NETWORK_DEFAULT is open, wider than NETWORK_CEILING (none)",
    );
    expect(
      configError({ NETWORK_DEFAULT: "example.com", NETWORK_CEILING: "pypi.org" }).variable,
    ).toBe("NETWORK_DEFAULT");
    expect(configError({ NETWORK_DEFAULT: "Pypi.org" }).message).toContain(
      'NETWORK_DEFAULT must be "none", "open" or host patterns',
    );
    expect(configError({ NETWORK_DEFAULT: "{allow" }).message).toContain(
      "NETWORK_DEFAULT is not valid JSON",
    );
    expect(configError({ NETWORK_CEILING: '"everything"' }).variable).toBe("NETWORK_CEILING");
    expect(configError({ MAX_STDIN_BYTES: "-1" }).variable).toBe("MAX_STDIN_BYTES");
  });
});

describe("readConfig: errors and the warm pool", () => {
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

  it("turns the warm pool off by default and spreads it over shards of at most 8", () => {
    expect(readConfig(bindings({})).warmPool.target).toBe(0);
    expect(
      readConfig(bindings({ MAX_INSTANCES: "40", WARM_POOL_TARGET: "8" })).warmPool.shards,
    ).toBe(1);
    expect(
      readConfig(bindings({ MAX_INSTANCES: "40", WARM_POOL_TARGET: "17" })).warmPool.shards,
    ).toBe(3);
    expect(readConfig(bindings({ WARM_POOL_MAX_IDLE: "2h" })).warmPool.maxIdleSeconds).toBe(7200);
  });

  it("keeps the warm pool to half of MAX_INSTANCES, so calls beyond it find instances", () => {
    expect(
      readConfig(bindings({ MAX_INSTANCES: "20", WARM_POOL_TARGET: "10" })).warmPool.target,
    ).toBe(10);
    const error = configError({ MAX_INSTANCES: "20", WARM_POOL_TARGET: "11" });
    expect(error.variable).toBe("WARM_POOL_TARGET");
    expect(error.message).toContain("at most half of MAX_INSTANCES (10 of 20)");
    expect(configError({ WARM_POOL_TARGET: "1" }).variable).toBe("MAX_INSTANCES");
  });

  it("refuses unusable warm pool values, naming the variable", () => {
    for (const [variable, value] of [
      ["WARM_POOL_TARGET", "-1"],
      ["WARM_POOL_TARGET", "2.5"],
      ["WARM_POOL_TARGET", "1001"],
      ["WARM_POOL_REFILL_BATCH", "0"],
      ["WARM_POOL_REFILL_BATCH", "33"],
      ["WARM_POOL_MAX_IDLE", "soon"],
      ["WARM_POOL_MAX_IDLE", "30s"],
      ["WARM_POOL_MAX_IDLE", "25h"],
      ["MAX_INSTANCES", "0"],
    ] as const) {
      expect(
        configError({ MAX_INSTANCES: "100", [variable]: value }).variable,
        `${variable}=${value}`,
      ).toBe(variable);
    }
  });

  it("needs the WarmPool binding for a pool", () => {
    let caught: unknown;
    try {
      readConfig({ TaskContainer: env.TaskContainer, MAX_INSTANCES: "20", WARM_POOL_TARGET: "2" });
    } catch (error) {
      caught = error;
    }
    expect(ConfigError.isInstance(caught) && caught.message).toContain(
      "WarmPool Durable Object binding",
    );
  });
});

describe("durable calls' variables", () => {
  const withKeeper = (vars: Vars): WorkerEnv => ({ ...bindings(vars), CallKeeper: env.CallKeeper });

  it("are off by default, and read with their defaults when on", () => {
    expect(readConfig(withKeeper({})).durable).toBeUndefined();
    expect(readConfig(withKeeper({ DURABLE_CALLS: "false" })).durable).toBeUndefined();
    expect(readConfig(withKeeper({ DURABLE_CALLS: " TRUE " })).durable).toEqual({
      keptSeconds: 600,
      disconnectGraceSeconds: 10,
    });
    expect(
      readConfig(
        withKeeper({ DURABLE_CALLS: "true", KEPT_SECONDS: "60", DISCONNECT_GRACE_SECONDS: "0" }),
      ).durable,
    ).toEqual({ keptSeconds: 60, disconnectGraceSeconds: 0 });
  });

  it("name the variable that is wrong", () => {
    expect(configError({ DURABLE_CALLS: "yes" }).variable).toBe("DURABLE_CALLS");
    // Without the CallKeeper binding durable calls cannot be on.
    expect(configError({ DURABLE_CALLS: "true" }).message).toContain("CallKeeper");
    for (const [name, value] of [
      ["KEPT_SECONDS", "-1"],
      ["KEPT_SECONDS", "86401"],
      ["DISCONNECT_GRACE_SECONDS", "301"],
    ] as const) {
      try {
        readConfig(withKeeper({ DURABLE_CALLS: "true", [name]: value }));
        throw new Error("accepted");
      } catch (error) {
        expect(ConfigError.isInstance(error) && error.variable).toBe(name);
      }
    }
  });
});

describe("the SECRETS variable", () => {
  const gh = { hosts: ["api.github.com"], header: "Authorization: Bearer {value}" };

  it("reads each secret from the binding of its name, or the one from.env names", () => {
    expect(readConfig(bindings({})).secrets).toBeUndefined();
    expect(
      readConfig(
        bindings({
          SECRETS: JSON.stringify({
            GH_TOKEN: gh,
            NPM: { hosts: ["registry.npmjs.org:443"], from: { env: "NPM_AUTH" } },
          }),
        }),
      ).secrets,
    ).toEqual({
      GH_TOKEN: { ...gh, from: { env: "GH_TOKEN" } },
      NPM: { hosts: ["registry.npmjs.org:443"], from: { env: "NPM_AUTH" } },
    });
    // A JSON var of wrangler.jsonc arrives as an object.
    expect(readConfig({ ...bindings({}), SECRETS: { GH_TOKEN: gh } }).secrets).toEqual({
      GH_TOKEN: { ...gh, from: { env: "GH_TOKEN" } },
    });
  });

  it("is refused, naming what is wrong: bad JSON, a bad name, a file, a bad source, host or header", () => {
    const problems: Array<[unknown, string]> = [
      ["{GH_TOKEN:", "is not valid JSON"],
      [["GH_TOKEN"], "must be a JSON object of secrets by name"],
      [{ GH_TOKEN: "api.github.com" }, 'has GH_TOKEN as "api.github.com", not an object'],
      [{ "GH-TOKEN": gh }, 'secrets: "GH-TOKEN" is not a secret name'],
      [
        { GH_TOKEN: { ...gh, from: { file: "/run/secrets/gh" } } },
        "has GH_TOKEN.from.file, but a Worker reads no files",
      ],
      [{ GH_TOKEN: { ...gh, from: { env: "" } } }, 'it must be {"env": "BINDING"}'],
      [{ GH_TOKEN: { hosts: [] } }, "secrets.GH_TOKEN.hosts must list at least one host pattern"],
      [{ GH_TOKEN: { hosts: ["https://api.github.com"] } }, "is not a host pattern"],
      [{ GH_TOKEN: { ...gh, header: "Authorization: Bearer" } }, "{value}"],
    ];
    for (const [value, words] of problems) {
      const text = typeof value === "string" ? value : JSON.stringify(value);
      const error = configError({ SECRETS: text });
      expect(error.variable, text).toBe("SECRETS");
      expect(error.message, text).toContain(words);
    }
  });
});
