"""Writes the golden result texts from an independent implementation of the reference rules.

The inputs are built from the same recipes as test/golden.test.ts. Run with `python3 generate.py`
only when the reference wording itself changes; the TypeScript tests compare against these bytes.
"""

MAX_BYTES = 51200
MAX_LINES = 2000


def size(n):
    if n < 1024:
        return f"{n}B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f}KB"
    return f"{n / (1024 * 1024):.1f}MB"


def tail(text):
    """Returns (kept_text, kept_bytes, truncated)."""
    lines = text.split("\n")
    total = len(text.encode("utf-8"))
    if total <= MAX_BYTES and len(lines) <= MAX_LINES:
        return text, total, False
    kept = []
    used = 0
    for line in reversed(lines):
        if len(kept) == MAX_LINES:
            break
        cost = len(line.encode("utf-8")) + (1 if kept else 0)
        if used + cost > MAX_BYTES:
            if not kept:
                chars = []
                for ch in reversed(line):
                    width = len(ch.encode("utf-8"))
                    if used + width > MAX_BYTES:
                        break
                    used += width
                    chars.append(ch)
                kept.append("".join(reversed(chars)))
            break
        used += cost
        kept.append(line)
    return "\n".join(reversed(kept)), used, True


def output(stdout, stderr, stdout_bytes=None, stderr_bytes=None):
    joined = f"{stdout}\n{stderr}" if stdout and stderr else (stdout or stderr)
    out_total = stdout_bytes if stdout_bytes is not None else len(stdout.encode("utf-8"))
    err_total = stderr_bytes if stderr_bytes is not None else len(stderr.encode("utf-8"))
    if not joined and out_total + err_total == 0:
        return "(no output)"
    kept, kept_bytes, truncated = tail(joined)
    full = out_total + err_total + (1 if out_total > 0 and err_total > 0 else 0)
    total = max(len(joined.encode("utf-8")), full)
    if not truncated and total == len(joined.encode("utf-8")):
        return joined
    notice = (
        f"[Showing the last {size(kept_bytes)} of {size(total)} ({size(MAX_BYTES)} limit). "
        "Have the command summarise or filter its own output.]"
    )
    return f"{kept or '(no output)'}\n\n{notice}"


def cjk_lines():
    return "".join(f"行{i}：" + "漢字かな交じり文" * 4 + "\n" for i in range(1, 1501))


CASES = {
    "stdout-only": output("hello\n", ""),
    "stdout-and-stderr": output("out\n", "warn: careful\n"),
    "stderr-only": output("", "only stderr"),
    "no-output": output("", ""),
    "exit-code": output("boom\n", "") + "\n\nCommand exited with code 2",
    "exit-code-no-output": output("", "") + "\n\nCommand exited with code 1",
    "timeout-partial": output("tick 1\ntick 2\n", "") + "\n\nCommand timed out after 5 seconds",
    "timeout-no-output": output("", "") + "\n\nCommand timed out after 0.5 seconds",
    "cancelled": output("started\n", "") + "\n\nCommand aborted",
    "cjk-single-line": output("頭" + "界" * 20000, ""),
    "cjk-lines": output(cjk_lines(), "エラー：最後の行\n"),
    "emoji-at-cut": output("😀" * 13000 + "x", ""),
    "line-limit": output("".join(f"line {i}\n" for i in range(1, 3001)), ""),
    "bridge-truncated": output("tail line\n", "", stdout_bytes=4_400_000),
    "truncated-exit-code": output("".join(f"row {i}\n" for i in range(1, 2501)), "failed at the end")
    + "\n\nCommand exited with code 3",
}

for name, text in CASES.items():
    with open(f"{name}.txt", "w", encoding="utf-8", newline="") as f:
        f.write(text)
