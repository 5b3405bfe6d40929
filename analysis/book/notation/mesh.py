"""Checking an expression against a mesh and global dim sizes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from analysis.book.errors import NotationError
from analysis.book.notation.types import Array, Collective, Expr

__all__ = ["mesh_sizes", "arrays_of", "check"]


def mesh_sizes(mesh: Any) -> dict[str, int]:
    """``{'X': 4, ...}`` from a mapping or a ``jax.sharding.Mesh`` (its ``.shape``)."""
    shape = getattr(mesh, "shape", mesh)
    try:
        return {str(k): int(v) for k, v in dict(shape).items()}
    except (TypeError, ValueError) as err:
        raise NotationError(f"not a mesh: {mesh!r}") from err


def arrays_of(expr: Expr) -> list[Array]:
    """Every array an expression mentions (a collective's result included)."""
    if isinstance(expr, Array):
        return [expr]
    if isinstance(expr, Collective):
        return [expr.operand, expr.result()]
    return [expr.lhs, expr.rhs] + ([expr.out] if expr.out is not None else [])


def check(expr: Expr, mesh: Any, sizes: Mapping[str, int] | None = None) -> None:
    """Check an expression against a mesh (every axis exists) and, given global dim sizes,
    that every dim has a size divisible by its number of shards."""
    m = mesh_sizes(mesh)
    for arr in arrays_of(expr):
        for a in arr.axes + arr.unreduced:
            if a not in m:
                raise NotationError(
                    f"{arr}: mesh axis {a} is not in the mesh ({', '.join(f'{k}={v}' for k, v in m.items())})"
                )
        if sizes is None:
            continue
        for d in arr.dims:
            if d.name not in sizes:
                raise NotationError(f"{arr}: dim {d.name} has no size (give it, e.g. {d.name}=1024)")
            shards = math.prod(m[a] for a in d.axes)
            if sizes[d.name] <= 0 or sizes[d.name] % shards:
                raise NotationError(
                    f"{arr}: dim {d.name}={sizes[d.name]} is not divisible by its "
                    f"{shards} shards over {''.join(d.axes) or 'no axis'}"
                )
