import { X509Certificate } from "node:crypto";
import type { AddressInfo } from "node:net";
import { connect, createServer } from "node:tls";
import { describe, expect, it } from "vitest";
import { createSandboxCa } from "../src/host/sandbox-ca.js";

describe("a sandbox's certificate authority", () => {
  it("is a CA of its own, and its leaf for a host chains to it and names that host only", () => {
    const ca = createSandboxCa("t1");
    const caCert = new X509Certificate(ca.certificatePem);
    expect(caCert.ca).toBe(true);
    expect(caCert.subject).toContain("remote-task sandbox CA t1");
    const leaf = new X509Certificate(ca.leaf("api.test").cert);
    expect(leaf.ca).toBe(false);
    expect(leaf.checkIssued(caCert)).toBe(true);
    expect(leaf.verify(caCert.publicKey)).toBe(true);
    expect(leaf.subjectAltName).toBe("DNS:api.test");
    expect(leaf.checkHost("api.test")).toBe("api.test");
    expect(leaf.checkHost("other.test")).toBeUndefined();
    expect(new X509Certificate(ca.leaf("10.0.0.7").cert).checkIP("10.0.0.7")).toBe("10.0.0.7");
    // Another sandbox's CA is another key: its leaves do not chain to this one.
    const other = new X509Certificate(createSandboxCa("t2").leaf("api.test").cert);
    expect(other.verify(caCert.publicKey)).toBe(false);
  });

  it("a TLS client that trusts the CA completes a handshake for the host, and only for it", async () => {
    const ca = createSandboxCa("t3");
    const server = createServer(ca.leaf("api.test"), (socket) => socket.end("hi"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as AddressInfo).port;
    const handshake = (servername: string) =>
      new Promise<string>((resolve) => {
        const socket = connect({ host: "127.0.0.1", port, servername, ca: ca.certificatePem });
        let text = "";
        socket.on("data", (chunk) => {
          text += chunk;
        });
        socket.on("end", () => resolve(text));
        socket.on("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
      });
    expect(await handshake("api.test")).toBe("hi");
    expect(await handshake("other.test")).toBe("ERR_TLS_CERT_ALTNAME_INVALID");
    server.close();
  });
});
