"""Shapes in XLA HLO text and the bytes they hold.

A shape is an array such as ``f32[1024,256]{1,0:T(8,128)S(3)}`` (element type, dims, optional
layout) or a tuple of shapes. Layouts are skipped; only element types and counts matter.
"""

from __future__ import annotations

import re

from analysis.hlo.lex import HloParseError, close_bracket, parse_int, split_top, strip_comments

__all__ = ["shape_bytes"]

ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]\[]*)\]")

# Bits per element: sub-byte types count fractionally and totals round up to whole bytes.
_BITS = {
    "pred": 8,
    "s1": 1,
    "u1": 1,
    "s2": 2,
    "u2": 2,
    "s4": 4,
    "u4": 4,
    "s8": 8,
    "u8": 8,
    "s16": 16,
    "u16": 16,
    "f16": 16,
    "bf16": 16,
    "s32": 32,
    "u32": 32,
    "f32": 32,
    "s64": 64,
    "u64": 64,
    "f64": 64,
    "c64": 64,
    "c128": 128,
    "token": 0,
    "opaque": 0,
}
_MINIFLOAT_RE = re.compile(r"f([468])e\d+m\d+\w*")  # f8e4m3fn, f8e5m2, f8e8m0fnu, f4e2m1fn, f6e2m3fn ...


def shape_end(s: str, i: int) -> int:
    """End of the shape starting at ``s[i]`` (an array with optional layout, or a tuple)."""
    if s.startswith("(", i):
        return close_bracket(s, i)
    m = ARRAY_RE.match(s, i)
    if not m:
        raise HloParseError(f"expected a shape at {s[i : i + 40]!r}")
    j = m.end()
    return close_bracket(s, j) if s.startswith("{", j) else j


def leaves(shape: str) -> list[tuple[str, int]]:
    """(element type, element count) of every array in a shape, tuples flattened.

    Iterative rather than recursive so deeply nested junk cannot raise RecursionError.
    """
    s, i, n, out, depth = shape, 0, len(shape), [], 0
    want_element = True
    while True:
        while i < n and s[i].isspace():
            i += 1
        if want_element:
            if i < n and s[i] == "(":
                depth, i = depth + 1, i + 1
                k = i
                while k < n and s[k].isspace():
                    k += 1
                if k < n and s[k] == ")":  # empty tuple
                    depth, i, want_element = depth - 1, k + 1, False
                continue
            m = ARRAY_RE.match(s, i)
            if not m:
                raise HloParseError(f"expected a shape at {s[i : i + 40]!r} in {shape[:80]!r}")
            out.append((m.group(1), _num_elements(m.group(2))))
            i = close_bracket(s, m.end()) if s.startswith("{", m.end()) else m.end()
            want_element = False
        elif depth == 0:
            if i != n:
                raise HloParseError(f"trailing text {s[i : i + 40]!r} in shape {shape[:80]!r}")
            return out
        elif i < n and s[i] == ",":
            i, want_element = i + 1, True
        elif i < n and s[i] == ")":
            depth, i = depth - 1, i + 1
        else:
            raise HloParseError(f"malformed tuple shape {shape[:80]!r}")


MAX_ELEMENTS = 1 << 60


def _num_elements(dims: str) -> int:
    count = 1
    for d in dims.split(",") if dims.strip() else ():
        d = d.strip()
        if d.startswith("<="):  # bounded dynamic dim: the buffer holds the bound
            d = d[2:]
        if d == "?":
            raise HloParseError("unbounded dynamic dimension '?' has no size")
        count *= parse_int(d, "dimension")
        if count > MAX_ELEMENTS:  # no buffer is this large; its bytes would overflow a float
            raise HloParseError(f"shape [{dims[:60]}] has more than 2**60 elements: not a real buffer")
    return count


def _element_bits(dtype: str) -> int:
    if dtype in _BITS:
        return _BITS[dtype]
    m = _MINIFLOAT_RE.fullmatch(dtype)
    if m:
        return int(m.group(1))
    raise HloParseError(f"unknown element type {dtype!r}")


def shape_bytes(shape_text: str) -> int:
    """Bytes of an HLO shape such as ``f32[1024,256]{1,0}`` or ``(f32[4], bf16[2,2])``.

    Layouts (tiling ``T(8,128)``, memory space ``S(3)``) are ignored; tuples sum their
    elements; sub-byte types round each array up to whole bytes; token/opaque are 0.
    """
    if not isinstance(shape_text, str):
        raise HloParseError(f"shape must be str, not {type(shape_text).__name__}")
    return leaves_bytes(leaves(strip_comments(shape_text).strip()))


def leaves_bytes(arrays: list[tuple[str, int]]) -> int:
    """Bytes of the (element type, element count) pairs :func:`leaves` returns."""
    return sum((_element_bits(t) * count + 7) // 8 for t, count in arrays)  # whole bytes, in ints


def tuple_elements(shape: str) -> list[str]:
    """Top-level elements of a tuple shape; [shape] for an array shape."""
    shape = shape.strip()
    if shape.startswith("(") and close_bracket(shape, 0) == len(shape):
        return split_top(shape[1:-1])
    return [shape]
