import fc from "fast-check";

/**
 * fast-check parameters for every property: bounded runs, and a seed that is printed up front so
 * a passing run can be replayed too (`FUZZ_SEED=<seed>`). On failure fast-check's own report
 * (seed, path, counterexample) is the assertion message the reporter shows.
 */
export function fuzzParameters(numRuns: number): fc.Parameters<unknown> {
  const seed =
    process.env.FUZZ_SEED === undefined
      ? Date.now() ^ (Math.random() * 2 ** 31)
      : Number(process.env.FUZZ_SEED);
  console.info(`[fuzz] seed ${seed}, ${numRuns} runs (replay with FUZZ_SEED=${seed})`);
  return { numRuns, seed, verbose: 1 };
}

/** Strings that exercise every UTF-8 width, lone surrogates, newlines, NUL and control bytes. */
export const hostileText = fc.string({
  unit: fc.oneof(
    {
      weight: 6,
      arbitrary: fc.constantFrom(
        "a",
        "Z",
        "0",
        " ",
        "\n",
        "\r",
        "\t",
        "\u0000",
        "\u001b",
        '"',
        "\\",
        "/",
        ".",
        "$",
        "`",
        "'",
      ),
    },
    {
      weight: 2,
      arbitrary: fc.constantFrom("é", "ß", "€", "中", "😀", "👍🏽", "\u2028", "\ufeff"),
    },
    { weight: 1, arbitrary: fc.constantFrom("\ud800", "\udfff") },
    { weight: 2, arbitrary: fc.string({ unit: "binary", maxLength: 1 }) },
  ),
  maxLength: 120,
});
