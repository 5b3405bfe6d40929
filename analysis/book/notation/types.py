"""The book's sharding notation as data: dims, arrays, collectives and matmuls.

Grammar (ASCII; the Unicode ``·`` and ``→`` are accepted too)::

    array      A[I_X, J]   A[I_XY, J]   [B_X, D_Y]   C[I, K]{U_X}     (the name is optional)
    collective AllGather_X(A[I_X, J])      AllGather_XY(...)     AllReduce_Y(...)
               ReduceScatter_{X,K}(C[I, K]{U_X})   AllToAll_{X,J}(A[I_X, J])
               (parentheses optional; ``-> result`` optional and checked)
    matmul     A[I, J_X] * B[J_X, K] -> C[I, K]    (``*``, ``·`` or ``@``; ``*_J`` names the
               contracting dim; the output is optional)

Names: a dim is a letter followed by letters or digits (``B``, ``D``, ``E1``, ``Batch``); a
mesh axis is ONE capital letter, so the subscript ``_XY`` means axes X then Y (X major).
A subscript may be braced: ``I_{XY}``. Collective names are case-insensitive.

Every invalid input raises :class:`NotationError` (a ``ValueError``), quoting the part at fault.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from analysis.book import collectives
from analysis.book.errors import NotationError

__all__ = ["NotationError", "Dim", "Array", "Collective", "Matmul", "Expr", "format_expr", "replace_unreduced"]

AXIS_RE = re.compile(r"[A-Z]")  # a mesh axis is one capital letter
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*\Z")
# The notation's collective names, keyed by their lower-case spelling without separators.
KINDS = {k.notation.lower(): k.notation for k in collectives.KINDS}


@dataclass(frozen=True)
class Dim:
    """One array dimension and the mesh axes that shard it (major first)."""

    name: str
    axes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.name + ("_" + "".join(self.axes) if self.axes else "")


@dataclass(frozen=True)
class Array:
    """A sharded array: its dims, optional name, and the axes it is unreduced over."""

    dims: tuple[Dim, ...]
    name: str | None = None
    unreduced: tuple[str, ...] = ()
    # Only a matmul's output may repeat a mesh axis (book case 4, "invalid as written"), so
    # that the cost model can say which input to gather instead of rejecting the expression.
    loose: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        where = str(self)
        if not self.dims:
            raise NotationError(f"{where}: an array needs at least one dim")
        names = [d.name for d in self.dims]
        for n in names:
            if names.count(n) > 1:
                raise NotationError(f"{where}: dim {n} appears twice")
        seen: dict[str, str] = {}
        for d in self.dims:
            if len(set(d.axes)) != len(d.axes):
                raise NotationError(f"{where}: a mesh axis repeats in the subscript of {d.name}")
            for a in d.axes:
                if a in seen and not self.loose:
                    raise NotationError(
                        f"{where}: mesh axis {a} is used twice ({seen[a]} and {d.name}); "
                        "a mesh axis may shard at most one dim"
                    )
                seen[a] = d.name
        for a in self.unreduced:
            if a in seen:
                raise NotationError(f"{where}: mesh axis {a} both shards {seen[a]} and is unreduced")
            if self.unreduced.count(a) > 1:
                raise NotationError(f"{where}: unreduced axis {a} is listed twice")

    def __str__(self) -> str:
        text = (self.name or "") + "[" + ", ".join(map(str, self.dims)) + "]"
        return text + ("{U_" + "".join(self.unreduced) + "}" if self.unreduced else "")

    @property
    def axes(self) -> tuple[str, ...]:
        """Every mesh axis that shards a dim, in dim order."""
        return tuple(a for d in self.dims for a in d.axes)

    def dim(self, name: str) -> Dim:
        for d in self.dims:
            if d.name == name:
                return d
        raise NotationError(f"{self}: has no dim {name}")

    def dim_of(self, axis: str) -> str | None:
        """The dim sharded over ``axis``, or None."""
        return next((d.name for d in self.dims if axis in d.axes), None)

    def with_axes(self, dim: str, axes: Sequence[str]) -> Array:
        return replace(self, dims=tuple(Dim(d.name, tuple(axes)) if d.name == dim else d for d in self.dims))

    def without_axes(self, axes: Sequence[str]) -> Array:
        return replace(self, dims=tuple(Dim(d.name, tuple(a for a in d.axes if a not in axes)) for d in self.dims))

    def local_elements(self, mesh: Mapping[str, int], sizes: Mapping[str, int]) -> int:
        """Elements one device holds (global dims divided by their shard counts)."""
        n = 1
        for d in self.dims:
            n *= sizes[d.name] // math.prod(mesh[a] for a in d.axes)
        return n


@dataclass(frozen=True)
class Collective:
    """``Kind_axes(operand)``; ``dim`` is the dim ReduceScatter scatters / AllToAll moves to."""

    kind: str
    axes: tuple[str, ...]
    operand: Array
    dim: str | None = None
    written_result: Array | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS.values():
            raise NotationError(f"{self.kind!r} is not a collective (one of {', '.join(KINDS.values())})")
        if not self.axes or len(set(self.axes)) != len(self.axes):
            raise NotationError(f"{self._head()}: needs distinct mesh axes")
        if self.kind in ("ReduceScatter", "AllToAll") and self.dim is None:
            raise NotationError(f"{self._head()}: name the dim, e.g. {self.kind}_{{{''.join(self.axes)},K}}")
        if self.kind in ("AllGather", "AllReduce") and self.dim is not None:
            raise NotationError(f"{self._head()}: {self.kind} takes no dim")
        res = self.result()  # validates the operand against the kind
        if self.written_result is not None and _shape_key(self.written_result) != _shape_key(res):
            raise NotationError(f"{self}: the result is {_unnamed(res)}, not {self.written_result}")

    def _head(self) -> str:
        sub = "".join(self.axes)
        return f"{self.kind}_{{{sub},{self.dim}}}" if self.dim else f"{self.kind}_{sub}"

    def __str__(self) -> str:
        text = f"{self._head()}({self.operand})"
        return text + (f" -> {self.written_result}" if self.written_result is not None else "")

    def result(self) -> Array:
        """The array after the collective (raises NotationError if it does not apply)."""
        op, k = self.operand, self.kind
        if k in ("AllGather", "AllToAll"):
            missing = [a for a in self.axes if op.dim_of(a) is None]
            if missing:
                raise NotationError(f"{self}: {op} is not sharded over {''.join(missing)}")
        else:
            missing = [a for a in self.axes if a not in op.unreduced]
            if missing:
                raise NotationError(
                    f"{self}: {op} is not unreduced over {''.join(missing)} "
                    f"(an unreduced array is written like C[I, K]{{U_X}})"
                )
        if self.dim is not None:
            op.dim(self.dim)  # raises if absent
        if k == "AllGather":
            return op.without_axes(self.axes)
        if k == "AllReduce":
            return replace(op, unreduced=tuple(a for a in op.unreduced if a not in self.axes))
        if k == "ReduceScatter":
            out = replace(op, unreduced=tuple(a for a in op.unreduced if a not in self.axes))
            return out.with_axes(self.dim, op.dim(self.dim).axes + self.axes)
        if any(op.dim_of(a) == self.dim for a in self.axes):
            raise NotationError(f"{self}: {self.dim} is already sharded over those axes")
        out = op.without_axes(self.axes)
        return out.with_axes(self.dim, out.dim(self.dim).axes + self.axes)


@dataclass(frozen=True)
class Matmul:
    """``lhs * rhs -> out``: dims named in both inputs and absent from ``out`` are contracted."""

    lhs: Array
    rhs: Array
    out: Array | None = None
    contract: str | None = None

    def __post_init__(self) -> None:
        shared = [d.name for d in self.lhs.dims if d.name in {e.name for e in self.rhs.dims}]
        if self.contract is not None and self.contract not in shared:
            raise NotationError(f"{self}: contracting dim {self.contract} is not in both inputs")
        if self.out is not None:
            free = {d.name for d in self.lhs.dims + self.rhs.dims} - set(self.contracting)
            got = {d.name for d in self.out.dims}
            if got != free:
                raise NotationError(f"{self}: the output's dims should be {sorted(free)}, got {sorted(got)}")
        for a in self.out.axes if self.out is not None else ():
            owners = [d.name for d in self.out.dims if a in d.axes]
            if len(owners) > 1 and not (self.lhs.dim_of(a) in owners and self.rhs.dim_of(a) in owners):
                raise NotationError(f"{self}: the output uses mesh axis {a} twice ({' and '.join(owners)})")
        both = set(self.lhs.unreduced) & set(self.rhs.unreduced)
        if both:
            raise NotationError(
                f"{self}: both inputs are unreduced over {''.join(sorted(both))}; "
                "a product of partial sums is not a partial sum"
            )

    @property
    def contracting(self) -> tuple[str, ...]:
        shared = [d.name for d in self.lhs.dims if d.name in {e.name for e in self.rhs.dims}]
        if self.contract is not None:
            return (self.contract,)
        if self.out is None:
            return tuple(shared)
        return tuple(n for n in shared if n not in {d.name for d in self.out.dims})

    def __str__(self) -> str:
        dot = f" *_{self.contract} " if self.contract else " * "
        return f"{self.lhs}{dot}{self.rhs}" + (f" -> {self.out}" if self.out is not None else "")


Expr = Array | Collective | Matmul


def _shape_key(a: Array):
    return (a.dims, tuple(sorted(a.unreduced)))


def _unnamed(a: Array) -> str:
    return str(replace(a, name=None))


def replace_unreduced(arr: Array, unreduced: Sequence[str]) -> Array:
    """The same array, unreduced over ``unreduced`` instead."""
    return replace(arr, unreduced=tuple(unreduced))


def format_expr(expr: Expr, unicode: bool = False) -> str:
    """Print an expression in the book's notation (ASCII by default; ``·``/``→`` if unicode)."""
    text = str(expr)
    return text.replace(" -> ", " → ").replace(" *", " ·") if unicode else text
