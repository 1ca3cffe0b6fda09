import type { BenchItem } from "../lib/report.ts";
export const workerOutput: BenchItem = {
  id: "worker",
  title: "todo",
  run: () => Promise.reject(new Error("todo")),
};
