"""Writes the golden result texts from an independent implementation of the reference rules.

The reference tool (RESEARCH.md section 1) joins stdout and stderr with one newline, keeps the
tail within 50 KiB / 2000 lines with a notice, shows `(no output)` when empty, returns the text
as is on exit 0, and otherwise throws `f"{text}\n\nCommand exited with code {code}".trim()` (the
JavaScript trim); a call its caller aborts says `remote_task aborted`, its own client-side timeout
says `remote_task timed out after N seconds`.

A call the bridge refuses or fails (an HTTP error answer) reads, as the reference words it, the
answer's `error`, else its `stderr`, else `remote sandbox returned HTTP N` (the body trimmed, an
empty one read as `{}`). The `http-*` and `reference-*` cases are answers served over HTTP to the
real client; the others are results and errors the client hands the tool.

The cases marked DELIBERATE follow the differences listed in the tool README instead: a timeout
the bridge reports keeps the output that arrived, a bridge-side cancel too, a notice counts the
bytes the command really wrote when the bridge kept only their tail, and a token the bridge's
text quotes is redacted.

The inputs are built from the same recipes as test/golden.test.ts. Run with `python3 generate.py`
only when the reference wording itself changes; the TypeScript tests compare against these bytes.
"""

import json

MAX_BYTES = 51200
MAX_LINES = 2000


def size(n):
    if n < 1024:
        return f"{n}B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f}KB"
    return f"{n / (1024 * 1024):.1f}MB"


def tail(text):
    """Returns (kept_text, kept_bytes, truncated, limit that cut it)."""
    lines = text.split("\n")
    total = len(text.encode("utf-8"))
    if total <= MAX_BYTES and len(lines) <= MAX_LINES:
        return text, total, False, None
    kept = []
    used = 0
    for line in reversed(lines):
        if len(kept) == MAX_LINES:
            return "\n".join(reversed(kept)), used, True, "lines"
        cost = len(line.encode("utf-8")) + (1 if kept else 0)
        if used + cost > MAX_BYTES:
            # DELIBERATE: the empty "line" after a final newline does not count; the long line
            # it ends is cut instead (the reference shows nothing of it).
            if not kept or kept == [""]:
                used = 1 if kept else 0
                chars = []
                for ch in reversed(line):
                    width = len(ch.encode("utf-8"))
                    if used + width > MAX_BYTES:
                        break
                    used += width
                    chars.append(ch)
                kept.append("".join(reversed(chars)))
            return "\n".join(reversed(kept)), used, True, "bytes"
        used += cost
        kept.append(line)
    return "\n".join(reversed(kept)), used, True, "lines"


def output(stdout, stderr, stdout_bytes=None, stderr_bytes=None):
    joined = f"{stdout}\n{stderr}" if stdout and stderr else (stdout or stderr)
    out_total = stdout_bytes if stdout_bytes is not None else len(stdout.encode("utf-8"))
    err_total = stderr_bytes if stderr_bytes is not None else len(stderr.encode("utf-8"))
    if not joined and out_total + err_total == 0:
        return "(no output)"
    kept, kept_bytes, truncated, cut_by = tail(joined)
    full = out_total + err_total + (1 if out_total > 0 and err_total > 0 else 0)
    total = max(len(joined.encode("utf-8")), full)
    if not truncated and total == len(joined.encode("utf-8")):
        return joined
    # DELIBERATE: the notice names the limit that cut the output (the reference always names bytes).
    limit = f"{MAX_LINES}-line limit" if cut_by == "lines" else f"{size(MAX_BYTES)} limit"
    notice = (
        f"[Showing the last {size(kept_bytes)} of {size(total)} ({limit}). "
        "Have the command summarise or filter its own output.]"
    )
    return f"{kept or '(no output)'}\n\n{notice}"


# ECMAScript WhiteSpace and LineTerminator code points: what String.prototype.trim removes
# (Python's str.strip differs: it keeps U+FEFF and removes U+001C..U+001F and U+0085).
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(text):
    return text.strip(JS_WHITESPACE)


def exited(text, code):
    """The reference's error message for a non-zero exit."""
    return js_trim(f"{text}\n\nCommand exited with code {code}")


def ended(text, notice):
    """DELIBERATE: a timeout or cancel the bridge reports, worded like an exit, output kept."""
    return js_trim(f"{text}\n\n{notice}")


def refused(status, body):
    """The reference's error message for an HTTP error answer with this body.

    DELIBERATE: a text that says "see issues." has the issues in it (`timeoutSeconds` named as the
    model's parameter `timeout`), so the model reads which limit and its value.
    """
    raw = js_trim(body)
    parsed = json.loads(raw) if raw else {}
    text = parsed.get("error") or parsed.get("stderr") or f"remote sandbox returned HTTP {status}"
    issues = [i["message"].replace("timeoutSeconds", "timeout") for i in parsed.get("issues", [])]
    if issues and text.endswith(": see issues."):
        return text[: -len(": see issues.")] + ": " + "; ".join(issues) + "."
    return text


def seconds(n):
    """DELIBERATE: `1 second`, `5 seconds` (the reference says `1 seconds`)."""
    return f"{n} second" if n == 1 else f"{n} seconds"


def answered(body):
    """The reference's text for a 200 answer `{stdout, stderr, code}`."""
    parsed = json.loads(body)
    text = output(parsed.get("stdout") or "", parsed.get("stderr") or "")
    code = parsed.get("code") or 0
    return exited(text, code) if code != 0 else text


def build_log(lines):
    return "".join(f"line {i} of the build log\n" for i in range(1, lines + 1))


# HTTP answers served to the real client, by case name: (status, body). The TypeScript test
# serves the same bytes (test/golden.test.ts, `ANSWERS`).
TOKEN = "golden-token-1234"
ANSWERS = {
    "http-401-reference": (401, '{"error":"unauthorized"}'),
    "http-401-bridge": (
        401,
        '{"error":"Missing or wrong bearer token; send Authorization: Bearer <token>.",'
        '"code":"unauthorized"}',
    ),
    "http-400-reference": (400, '{"error":"sandboxId and command are required"}'),
    "http-400-issues": (
        400,
        '{"error":"Exec request is invalid: see issues.","code":"invalid_request",'
        '"issues":[{"path":["cwd"],"message":"cwd must be an absolute path"}]}',
    ),
    "http-404-reference": (404, '{"error":"not_found"}'),
    "http-500-reference": (500, '{"error":"Container crashed"}'),
    "http-502-empty": (502, ""),
    "http-400-over-limits": (
        400,
        '{"error":"Exec request exceeds the bridge limits: see issues.","code":"invalid_request",'
        '"issues":[{"path":["timeoutSeconds"],"message":"timeoutSeconds must be at most 3600"}]}',
    ),
    "http-503-stderr": (503, '{"stdout":"","stderr":"sandbox gone\\n","code":1}'),
    "http-500-empty-error": (500, '{"error":"","stderr":""}'),
    "http-401-echoes-token": (401, f'{{"error":"token {TOKEN} is not valid here"}}'),
    "reference-large-output": (
        200,
        json.dumps({"stdout": build_log(120000), "stderr": "warn: slow\n", "code": 0}),
    ),
    "reference-huge-output": (
        200,
        json.dumps({"stdout": build_log(700000), "stderr": "", "code": 2}),
    ),
}


def cjk_lines():
    return "".join(f"行{i}：" + "漢字かな交じり文" * 4 + "\n" for i in range(1, 1501))


CASES = {
    "stdout-only": output("hello\n", ""),
    "stdout-and-stderr": output("out\n", "warn: careful\n"),
    "stderr-only": output("", "only stderr"),
    "no-output": output("", ""),
    "success-leading-blank": output("\n  indented\n", ""),
    "exit-code": exited(output("boom\n", ""), 2),
    "exit-code-no-output": exited(output("", ""), 1),
    "exit-code-leading-blank": exited(output("\n\n  indented\n", ""), 1),
    "exit-code-leading-space-stderr": exited(output("", "   warning: x\n"), 2),
    "exit-code-unicode-space": exited(output("\u00a0\ufeff\u3000text\n", ""), 1),
    "aborted": "remote_task aborted",
    "client-timeout": f"remote_task timed out after {seconds(5)}",
    "client-timeout-one-second": f"remote_task timed out after {seconds(1)}",
    "timeout-partial": ended(output("tick 1\ntick 2\n", ""), f"Command timed out after {seconds(5)}"),
    "timeout-no-output": ended(output("", ""), f"Command timed out after {seconds(0.5)}"),
    "timeout-leading-blank": ended(output("\n tick\n", ""), f"Command timed out after {seconds(3)}"),
    "timeout-one-second": ended(output("tick\n", ""), f"Command timed out after {seconds(1)}"),
    "cancelled": ended(output("started\n", ""), "remote_task aborted"),
    "cjk-single-line": output("頭" + "界" * 20000, ""),
    "cjk-lines": output(cjk_lines(), "エラー：最後の行\n"),
    "emoji-at-cut": output("😀" * 13000 + "x", ""),
    "long-line-then-newline": output("a" * 200_000 + "b\n", ""),  # DELIBERATE: its end shown
    "line-limit": output("".join(f"line {i}\n" for i in range(1, 3001)), ""),
    "bridge-truncated": output("tail line\n", "", stdout_bytes=4_400_000),  # DELIBERATE total
    "truncated-exit-code": exited(
        output("".join(f"row {i}\n" for i in range(1, 2501)), "failed at the end"), 3
    ),
}
for name, (status, body) in ANSWERS.items():
    CASES[name] = answered(body) if status == 200 else refused(status, body)
# DELIBERATE: the token the bridge's text quotes is redacted.
CASES["http-401-echoes-token"] = CASES["http-401-echoes-token"].replace(TOKEN, "[redacted]")

for name, text in CASES.items():
    with open(f"{name}.txt", "w", encoding="utf-8", newline="") as f:
        f.write(text)
