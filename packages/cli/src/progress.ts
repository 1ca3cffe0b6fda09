import type { Progress } from "@remote-task/client";

export interface ProgressBar {
  update(progress: Progress): void;
  finish(): void;
}

const WIDTH = 24;
const RENDER_EVERY_MS = 100;

function formatSeconds(seconds: number): string {
  if (!Number.isFinite(seconds)) return "?";
  if (seconds < 60) return `${Math.ceil(seconds)}s`;
  return `${Math.floor(seconds / 60)}m${String(Math.ceil(seconds % 60)).padStart(2, "0")}s`;
}

/** One line of progress: bar, done/total, failed, rate and ETA. */
export function renderProgress(progress: Progress, elapsedMs: number): string {
  const { done, failed, total } = progress;
  const filled = total === 0 ? WIDTH : Math.round((done / total) * WIDTH);
  const rate = elapsedMs > 0 ? done / (elapsedMs / 1000) : 0;
  const eta = rate > 0 ? (total - done) / rate : Number.POSITIVE_INFINITY;
  return (
    `[${"#".repeat(filled)}${"-".repeat(WIDTH - filled)}] ${done}/${total} done, ${failed} failed, ` +
    `${rate.toFixed(1)}/s, ETA ${done === total ? "0s" : formatSeconds(eta)}`
  );
}

/** A live progress line on `stream`; draws nothing when the stream is not a terminal. */
export function createProgressBar(stream: NodeJS.WriteStream, total: number): ProgressBar {
  const started = Date.now();
  let last: Progress = { done: 0, failed: 0, total };
  let lastDraw = 0;
  const draw = () => {
    lastDraw = Date.now();
    stream.write(`\r\x1b[2K${renderProgress(last, lastDraw - started)}`);
  };
  if (!stream.isTTY) return { update() {}, finish() {} };
  draw();
  return {
    update(progress) {
      last = progress;
      if (Date.now() - lastDraw >= RENDER_EVERY_MS || progress.done === progress.total) draw();
    },
    finish() {
      draw();
      stream.write("\n");
    },
  };
}
