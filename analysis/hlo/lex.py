"""Lexical pieces shared by the HLO text readers (:mod:`analysis.hlo`, :mod:`.shapes`,
:mod:`.groups`): the one error they raise, comments, strings, brackets and ints.
"""

from __future__ import annotations

import re

__all__ = ["HloParseError"]


class HloParseError(ValueError):
    """The only exception the public functions raise on bad input."""


# A string never holds a raw newline in HLO (they are escaped), so strings are matched per line:
# an unterminated quote in stray text then cannot swallow the rest of the file.
# Possessive quantifiers (Python 3.11): a plain ``(?:[^"]|\\.)*`` keeps a backtracking state per
# character, so a 20 MB string literal took 2.7 GB; these keep none.
_STR = r'"(?:[^"\\\n]++|\\.)*+"'
_STR_RE = re.compile(_STR)
_COMMENTS_RE = re.compile(f"({_STR})" + r"|/\*(?:[^*\n]++|\*(?!/))*+\*/|//[^\n]*+")
_BRACKETS_RE = re.compile(_STR + r"|[()\[\]{}]")
_TOP_COMMA_RE = re.compile(_STR + r"|[()\[\]{},]")
_OPEN, _CLOSE = "([{", ")]}"


def strip_comments(text: str) -> str:
    """``/* ... */`` and ``// ...`` replaced by a space; strings are kept as they are."""
    return _COMMENTS_RE.sub(lambda m: m.group(1) or " ", text)


def blank_strings(text: str) -> str:
    """Every string literal emptied (``op_name="a body=b"`` -> ``op_name=""``): what is left
    are the instruction's own attributes."""
    return _STR_RE.sub('""', text)


def parse_int(text: str, what: str) -> int:
    text = text.strip()
    # Length cap: Python refuses to convert > 4300 digits with a ValueError of its own.
    if not text.isdigit() or not text.isascii() or len(text) > 30:
        raise HloParseError(f"bad {what}: {text[:40]!r}")
    return int(text)


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    text = text.strip()
    return tuple(parse_int(t, what) for t in text.split(",")) if text else ()


def balance(line: str) -> int:
    """Open minus closed brackets on ``line``, outside strings."""
    s = _STR_RE.sub("", line)
    return sum(s.count(c) for c in _OPEN) - sum(s.count(c) for c in _CLOSE)


def close_bracket(s: str, i: int) -> int:
    """Index just past the bracket that closes the one at ``s[i]`` (strings skipped)."""
    depth = 0
    for m in _BRACKETS_RE.finditer(s, i):
        c = m.group()
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return m.end()
    raise HloParseError(f"unbalanced brackets in {s[i : i + 60]!r}")


def split_top(s: str) -> list[str]:
    """Split on commas outside brackets and strings; empty text gives []."""
    parts, depth, start = [], 0, 0
    for m in _TOP_COMMA_RE.finditer(s):
        c = m.group()
        if c == "," and depth == 0:
            parts.append(s[start : m.start()])
            start = m.end()
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth < 0:
                raise HloParseError(f"unbalanced brackets in {s[:60]!r}")
    if depth:
        raise HloParseError(f"unbalanced brackets in {s[:60]!r}")
    parts.append(s[start:])
    return [p.strip() for p in parts if p.strip()]
