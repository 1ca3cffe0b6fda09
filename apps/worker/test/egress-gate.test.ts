import { describe, expect, it } from "vitest";
import { egressEnv, egressRefusal, INTERCEPT_CA_FILE } from "../src/egress-gate.js";

const allow = ["pypi.org", "*.pythonhosted.org", "api.github.com:443", "203.0.113.7", "10.0.0.5"];
const refusal = (url: string) => egressRefusal(new URL(url), allow);

describe("the egress gate's decision", () => {
  it("lets out what a pattern names, on its port (80 for http, 443 for https, or the URL's)", () => {
    for (const url of [
      "https://pypi.org/simple/",
      "http://pypi.org/",
      "https://files.pythonhosted.org/x.whl",
      "https://API.GitHub.com/repos",
      "http://203.0.113.7/",
      "http://10.0.0.5:8080/",
    ]) {
      expect(refusal(url), url).toBeUndefined();
    }
  });

  it("refuses a host no pattern names, another port than the pattern's, and a bare suffix", () => {
    expect(refusal("https://example.com/")).toContain("not in the call's allowlist");
    expect(refusal("http://api.github.com/")).toContain("not in the call's allowlist");
    expect(refusal("https://pythonhosted.org/")).toContain("not in the call's allowlist");
  });

  it("reaches an address only when a pattern names that address (private ones included)", () => {
    for (const url of [
      "http://127.0.0.1/",
      "http://169.254.169.254/latest/meta-data/",
      "http://[::1]/",
      "http://10.0.0.6/",
      "http://[::ffff:10.0.0.5]/",
      "http://2130706433/",
    ]) {
      expect(refusal(url), url).toBeDefined();
    }
    expect(refusal("http://10.0.0.5/")).toBeUndefined();
  });

  it("tells the command where the interception's certificate authority is", () => {
    expect(Object.values(egressEnv()).every((value) => value === INTERCEPT_CA_FILE)).toBe(true);
    expect(Object.keys(egressEnv())).toEqual(
      expect.arrayContaining(["SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE"]),
    );
  });
});
