/**
 * The engine the docker backend's tests run against: `scripts/docker-engine.mjs ensure` starts
 * Podman's Docker-compatible service with storage of its own and builds the test image, once per
 * machine (later calls find it running). Without an engine the docker tests are skipped with the
 * reason, except under REMOTE_TASK_REQUIRE_DOCKER=1 (CI), where they fail.
 */

import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

export interface TestEngine {
  /** `unix:///...` */
  host: string;
  image: string;
  /** What a backend must pass as `ulimits` on this engine (Podman's nproc default is too high here). */
  ulimits: Record<string, number>;
}

const script = fileURLToPath(new URL("../../../scripts/docker-engine.mjs", import.meta.url));

/** CI sets this so a missing engine fails the run instead of skipping the docker tests. */
const dockerRequired = process.env.REMOTE_TASK_REQUIRE_DOCKER === "1";

function ensure(): { engine?: TestEngine; reason: string } {
  try {
    const out = execFileSync(process.execPath, [script, "ensure"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
      timeout: 120_000,
    });
    const engine = JSON.parse(out.trim().split("\n").at(-1) ?? "") as TestEngine;
    return { engine, reason: "" };
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr?.trim();
    return { reason: stderr || (error as Error).message };
  }
}

const found = ensure();
if (found.engine === undefined) {
  console.warn(
    `\n*** docker backend tests SKIPPED: ${found.reason}${dockerRequired ? " (REMOTE_TASK_REQUIRE_DOCKER=1: failing)" : ""} ***\n`,
  );
}

/** The engine, or undefined when the docker tests are to be skipped. */
const testEngine: TestEngine | undefined = found.engine;
/** Whether to skip the docker tests (no engine, and none required). */
export const skipDocker = found.engine === undefined && !dockerRequired;
/** Why there is no engine ("" when there is one). */
export const noEngineReason = found.reason;

/** The engine, failing the test when there is none (only reached when it is required). */
export function requireEngine(): TestEngine {
  if (testEngine === undefined) throw new Error(`no container engine: ${noEngineReason}`);
  return testEngine;
}
