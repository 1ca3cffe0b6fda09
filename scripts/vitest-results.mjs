// Counts of one vitest JSON results file. A test file that failed without a failed test (it did
// not load, or a hook failed and its tests were skipped) counts as one failure.
export function countResults(r) {
  const suiteErrors = r.testResults.filter(
    (file) =>
      file.status === "failed" && !file.assertionResults.some((test) => test.status === "failed"),
  ).length;
  return {
    passed: r.numPassedTests,
    failed: r.numFailedTests + suiteErrors,
    skipped: r.numPendingTests + r.numTodoTests,
  };
}
