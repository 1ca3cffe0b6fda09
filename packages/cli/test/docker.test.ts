import { describe, expect, it } from "vitest";
import { requireEngine, skipDocker } from "../../bridge/test/docker-engine.js";
import { runCli } from "./helpers.js";

describe.skipIf(skipDocker)("--docker IMAGE (the embedded bridge on the docker backend)", () => {
  const dockerFlags = () => {
    const { host, image, ulimits } = requireEngine();
    return [
      "--docker",
      image,
      "--docker-engine",
      host,
      ...Object.entries(ulimits).flatMap(([name, value]) => [
        "--docker-ulimit",
        `${name}=${value}`,
      ]),
    ];
  };

  it("runs a command in a fresh container of the image", async () => {
    const result = await runCli(["run", ...dockerFlags(), "--", "id -u; hostname; pwd"]);
    expect(result).toMatchObject({ code: 0, stdout: "1000\nsandbox\n/workspace\n" });
  });

  it("says clearly when the image is not there", async () => {
    const flags = dockerFlags();
    flags[1] = "localhost/remote-task-no-such-image:1";
    const result = await runCli(["run", ...flags, "--", "true"]);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain("has no image localhost/remote-task-no-such-image:1");
  });
});
