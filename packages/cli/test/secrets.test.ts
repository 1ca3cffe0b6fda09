import { InvalidArgumentError } from "commander";
import { describe, expect, it } from "vitest";
import { secretFlag } from "../src/secrets.js";

describe("serve --secret", () => {
  it("takes a source, hosts and an optional header, one secret per flag", () => {
    let secrets = secretFlag("GH_TOKEN=env:GH_TOKEN@api.github.com,*.githubusercontent.com:443");
    secrets = secretFlag("API_KEY=file:/run/keys/a@b.key@api.example.com|X-Api-Key", secrets);
    secrets = secretFlag(
      "OAI=env:OPENAI_KEY@api.openai.com|Authorization: Bearer {value}",
      secrets,
    );
    expect(secrets).toEqual({
      GH_TOKEN: {
        from: { env: "GH_TOKEN" },
        hosts: ["api.github.com", "*.githubusercontent.com:443"],
      },
      // The hosts follow the last @: a path may hold one.
      API_KEY: {
        from: { file: "/run/keys/a@b.key" },
        hosts: ["api.example.com"],
        header: "X-Api-Key",
      },
      OAI: {
        from: { env: "OPENAI_KEY" },
        hosts: ["api.openai.com"],
        header: "Authorization: Bearer {value}",
      },
    });
  });

  it("refuses a malformed flag, a value on the command line, bad hosts and a name given twice", () => {
    for (const text of [
      "GH_TOKEN",
      "GH_TOKEN=ghp_abc@api.github.com",
      "GH-TOKEN=env:X@api.github.com",
      "GH_TOKEN=env:X",
      "GH_TOKEN=env:X@https://api.github.com",
    ]) {
      expect(() => secretFlag(text), text).toThrow(InvalidArgumentError);
    }
    const once = secretFlag("A=env:A@a.example");
    expect(() => secretFlag("A=env:B@b.example", once)).toThrow("secret A is given twice");
  });
});
