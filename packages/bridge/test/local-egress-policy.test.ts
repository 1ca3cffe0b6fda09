import { describe, expect, it } from "vitest";
import { parseHostPattern } from "../src/index.js";
import {
  chooseAddress,
  type EgressRules,
  egressRules,
  screenDestination,
  unresolved,
} from "../src/local/egress-policy.js";
import { parseHosts } from "../src/local/resolver.js";

const PUBLIC = "93.184.216.34";
const HOST = "10.1.2.3";

function rules(
  policy: EgressRules["policy"],
  extra: Partial<Pick<EgressRules, "allowPrivate" | "bridgeEndpoints" | "hostAddresses">> = {},
): EgressRules {
  return egressRules(
    policy,
    extra.allowPrivate ?? [],
    extra.bridgeEndpoints ?? [],
    extra.hostAddresses ?? [],
  );
}

describe("egress decision: before resolution", () => {
  it("refuses a bad destination with 400", () => {
    expect(screenDestination("example.com", 0, rules("open"))).toMatchObject({ status: 400 });
    expect(screenDestination("", 443, rules("open"))).toMatchObject({ status: 400 });
  });

  it("lets anything well-formed through under open, and only allowlisted names otherwise", () => {
    expect(screenDestination("example.com", 443, rules("open"))).toBeUndefined();
    const allow = rules({ allow: ["*.example.com:443"] });
    expect(screenDestination("api.example.com", 443, allow)).toBeUndefined();
    expect(screenDestination("api.example.com", 80, allow)).toMatchObject({
      ok: false,
      status: 403,
      reason: expect.stringContaining("not in the call's allowlist"),
    });
  });
});

describe("egress decision: choosing an address", () => {
  it("takes the first public address", () => {
    expect(chooseAddress("example.com", 443, ["10.0.0.1", PUBLIC], rules("open"))).toEqual({
      ok: true,
      address: PUBLIC,
    });
  });

  it("refuses non-public addresses, naming the range, unless allowPrivate names the host", () => {
    const refusal = chooseAddress("db.internal", 5432, ["169.254.169.254"], rules("open"));
    expect(refusal).toMatchObject({ ok: false, status: 403 });
    expect(!refusal.ok && refusal.reason).toContain("link-local");
    const allowed = rules("open", { allowPrivate: [parseHostPattern("db.internal")] });
    expect(chooseAddress("db.internal", 5432, ["10.0.0.7"], allowed)).toEqual({
      ok: true,
      address: "10.0.0.7",
    });
  });

  it("never reaches the bridge's own port, on loopback or any address of the host", () => {
    const bridge = rules("open", {
      allowPrivate: [parseHostPattern(HOST)],
      bridgeEndpoints: [{ host: "0.0.0.0", port: 8787 }],
      hostAddresses: [HOST],
    });
    for (const address of ["127.0.0.1", "::1", HOST]) {
      const verdict = chooseAddress(address, 8787, [address], bridge);
      expect(verdict).toMatchObject({ ok: false, status: 403 });
      expect(!verdict.ok && verdict.reason).toContain("is the bridge itself");
    }
  });

  it("refuses every address of the bridge's host, public ones too, unless the deployer allowed it", () => {
    const ownPublic = "203.0.114.9";
    const hostRules = rules("open", { hostAddresses: [ownPublic, "fe80::1%eth0", HOST] });
    const verdict = chooseAddress("me.example", 22, [ownPublic], hostRules);
    expect(verdict).toMatchObject({ ok: false, status: 403 });
    expect(!verdict.ok && verdict.reason).toContain("the bridge's own host");
    expect(chooseAddress("me.example", 22, [HOST], hostRules)).toMatchObject({ ok: false });
    const allowed = rules("open", {
      hostAddresses: [ownPublic],
      allowPrivate: [parseHostPattern("me.example:22")],
    });
    expect(chooseAddress("me.example", 22, [ownPublic], allowed)).toEqual({
      ok: true,
      address: ownPublic,
    });
    const literal = rules({ allow: [`${ownPublic}:22`] }, { hostAddresses: [ownPublic] });
    expect(chooseAddress(ownPublic, 22, [ownPublic], literal)).toMatchObject({ ok: true });
  });

  it("refuses when nothing resolved, and says why a name did not resolve", () => {
    expect(chooseAddress("x.example", 443, [], rules("open"))).toMatchObject({ status: 403 });
    expect(unresolved("x.example", "ENOTFOUND")).toMatchObject({
      status: 502,
      reason: expect.stringContaining("cannot resolve x.example: ENOTFOUND"),
    });
  });
});

describe("the hosts file, read before DNS", () => {
  it("maps every name of a line to its address, skipping comments and bad lines", () => {
    const names = parseHosts(
      "127.0.0.1 localhost\n::1 localhost ip6-localhost # loopback\n# 10.0.0.1 hidden\nnot-an-ip bogus\n10.0.0.2\tDB.internal db\n",
    );
    expect(names.get("localhost")).toEqual(["127.0.0.1", "::1"]);
    expect(names.get("ip6-localhost")).toEqual(["::1"]);
    expect(names.get("db.internal")).toEqual(["10.0.0.2"]);
    expect(names.has("hidden")).toBe(false);
    expect(names.has("bogus")).toBe(false);
  });
});
