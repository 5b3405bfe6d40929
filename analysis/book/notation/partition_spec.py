"""Conversion between the notation and ``jax.sharding.PartitionSpec`` (jax imported only when called)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from analysis.book.errors import NotationError
from analysis.book.notation.mesh import check, mesh_sizes
from analysis.book.notation.parser import parse
from analysis.book.notation.types import _NAME, AXIS_RE, Array, Dim

__all__ = ["to_partition_spec", "from_partition_spec"]


def to_partition_spec(arr: Array | str, mesh: Any = None):
    """``A[I_XY, J]`` -> ``PartitionSpec(('X', 'Y'), None)``; ``{U_X}`` -> ``unreduced={'X'}``.
    Given a mesh, its axes are checked first. Imports jax only when called."""
    from jax.sharding import PartitionSpec

    arr = parse(arr) if isinstance(arr, str) else arr
    if not isinstance(arr, Array) or arr.loose:
        raise NotationError(f"{arr}: only a valid array has a PartitionSpec")
    if mesh is not None:
        check(arr, mesh)
    entries = [None if not d.axes else d.axes[0] if len(d.axes) == 1 else tuple(d.axes) for d in arr.dims]
    if arr.unreduced:
        return PartitionSpec(*entries, unreduced=set(arr.unreduced))
    return PartitionSpec(*entries)


def from_partition_spec(spec: Any, dims: Sequence[str], name: str | None = None, mesh: Any = None) -> Array:
    """``PartitionSpec(('X', 'Y'), None)`` with dims ``('I', 'J')`` -> ``A[I_XY, J]``. A spec
    shorter than ``dims`` leaves the trailing dims replicated, as in JAX."""
    # jax refuses tuple(spec) when the spec carries unreduced axes; `.partitions` is its accessor.
    entries = tuple(getattr(spec, "partitions", spec))
    if len(entries) > len(dims):
        raise NotationError(f"{spec}: has {len(entries)} entries for {len(dims)} dims {list(dims)}")
    out = []
    for i, dname in enumerate(dims):
        e = entries[i] if i < len(entries) else None
        axes = () if e is None else (e,) if isinstance(e, str) else tuple(e)
        for a in axes:
            if not isinstance(a, str) or not AXIS_RE.fullmatch(a):
                raise NotationError(
                    f"{spec}: mesh axis {a!r} is not a single capital letter, which this notation needs"
                )
        if not isinstance(dname, str) or not _NAME.match(dname):
            raise NotationError(f"dim name {dname!r} is not a letter followed by letters or digits")
        out.append(Dim(dname, axes))
    order = list(mesh_sizes(mesh)) if mesh is not None else []
    # A frozenset in jax: print it in mesh order (else alphabetically) so the result is stable.
    unreduced = sorted(
        getattr(spec, "unreduced", ()) or (), key=lambda a: (order.index(a) if a in order else len(order), a)
    )
    arr = Array(tuple(out), name, tuple(unreduced))
    if mesh is not None:
        check(arr, mesh)
    return arr
