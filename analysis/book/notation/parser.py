"""The parser of the book's sharding notation (the grammar is in :mod:`.types`): a tokenizer,
a recursive-descent :class:`Parser` that builds the data classes of :mod:`.types`, and
:func:`parse`, the one entry point."""

from __future__ import annotations

import re

from analysis.book.errors import NotationError
from analysis.book.notation.types import AXIS_RE, KINDS, Array, Collective, Dim, Expr, Matmul

__all__ = ["Parser", "parse"]

_TOKEN = re.compile(r"\s*(?:(?P<name>[A-Za-z][A-Za-z0-9]*)|(?P<arrow>->|→)|(?P<dot>[*·⋅@])|(?P<punct>[\[\](){},_]))")


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    toks, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            rest = text[pos:].lstrip()
            if not rest:
                break
            bad = len(text) - len(rest)
            raise NotationError(f"unexpected {text[bad]!r} at column {bad + 1} in {text!r}")
        kind = m.lastgroup
        toks.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    return toks


class Parser:
    """Recursive descent over the tokens of one expression; :meth:`expr` parses it whole."""

    def __init__(self, text: str):
        self.text, self.toks, self.i = text, _tokenize(text), 0

    def peek(self, k: int = 0) -> tuple[str, str, int]:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else ("end", "", len(self.text))

    def fail(self, what: str) -> NotationError:
        _, val, pos = self.peek()
        got = repr(val) if val else "the end"
        return NotationError(f"expected {what} but found {got} at column {pos + 1} in {self.text!r}")

    def take(self, val: str) -> None:
        if self.peek()[1] != val:
            raise self.fail(repr(val))
        self.i += 1

    def name(self, what: str = "a name") -> str:
        kind, val, _ = self.peek()
        if kind != "name":
            raise self.fail(what)
        self.i += 1
        return val

    def axes(self) -> tuple[str, ...]:
        """After '_': ``XY`` or ``{XY}`` (each capital letter one mesh axis)."""
        braced = self.peek()[1] == "{"
        if braced:
            self.i += 1
        pos = self.peek()[2]
        word = self.name("mesh axes (capital letters)")
        if not all(AXIS_RE.fullmatch(c) for c in word):
            raise NotationError(
                f"mesh axis names are single capital letters; {word!r} at column {pos + 1} in {self.text!r} is not"
            )
        if braced:
            self.take("}")
        return tuple(word)

    def array(self, loose: bool = False) -> Array:
        name = self.name() if self.peek()[0] == "name" else None
        self.take("[")
        dims = [self.dim()]
        while self.peek()[1] == ",":
            self.i += 1
            dims.append(self.dim())
        self.take("]")
        unreduced: tuple[str, ...] = ()
        if self.peek()[1] == "{":
            self.i += 1
            while True:
                if self.name("U (as in {U_X})") != "U":
                    raise NotationError(f"the unreduced suffix is written {{U_X}} in {self.text!r}")
                self.take("_")
                unreduced += self.axes()
                if self.peek()[1] != ",":
                    break
                self.i += 1
            self.take("}")
        return Array(tuple(dims), name, unreduced, loose)

    def dim(self) -> Dim:
        name = self.name("a dim name")
        if self.peek()[1] == "_":
            self.i += 1
            return Dim(name, self.axes())
        return Dim(name)

    def collective(self, kind: str) -> Collective:
        self.i += 1
        self.take("_")
        dim = None
        if self.peek()[1] == "{":
            self.i += 1
            axes = self.axes()
            if self.peek()[1] == ",":
                self.i += 1
                dim = self.name("a dim name")
            self.take("}")
        else:
            axes = self.axes()
        paren = self.peek()[1] == "("
        if paren:
            self.i += 1
        operand = self.array()
        if paren:
            self.take(")")
        result = self.result()
        return Collective(kind, axes, operand, dim, result)

    def result(self) -> Array | None:
        if self.peek()[0] == "arrow":
            self.i += 1
            return self.array()
        return None

    def expr(self) -> Expr:
        kind, val, _ = self.peek()
        if kind == "name" and val.lower() in KINDS and self.peek(1)[1] == "_":
            out: Expr = self.collective(KINDS[val.lower()])
        else:
            lhs = self.array()
            if self.peek()[0] == "dot":
                self.i += 1
                contract = None
                if self.peek()[1] == "_":
                    self.i += 1
                    braced = self.peek()[1] == "{"
                    self.i += braced
                    contract = self.name("the contracting dim")
                    if braced:
                        self.take("}")
                rhs = self.array()
                out = Matmul(lhs, rhs, self._matmul_out(), contract)
            else:
                out = lhs
        if self.peek()[0] != "end":
            raise self.fail("the end of the expression")
        return out

    def _matmul_out(self) -> Array | None:
        if self.peek()[0] != "arrow":
            return None
        self.i += 1
        return self.array(loose=True)


def parse(text: str) -> Expr:
    """Parse an array, collective or matmul written in the book's notation."""
    if not isinstance(text, str) or not text.strip():
        raise NotationError("empty expression")
    return Parser(text).expr()
