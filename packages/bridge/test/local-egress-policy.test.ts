import fc from "fast-check";
import ipaddr from "ipaddr.js";
import { describe, expect, it } from "vitest";
import {
  chooseAddress,
  type EgressRules,
  egressRules,
  screenDestination,
  unresolved,
} from "../src/host/egress-policy.js";
import { parseHosts } from "../src/host/resolver.js";
import { isPublicAddress, parseHostPattern } from "../src/index.js";
import { embeddedIPv4 } from "../src/network.js";

const PUBLIC = "93.184.216.34";
const HOST = "10.1.2.3";

function rules(
  policy: EgressRules["policy"],
  extra: Partial<
    Pick<EgressRules, "allowPrivate" | "bridgeEndpoints" | "hostAddresses" | "callersAllowlist">
  > = {},
): EgressRules {
  return egressRules(
    policy,
    extra.allowPrivate ?? [],
    extra.bridgeEndpoints ?? [],
    extra.hostAddresses ?? [],
    extra.callersAllowlist ?? false,
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

  it("gives a caller's own literal (under an open ceiling) no exemption: the host's address is refused", () => {
    const ownPublic = "203.0.114.9";
    const callers = rules(
      { allow: [`${ownPublic}:22`, "[::ffff:0:cb00:7209]:22"] },
      { hostAddresses: [ownPublic], callersAllowlist: true },
    );
    for (const address of [ownPublic, "::ffff:0:cb00:7209"]) {
      const verdict = chooseAddress(address, 22, [address], callers);
      expect(verdict).toMatchObject({ ok: false, status: 403 });
      expect(!verdict.ok && verdict.reason).toContain("the bridge's own host");
    }
    // A public address that is not the host's stays reachable.
    const other = rules(
      { allow: [PUBLIC] },
      { hostAddresses: [ownPublic], callersAllowlist: true },
    );
    expect(chooseAddress(PUBLIC, 443, [PUBLIC], other)).toEqual({ ok: true, address: PUBLIC });
  });

  it("judges an IPv6 address that embeds an IPv4 one by that address too", () => {
    const ownPublic = "44.44.44.1";
    const open = rules("open", { hostAddresses: [ownPublic] });
    // IPv4-compatible, IPv4-translated, NAT64, 6to4 forms of the host's own public address.
    for (const address of [
      "::2c2c:2c01",
      "::ffff:0:2c2c:2c01",
      "64:ff9b::2c2c:2c01",
      "2002:2c2c:2c01::1",
    ]) {
      const verdict = chooseAddress(address, 80, [address], open);
      expect(verdict, address).toMatchObject({ ok: false, status: 403 });
      expect(!verdict.ok && verdict.reason).toContain("the bridge's own host");
    }
    const privateOne = chooseAddress("::a00:1", 80, ["::a00:1"], open);
    expect(!privateOne.ok && privateOne.reason).toContain("::a00:1 is not public (private)");
    expect(chooseAddress("::808:808", 53, ["::808:808"], open)).toMatchObject({ ok: true });
  });

  it("refuses when nothing resolved, and says why a name did not resolve", () => {
    expect(chooseAddress("x.example", 443, [], rules("open"))).toMatchObject({ status: 403 });
    expect(unresolved("x.example", "ENOTFOUND")).toMatchObject({
      status: 502,
      reason: expect.stringContaining("cannot resolve x.example: ENOTFOUND"),
    });
  });
});

describe("IPv6 forms that embed an IPv4 address", () => {
  const forms: Array<[string, (v4: number[]) => string]> = [
    [
      "IPv4-compatible",
      (b) =>
        new ipaddr.IPv6([
          0,
          0,
          0,
          0,
          0,
          0,
          (b[0] as number) * 256 + (b[1] as number),
          (b[2] as number) * 256 + (b[3] as number),
        ]).toString(),
    ],
    ["IPv4-mapped", (b) => `::ffff:${b.join(".")}`],
    ["IPv4-translated", (b) => `::ffff:0:${b.join(".")}`],
    ["NAT64", (b) => `64:ff9b::${b.join(".")}`],
    [
      "6to4",
      (b) =>
        new ipaddr.IPv6([
          0x2002,
          (b[0] as number) * 256 + (b[1] as number),
          (b[2] as number) * 256 + (b[3] as number),
          0,
          0,
          0,
          0,
          1,
        ]).toString(),
    ],
  ];
  const ipv4 = fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 4, maxLength: 4 });

  it.each(forms)(
    "%s: public exactly when its IPv4 address is, and that address is found",
    (_name, embed) => {
      fc.assert(
        fc.property(ipv4, (bytes) => {
          const inner = bytes.join(".");
          // ::0.0.0.0 and ::0.0.0.1 are IPv6's unspecified and loopback addresses, not embeddings.
          fc.pre(embed(bytes) !== "::" && embed(bytes) !== "::1");
          expect(embeddedIPv4(embed(bytes))).toContain(inner);
          expect(isPublicAddress(embed(bytes))).toBe(isPublicAddress(inner));
        }),
      );
    },
  );

  it("finds both of Teredo's, and none in an ordinary address", () => {
    expect(embeddedIPv4("2001:0:4136:e378:8000:63bf:3fff:fdd2")).toEqual([
      "65.54.227.120",
      "192.0.2.45",
    ]);
    expect(embeddedIPv4("2606:4700:4700::1111")).toEqual([]);
    expect(embeddedIPv4("::1")).toEqual([]);
    expect(embeddedIPv4("8.8.8.8")).toEqual([]);
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
