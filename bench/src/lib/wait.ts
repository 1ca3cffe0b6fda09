// Waiting in the Worker items: a pause, and polling a condition with a time limit.

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `done` every 100 ms until it holds or `timeoutMs` passes; whether it held. */
export async function until(
  done: () => boolean | Promise<boolean>,
  timeoutMs: number,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await done()) return true;
    await sleep(100);
  }
  return done();
}
