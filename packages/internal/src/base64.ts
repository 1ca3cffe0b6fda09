/**
 * Standard base64 both ways with the Web platform's `btoa` and `atob`, so it runs wherever the
 * packages do (Node, workerd, a browser) without `Buffer`.
 */

/** Bytes per `String.fromCharCode` call: well under every engine's argument limit. */
const CHUNK = 0x8000;

/** Standard base64 of `bytes`. */
export function toBase64(bytes: Uint8Array): string {
  let binary = "";
  for (let start = 0; start < bytes.byteLength; start += CHUNK) {
    binary += String.fromCharCode(...bytes.subarray(start, start + CHUNK));
  }
  return btoa(binary);
}

/** The bytes of standard base64 `text`; throws (`atob`'s error) when it is not base64. */
export function fromBase64(text: string): Uint8Array {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}
