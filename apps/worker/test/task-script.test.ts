import { describe, expect, it } from "vitest";
import { missingCwdMarker, shellQuote, taskScript } from "../src/task-script.js";
import { readTaskScript } from "./fake-sandbox.js";

describe("taskScript", () => {
  const base = { command: "echo hi", cwd: "/workspace", envNames: [], nonce: "n1" };

  it("carries any command and cwd intact, quotes included", () => {
    const command = `echo 'single' "double" $HOME \\ \n next line`;
    const cwd = "/tmp/it's here";
    expect(readTaskScript(taskScript({ ...base, command, cwd }))).toEqual({ command, cwd });
    expect(shellQuote("a'b")).toBe(`'a'\\''b'`);
  });

  it("keeps PATH and the caller's names, and sets the defaults the caller did not", () => {
    const script = taskScript({ ...base, envNames: ["HOME", "TOKEN_X"] });
    expect(script).toContain('case "$__rt_name" in PATH|HOME|TOKEN_X) ;;');
    expect(script).toContain("export LANG='C.UTF-8' TMPDIR='/tmp'");
    expect(script).not.toContain("HOME='/workspace'");
  });

  it("prints a per-call marker on stderr for a missing cwd", () => {
    const script = taskScript({ ...base, nonce: "abc" });
    expect(script).toContain(shellQuote(missingCwdMarker("abc")));
    expect(missingCwdMarker("abc")).toBe("remote-task:abc:cwd-missing\n");
  });
});
