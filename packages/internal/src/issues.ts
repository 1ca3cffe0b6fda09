/** One failing field of a validation, as a schema library (zod) reports it. */
export interface SchemaIssue {
  readonly path: ReadonlyArray<PropertyKey>;
  readonly message: string;
}

/** One failing field, with a JSON-safe path (the protocol's `Issue` shape). */
export interface PathIssue {
  path: Array<string | number>;
  message: string;
}

/**
 * The issues of a failed validation with JSON-safe paths (symbol keys become their description
 * text). `message` maps each message, e.g. to redact it.
 */
export function issuesOf(
  error: { readonly issues: ReadonlyArray<SchemaIssue> },
  message: (text: string) => string = (text) => text,
): PathIssue[] {
  return error.issues.map((issue) => ({
    path: issue.path.map((key) => (typeof key === "symbol" ? String(key) : key)),
    message: message(issue.message),
  }));
}

/** `a.b: message; (root): message` for the first `max` issues, for error messages. */
export function summarizeIssues(issues: ReadonlyArray<PathIssue>, max = 5): string {
  return issues
    .slice(0, max)
    .map((issue) => `${issue.path.join(".") || "(root)"}: ${issue.message}`)
    .join("; ");
}
