/** Longest delay a timer can hold (2^31 - 1 ms, about 24.8 days); longer ones fire at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** `ms` as a delay `setTimeout` honours: longer delays are clamped to {@link MAX_TIMER_MS}. */
export function timerDelay(ms: number): number {
  return Math.min(ms, MAX_TIMER_MS);
}
