/**
 * The certificate authority of one sandbox with secrets: made when the sandbox starts, its key
 * held only in this process (never written anywhere), gone with the proxy. It signs a leaf
 * certificate for each host the proxy intercepts (only hosts of the call's secrets). Keys are
 * ECDSA P-256 from node:crypto (fast to make, signed with `crypto.sign`); the certificates are
 * built as ASN.1 structures with @peculiar/asn1-x509 and DER-encoded with @peculiar/asn1-schema
 * (well-kept, typed, no global polyfill, no child process per certificate).
 */
import { generateKeyPairSync, type KeyObject, randomBytes, sign } from "node:crypto";
import { isIP } from "node:net";
import { AsnConvert, OctetString } from "@peculiar/asn1-schema";
import {
  AlgorithmIdentifier,
  AttributeTypeAndValue,
  AttributeValue,
  BasicConstraints,
  Certificate,
  Extension,
  Extensions,
  GeneralName,
  id_ce_basicConstraints,
  id_ce_keyUsage,
  id_ce_subjectAltName,
  KeyUsage,
  KeyUsageFlags,
  Name,
  RelativeDistinguishedName,
  SubjectAlternativeName,
  SubjectPublicKeyInfo,
  TBSCertificate,
  Validity,
  Version,
} from "@peculiar/asn1-x509";

const ECDSA_WITH_SHA256 = "1.2.840.10045.4.3.2";
const COMMON_NAME = "2.5.4.3";
/** Certificates are valid from an hour ago (clock skew) for a day (longer than any call). */
const SKEW_MS = 3_600_000;
const LIFETIME_MS = 86_400_000;

/** Where a sandbox finds the CA bundle it trusts (the Node roots and its own CA). */
export const SANDBOX_CA_BUNDLE = "/run/remote-task/ca.pem";

/** The variables that make the usual tools trust {@link SANDBOX_CA_BUNDLE}. */
export function caEnvironment(path = SANDBOX_CA_BUNDLE): Record<string, string> {
  return {
    SSL_CERT_FILE: path,
    NODE_EXTRA_CA_CERTS: path,
    REQUESTS_CA_BUNDLE: path,
    CURL_CA_BUNDLE: path,
    GIT_SSL_CAINFO: path,
  };
}

export interface SandboxCa {
  /** The CA certificate, PEM: what the sandbox trusts. */
  readonly certificatePem: string;
  /** A key and certificate (PEM) for `host`, signed by this CA; made once per host. */
  leaf(host: string): { key: string; cert: string };
}

function name(commonName: string): Name {
  return new Name([
    new RelativeDistinguishedName([
      new AttributeTypeAndValue({
        type: COMMON_NAME,
        value: new AttributeValue({ utf8String: commonName }),
      }),
    ]),
  ]);
}

function extension(id: string, critical: boolean, value: unknown): Extension {
  return new Extension({
    extnID: id,
    critical,
    extnValue: new OctetString(AsnConvert.serialize(value)),
  });
}

function serial(): ArrayBuffer {
  const bytes = randomBytes(16);
  bytes[0] = (bytes[0] ?? 0) & 0x7f; // positive
  return new Uint8Array(bytes).buffer;
}

function pem(der: ArrayBuffer): string {
  const base64 = Buffer.from(der).toString("base64");
  return `-----BEGIN CERTIFICATE-----\n${base64.replace(/.{64}/g, "$&\n").replace(/\n$/, "")}\n-----END CERTIFICATE-----\n`;
}

function signedCertificate(
  subject: string,
  issuer: string,
  publicKey: KeyObject,
  signingKey: KeyObject,
  extensions: Extension[],
): ArrayBuffer {
  const now = Date.now();
  const algorithm = new AlgorithmIdentifier({ algorithm: ECDSA_WITH_SHA256 });
  const tbs = new TBSCertificate({
    version: Version.v3,
    serialNumber: serial(),
    signature: algorithm,
    issuer: name(issuer),
    validity: new Validity({
      notBefore: new Date(now - SKEW_MS),
      notAfter: new Date(now + LIFETIME_MS),
    }),
    subject: name(subject),
    subjectPublicKeyInfo: AsnConvert.parse(
      publicKey.export({ type: "spki", format: "der" }),
      SubjectPublicKeyInfo,
    ),
    extensions: new Extensions(extensions),
  });
  const tbsDer = AsnConvert.serialize(tbs);
  const signature = sign("sha256", Buffer.from(tbsDer), { key: signingKey, dsaEncoding: "der" });
  return AsnConvert.serialize(
    new Certificate({
      tbsCertificate: tbs,
      signatureAlgorithm: algorithm,
      signatureValue: new Uint8Array(signature).buffer,
    }),
  );
}

function p256() {
  return generateKeyPairSync("ec", { namedCurve: "P-256" });
}

/** Makes a sandbox's CA (a fresh key, a self-signed certificate naming `label`). */
export function createSandboxCa(label: string): SandboxCa {
  const ca = p256();
  const caName = `remote-task sandbox CA ${label}`;
  const caDer = signedCertificate(caName, caName, ca.publicKey, ca.privateKey, [
    extension(
      id_ce_basicConstraints,
      true,
      new BasicConstraints({ cA: true, pathLenConstraint: 0 }),
    ),
    extension(
      id_ce_keyUsage,
      true,
      new KeyUsage(KeyUsageFlags.keyCertSign | KeyUsageFlags.cRLSign),
    ),
  ]);
  const leaves = new Map<string, { key: string; cert: string }>();
  return {
    certificatePem: pem(caDer),
    leaf(host) {
      const known = leaves.get(host);
      if (known !== undefined) return known;
      const keys = p256();
      const altName =
        isIP(host) === 0
          ? new GeneralName({ dNSName: host })
          : new GeneralName({ iPAddress: host });
      const der = signedCertificate(host, caName, keys.publicKey, ca.privateKey, [
        extension(id_ce_basicConstraints, true, new BasicConstraints({ cA: false })),
        extension(id_ce_keyUsage, true, new KeyUsage(KeyUsageFlags.digitalSignature)),
        extension(id_ce_subjectAltName, false, new SubjectAlternativeName([altName])),
      ]);
      const made = {
        key: keys.privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
        cert: pem(der) + this.certificatePem,
      };
      leaves.set(host, made);
      return made;
    },
  };
}
