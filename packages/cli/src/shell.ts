/** Characters that never need quoting for a POSIX shell. */
const PLAIN = /^[A-Za-z0-9_@%+=:,./-]+$/;

/** `word` quoted for a POSIX shell, so the shell reads it back as exactly one argument. */
export function shellQuote(word: string): string {
  if (PLAIN.test(word)) return word;
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/**
 * The shell command line for the words after `--`, as `docker exec` and `kubectl exec` keep an
 * argv: one word is a whole command line (`'ls | wc -l'` keeps its pipe); several words are each
 * quoted, so `sh -c 'exit 7'` runs `sh` with the two arguments `-c` and `exit 7`.
 */
export function commandFromWords(words: readonly string[]): string {
  if (words.length === 1) return words[0] ?? "";
  return words.map(shellQuote).join(" ");
}
