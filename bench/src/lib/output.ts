import { round } from "./stats.ts";

export const MB = 1_000_000;

/** A command that prints exactly `bytes` bytes of 64-byte lines. */
export function printCommand(bytes: number): string {
  return `yes 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde | head -c ${bytes}`;
}

export function sizeLabel(bytes: number): string {
  if (bytes < MB) return `${bytes} B`;
  return bytes >= 1_000_000_000 ? `${bytes / 1_000_000_000} GB` : `${bytes / MB} MB`;
}

/** MB/s (10^6 bytes per second). */
export function throughput(bytes: number, ms: number): number {
  return round(bytes / MB / (ms / 1000), 0);
}
