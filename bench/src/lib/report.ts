export type Cell = string | number;

export interface Table {
  caption?: string;
  columns: string[];
  rows: Cell[][];
}

export interface ItemResult {
  id: string;
  title: string;
  /** The target in words, e.g. `p50 and p99 ratio <= 1.15`. */
  target: string;
  /** Whether the target was met; `null` when the item has no pass/fail target or was skipped. */
  met: boolean | null;
  /** One line for the summary table: the headline figure. */
  headline: string;
  tables: Table[];
  notes: string[];
  /** Raw figures for results.json. */
  raw: unknown;
  seconds?: number;
  /** 1-minute load average of the machine before and after the item. */
  loadAverage?: [number, number];
  /** The bench item's id (`--only` name), when and at which commit it was measured. */
  item?: string;
  measuredAt?: string;
  commit?: string;
}

export interface BenchOptions {
  quick: boolean;
}

export interface BenchItem {
  id: string;
  title: string;
  run(options: BenchOptions): Promise<ItemResult>;
}

function cell(value: Cell): string {
  return typeof value === "number" ? String(value) : value.replaceAll("|", "\\|");
}

/** A Markdown table with padded columns (the layout the repository's formatter keeps). */
export function markdownTable(table: Table): string {
  const header = table.columns.map(cell);
  const body = table.rows.map((row) => table.columns.map((_, i) => cell(row[i] ?? "")));
  const widths = header.map((h, i) =>
    Math.max(3, h.length, ...body.map((row) => (row[i] ?? "").length)),
  );
  const line = (cells: string[]) =>
    `| ${cells.map((c, i) => c.padEnd(widths[i] ?? 3)).join(" | ")} |`;
  const lines = [line(header), line(widths.map((w) => "-".repeat(w))), ...body.map(line)];
  return table.caption === undefined ? lines.join("\n") : `${table.caption}\n\n${lines.join("\n")}`;
}

export function verdict(met: boolean | null): string {
  if (met === null) return "n/a";
  return met ? "met" : "not met";
}

/** The one-line-per-item table that heads results.md and the README section. */
export function summaryTable(results: readonly ItemResult[]): Table {
  return {
    columns: ["#", "benchmark", "result", "target", "verdict"],
    rows: results.map((r) => [r.id, r.title, r.headline, r.target, verdict(r.met)]),
  };
}
