import { BRIDGE_TEXTS, undeclaredSecrets, unreadableSecret } from "@remote-task/internal";
import { InvalidArgumentError } from "commander";
import { describe, expect, it } from "vitest";
import { secretFlag, secretNames, secretNamesFromFlag } from "../src/secrets.js";

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

describe("--secrets NAME[,NAME...]", () => {
  it("takes names separated by commas, given once or more, each once", () => {
    const first = secretNames("GH_TOKEN, API_KEY");
    expect(secretNames("_K2,GH_TOKEN", first)).toEqual(["GH_TOKEN", "API_KEY", "_K2"]);
  });

  it("refuses what cannot be a secret's name, naming it", () => {
    for (const text of ["GH-TOKEN", "", "A,,B", "1ABC", "$GH_TOKEN"]) {
      expect(() => secretNames(text), text).toThrow(InvalidArgumentError);
    }
    expect(() => secretNamesFromFlag("A,b-c")).toThrow('"b-c" is none');
  });

  it("reads the bridge's refusal of undeclared names, and nothing else", () => {
    expect(
      undeclaredSecrets(BRIDGE_TEXTS.secretsUndeclared("API_KEY, X", "GH_TOKEN, OPENAI_KEY")),
    ).toEqual({ unknown: "API_KEY, X", declared: "GH_TOKEN, OPENAI_KEY" });
    expect(undeclaredSecrets(BRIDGE_TEXTS.secretsUndeclared("A", "none"))).toEqual({
      unknown: "A",
      declared: "none",
    });
    expect(undeclaredSecrets("network open is more than this bridge allows")).toBeUndefined();
    expect(undeclaredSecrets(undefined)).toBeUndefined();
    expect(unreadableSecret(BRIDGE_TEXTS.secretUnavailable("GH_TOKEN"))).toBe("GH_TOKEN");
    expect(unreadableSecret(BRIDGE_TEXTS.secretsUndeclared("A", "B"))).toBeUndefined();
  });
});
