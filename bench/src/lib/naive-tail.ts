import { DISPLAY_MAX_BYTES, DISPLAY_MAX_LINES } from "@remote-task/protocol";

export interface NaiveTail {
  text: string;
  totalBytes: number;
  totalLines: number;
  keptBytes: number;
  keptLines: number;
}

/**
 * The obvious way to keep an output's tail, the comparison for `truncateTail`: split into lines,
 * walk back from the end summing `Buffer.byteLength`, join what fits. Same result, same limits.
 */
export function naiveTail(
  text: string,
  maxBytes = DISPLAY_MAX_BYTES,
  maxLines = DISPLAY_MAX_LINES,
): NaiveTail {
  const lines = text.split("\n");
  const totalBytes = Buffer.byteLength(text);
  const kept: string[] = [];
  let keptBytes = 0;
  for (let i = lines.length - 1; i >= 0 && kept.length < maxLines; i--) {
    const line = lines[i] ?? "";
    const size = Buffer.byteLength(line) + (kept.length > 0 ? 1 : 0);
    if (keptBytes + size > maxBytes) {
      if (kept.length === 0) {
        // Only the end of an oversized last line fits: cut it on a character boundary.
        const bytes = Buffer.from(line);
        let start = bytes.byteLength - maxBytes;
        while (start < bytes.byteLength && ((bytes[start] ?? 0) & 0xc0) === 0x80) start++;
        kept.push(bytes.subarray(start).toString("utf8"));
        keptBytes = bytes.byteLength - start;
      }
      break;
    }
    kept.push(line);
    keptBytes += size;
  }
  kept.reverse();
  return {
    text: kept.join("\n"),
    totalBytes,
    totalLines: lines.length,
    keptBytes,
    keptLines: kept.length,
  };
}

/** About `bytes` characters of output: lines of 10 to 130 characters, some with a Latin-1 letter. */
export function sampleOutput(bytes: number): string {
  let seed = 42;
  const random = () => {
    seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
    return seed / 2_147_483_648;
  };
  const lines: string[] = [];
  let blockLength = 0;
  while (blockLength < Math.min(bytes, 1_000_000)) {
    const width = 10 + Math.floor(random() * 120);
    const line = `${random() < 0.1 ? "café " : ""}${"x".repeat(width)}`;
    lines.push(line);
    blockLength += line.length + 1;
  }
  const block = `${lines.join("\n")}\n`;
  const text = block.repeat(Math.max(1, Math.round(bytes / block.length)));
  // Flatten the rope now, so neither implementation pays for it.
  text.indexOf("\u0001");
  return text;
}
