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

/**
 * The first `max` issues as words for an answer's `error` text, for a reader that shows only that
 * text (the reference tool): each message, after its path unless the message names it already.
 */
export function issuesInWords(issues: ReadonlyArray<PathIssue>, max = 3): string {
  const words = issues.slice(0, max).map((issue) => {
    const path = issue.path.join(".");
    return path === "" || issue.message.startsWith(String(issue.path[0]))
      ? issue.message
      : `${path}: ${issue.message}`;
  });
  const more = issues.length > max ? ` (and ${issues.length - max} more)` : "";
  return `${words.join("; ").replace(/\.$/, "")}${more}`;
}
