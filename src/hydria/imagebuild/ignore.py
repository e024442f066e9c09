"""``.dockerignore`` patterns, matched as Docker's builder matches them (moby's patternmatcher).

A line is a pattern in Go's ``filepath.Match`` syntax (``*``, ``?``, ``[...]``, ``\\`` escapes)
plus ``**`` for any number of folders, relative to the context's root (a leading ``/`` or ``./``
means the same); ``!`` re-includes what an earlier line excluded; ``#`` starts a comment. A path
is excluded when the last pattern that matches it, or one of its parent folders, excludes it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence

from hydria.record import Record


class Pattern(Record):
    text: str  # as written, for messages
    regex: re.Pattern[str]
    exclusion: bool  # "!PATTERN": re-includes


def _translate(pattern: str) -> str:
    out = []
    i = 0
    while i < len(pattern):
        character = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):  # "**/": zero or more folders
                out.append("(?:.*/)?")
                i += 1
            else:
                out.append(".*")
            continue
        if character == "*":
            out.append("[^/]*")
        elif character == "?":
            out.append("[^/]")
        elif character == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        elif character == "[":
            end = pattern.find("]", i + 2 if pattern.startswith(("[^", "[!"), i) else i + 1)
            if end < 0:
                out.append(re.escape(character))
            else:
                body = pattern[i + 1:end]
                negated = body[:1] in ("^", "!")
                body = body[1:] if negated else body
                out.append(f"[{'^' if negated else ''}{body.replace(chr(92), chr(92) * 2)}]")
                i = end
        else:
            out.append(re.escape(character))
        i += 1
    return "".join(out)


def parse(text: str) -> list[Pattern]:
    """The patterns of a ``.dockerignore`` file's ``text``."""
    patterns = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exclusion = line.startswith("!")
        body = line[1:].strip() if exclusion else line
        cleaned = posixpath.normpath(body).lstrip("/")
        if cleaned in ("", "."):
            continue
        while cleaned.startswith("../"):
            cleaned = cleaned[3:]
        patterns.append(Pattern(line, re.compile(_translate(cleaned) + r"\Z", re.DOTALL), exclusion))
    return patterns


def _candidates(path: str) -> Iterable[str]:
    """``path`` and its parent folders."""
    parts = path.split("/")
    return ("/".join(parts[:n]) for n in range(1, len(parts) + 1))


def excluding_rule(path: str, patterns: Sequence[Pattern]) -> str | None:
    """The pattern that excludes ``path`` (relative, ``/``-separated), or None if it is included."""
    rule = None
    for pattern in patterns:
        if any(pattern.regex.match(candidate) for candidate in _candidates(path)):
            rule = None if pattern.exclusion else pattern.text
    return rule


def may_hold_included(folder: str, patterns: Sequence[Pattern]) -> bool:
    """Whether an excluded ``folder`` may still hold files that a ``!`` pattern includes again
    (the walk must then look inside it)."""
    return any(p.exclusion and (p.text[1:].strip().lstrip("/").startswith(folder + "/") or "*" in p.text)
               for p in patterns)
