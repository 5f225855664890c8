"""Exclusion globs: the pattern language of a scenario's exclusion set, compiled to regexes.

Pure (standard library only), so detectors and agents' session-file rules can use it without
importing the chamber.
"""

from __future__ import annotations

import re

__all__ = ["glob_to_regex"]


def glob_to_regex(glob: str) -> re.Pattern[str]:
    """Compile an exclusion glob into a regex matched against repo-relative paths.

    Semantics (anchored at the repository root, like a gitignore pattern with a slash):
    `*` matches any run of characters inside one segment, `?` one character, `[...]` a
    class (`[!...]` negates); a segment that is exactly `**` matches zero or more whole
    segments (`**/x` is `x` at any depth, `a/**` everything below `a`). Leading and
    trailing slashes are ignored. `build_sandbox` also tests every ancestor directory of a
    path, so a glob that matches a directory excludes it recursively.

    Args:
        glob: the pattern, e.g. `answers/**`, `**/.claude`, `docs/report-*.md`.

    Returns:
        A compiled pattern; use `fullmatch`.
    """
    parts = glob.strip("/").split("/")
    out: list[str] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        out.append(_segment(part) + ("" if last else "/"))
    return re.compile("".join(out), re.S)


def _segment(part: str) -> str:
    """Translate one glob segment (no slash) to a regex fragment."""
    out, i, n = [], 0, len(part)
    while i < n:
        c = part[i]
        i += 1
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1 if i < n and part[i] in "!^" else i
            j = j + 1 if j < n and part[j] == "]" else j
            while j < n and part[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))
                continue
            body = part[i:j].replace("\\", "\\\\")
            i = j + 1
            if body[:1] in "!^":
                body = "^" + body[1:]
            out.append(f"(?!/)[{body}]")
        else:
            out.append(re.escape(c))
    return "".join(out)
