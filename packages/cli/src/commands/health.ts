import type { Command } from "commander";
import { type Connection, type ConnectionFlags, connect } from "../connect.js";
import { EXIT } from "../exit-codes.js";
import { connectionOptions, type OnExit, refuseEmbeddedOnlyFlags } from "../flags.js";
import { describeError, exitCodeOfError } from "../report.js";

/** `remote-task health`: prints the bridge's `/health`; resolves to the exit code. */
async function healthCommand(flags: ConnectionFlags & { json?: boolean }): Promise<number> {
  let connection: Connection;
  try {
    connection = await connect(flags);
  } catch (error) {
    process.stderr.write(`remote-task: ${describeError(error)}\n`);
    return exitCodeOfError(error);
  }
  try {
    const health = await connection.client.health();
    if (flags.json) {
      process.stdout.write(`${JSON.stringify(health)}\n`);
      return EXIT.ok;
    }
    const rows: Array<[string, string]> = [
      ["status", "ok"],
      ["protocol", String(health.protocol ?? "1 (reference bridge: no version reported)")],
      ["backend", health.backend ?? "unknown"],
      ["isolation", health.isolation ?? "unknown"],
      ["version", health.version ?? "unknown"],
    ];
    const { image, runtime } = health.sandbox ?? {};
    if (image !== undefined) rows.push(["image", `${image} (runtime ${runtime ?? "unknown"})`]);
    for (const [key, value] of Object.entries(health.limits ?? {})) rows.push([key, String(value)]);
    if (health.network === undefined) {
      rows.push(["network", "not controlled by this bridge (it takes no --network)"]);
    } else {
      rows.push(["network default", JSON.stringify(health.network.default)]);
      rows.push(["network ceiling", JSON.stringify(health.network.ceiling)]);
    }
    rows.push([
      "secrets",
      health.secrets === undefined || health.secrets.length === 0
        ? "none declared (nothing for --secrets to ask for)"
        : health.secrets.map(({ name, hosts }) => `${name} (to ${hosts.join(", ")})`).join("; "),
    ]);
    if (health.durable === undefined) {
      rows.push(["durable calls", "none (no --detach, attach or re-attach on this bridge)"]);
    } else {
      const { keptSeconds, maxKept, maxKeptBytes, disconnectGraceSeconds } = health.durable;
      rows.push([
        "durable calls",
        `results kept ${keptSeconds} s (at most ${maxKept} calls, ${maxKeptBytes} bytes); a dropped caller has ${disconnectGraceSeconds} s to re-attach`,
      ]);
    }
    for (const [key, value] of rows) process.stdout.write(`${key.padEnd(18)} ${value}\n`);
    return EXIT.ok;
  } catch (error) {
    process.stderr.write(`remote-task: bridge unhealthy: ${describeError(error)}\n`);
    return EXIT.bridge;
  } finally {
    await connection.close();
  }
}

/** `remote-task health`: its flags, help and handler. */
export function declareHealth(program: Command, onExit: OnExit): void {
  connectionOptions(
    program
      .command("health")
      .description("Check a bridge: protocol, backend, isolation and limits.")
      .option("--json", "print the health answer as JSON"),
  )
    .addHelpText(
      "after",
      `
Examples:
  $ remote-task health --url http://127.0.0.1:8787 --token "$TOKEN"
  $ remote-task health --local`,
    )
    .action(async (flags, command: Command) => {
      refuseEmbeddedOnlyFlags(command);
      onExit(await healthCommand(flags));
    });
}
