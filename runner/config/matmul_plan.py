"""What a sharded matmul strategy will do, decided before JAX starts.

A matmul op is written in the book's notation, ``A[I, J_X] * B[J_X, K] -> C[I, K_X]``, with
global dim sizes and a strategy. :func:`plan` checks the expression against the mesh and
turns the strategy into explicit steps (which input dims to gather or slice, which axes to
sum, how to reach the requested output), or raises :class:`ConfigError` naming the key and
what would work. The JAX programs in :mod:`runner.matmul` only execute a plan.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from analysis.book.notation import Array, Matmul, NotationError, check, parse
from runner.errors import ConfigError

STRATEGIES = (
    "auto",
    "allgather_then_matmul",
    "matmul_then_allreduce",
    "matmul_then_reducescatter",
    "collective_matmul",
)
EXAMPLE = "A[I, J_X] * B[J_X, K] -> C[I, K]"


@dataclass
class Plan:
    """Steps of an explicit strategy; dims are named as in the expression."""

    strategy: str
    gather: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=lambda: {"lhs": {}, "rhs": {}})
    slice: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=lambda: {"lhs": {}, "rhs": {}})
    psum: tuple[str, ...] = ()  # axes summed with an AllReduce after the local matmul
    scatter: dict[str, tuple[str, ...]] = field(default_factory=dict)  # out dim -> axes ReduceScattered onto it
    out_gather: dict[str, tuple[str, ...]] = field(default_factory=dict)  # product dim -> axes to gather
    out_slice: dict[str, tuple[str, ...]] = field(default_factory=dict)  # product dim -> axes to slice
    ring: tuple | None = None  # ("allgather", axis, lhs dim) or ("reducescatter", axis, out dim)


def parse_matmul(expr: str) -> Matmul:
    """Parse ``op.expr``; anything but a matmul with an output is a ConfigError."""
    try:
        mm = parse(expr)
    except NotationError as exc:
        raise ConfigError(f"op.expr={expr!r}: {exc}") from None
    if not isinstance(mm, Matmul):
        raise ConfigError(f"op.expr={expr!r}: op=matmul needs a matmul such as {EXAMPLE!r}")
    if mm.out is None:
        raise ConfigError(f"op.expr={expr!r}: give the output and its sharding, e.g. {EXAMPLE!r}")
    for arr in (mm.lhs, mm.rhs, mm.out):
        if arr.unreduced:
            raise ConfigError(
                f"op.expr={expr!r}: {arr} is unreduced; the runner builds fully reduced "
                "inputs and outputs (the strategy decides where partial sums are summed)"
            )
    twice = [a for a in set(mm.out.axes) if mm.out.axes.count(a) > 1]
    if twice:
        raise ConfigError(
            f"op.expr={expr!r}: the output {mm.out} shards two dims over mesh axis {''.join(sorted(twice))}, "
            "which no array can hold (book case 4, 'invalid as written'): gather one input first, e.g. "
            f"write the output as {_fix_case4(mm)}"
        )
    # The parser lets a matmul's output repeat an axis (the model explains case 4); this
    # one is valid, so make it an ordinary array that has a PartitionSpec.
    return dataclasses.replace(mm, out=dataclasses.replace(mm.out, loose=False))


def _fix_case4(mm: Matmul) -> str:
    rhs_dims = {d.name for d in mm.rhs.dims}
    dims = [d if d.name in rhs_dims else type(d)(d.name) for d in mm.out.dims]
    return str(Array(tuple(dims), mm.out.name))


def used_axes(mm: Matmul) -> list[str]:
    """The mesh axes the expression mentions, in first-seen order."""
    seen: list[str] = []
    for arr in (mm.lhs, mm.rhs, mm.out):
        seen += [a for a in arr.axes if a not in seen]
    return seen


def check_dims(mm: Matmul, dims: dict, mesh: dict[str, int] | None) -> dict[str, int]:
    """Every dim has a positive integer size, divisible by its shards when the mesh is known."""
    names = {d.name for arr in (mm.lhs, mm.rhs) for d in arr.dims}
    missing = sorted(names - set(dims))
    if missing:
        raise ConfigError(f"op.dims: no size for {', '.join(missing)} (give e.g. op.dims.{missing[0]}=1024)")
    extra = sorted(set(dims) - names)
    if extra:
        raise ConfigError(f"op.dims: {', '.join(extra)} not in op.expr (its dims: {', '.join(sorted(names))})")
    for k, v in dims.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"op.dims.{k}={v!r}: must be a positive integer")
    if mesh is not None:
        try:
            check(mm, mesh, dims)
        except NotationError as exc:
            raise ConfigError(f"op.expr / op.dims: {exc}") from None
    return dict(dims)


def plan(mm: Matmul, strategy: str, mesh: dict[str, int] | None = None) -> Plan:
    """The steps of ``strategy`` for ``mm``; ConfigError where it does not apply."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"op.strategy={strategy!r}: allowed strategies are {', '.join(STRATEGIES)}")
    if mesh is not None:
        missing = [a for a in used_axes(mm) if a not in mesh]
        if missing:
            raise ConfigError(f"op.expr: mesh axis {missing[0]} is not in the mesh ({', '.join(mesh)})")
    p = Plan(strategy)
    if strategy == "auto":
        return p  # XLA decides; the output sharding on the dot is all it needs
    if strategy == "collective_matmul":
        p.ring = _ring(mm)
        return p
    reduce = _contracting_steps(p, mm)
    lhs_after, rhs_after = _gather_clashes(p, mm)
    if strategy != "allgather_then_matmul" and not reduce:
        raise ConfigError(
            f"op.strategy={strategy}: no contracting dim of {mm} is sharded, so there are no "
            "partial sums to reduce (book case 1 or 4); use auto or allgather_then_matmul"
        )
    _output_steps(p, mm, reduce, (lhs_after, rhs_after))
    return p


def _contracting_steps(p: Plan, mm: Matmul) -> list[str]:
    """Gathers or slices of the contracting dims into ``p``; the mesh axes left to sum over."""
    L, R = mm.lhs, mm.rhs
    reduce: list[str] = []
    for d in mm.contracting:
        la, ra = L.dim(d).axes, R.dim(d).axes
        if p.strategy == "allgather_then_matmul":
            if la:
                p.gather["lhs"][d] = la
            if ra:
                p.gather["rhs"][d] = ra
        elif la == ra:
            reduce += la
        elif la and not ra and not set(la) & set(R.axes):
            p.slice["rhs"][d], reduce = la, reduce + list(la)  # Question 4's strategy 2: slice, don't gather
        elif ra and not la and not set(ra) & set(L.axes):
            p.slice["lhs"][d], reduce = ra, reduce + list(ra)
        else:
            raise ConfigError(
                f"op.strategy={p.strategy}: the contracting dim {d} is sharded as {L.dim(d)} in "
                f"{L} and {R.dim(d)} in {R}; use allgather_then_matmul or auto"
            )
    return reduce


def _gather_clashes(p: Plan, mm: Matmul) -> tuple[Array, Array]:
    """Where both inputs shard a non-contracting dim over the same axes (book case 4): the
    gather that resolves it (allgather_then_matmul only). The inputs as the matmul sees them."""
    L, R, O, contracting = mm.lhs, mm.rhs, mm.out, mm.contracting  # noqa: E741 - the book's letters
    lhs_after, rhs_after = _without(L, p.gather["lhs"]), _without(R, p.gather["rhs"])
    clash = [
        a
        for a in lhs_after.axes
        if a in rhs_after.axes and lhs_after.dim_of(a) not in contracting and lhs_after.dim_of(a) != rhs_after.dim_of(a)
    ]
    if not clash:
        return lhs_after, rhs_after
    if p.strategy != "allgather_then_matmul":
        raise ConfigError(
            f"op.strategy={p.strategy}: {L} and {R} both shard a non-contracting dim over "
            f"{''.join(clash)} (book case 4); use allgather_then_matmul, collective_matmul or auto"
        )
    # Gather the input whose dim the output does not keep on those axes.
    side = "lhs" if all(O.dim_of(a) != L.dim_of(a) for a in clash) else "rhs"
    arr = L if side == "lhs" else R
    for a in clash:
        d = arr.dim_of(a)
        p.gather[side][d] = tuple(x for x in arr.dim(d).axes if x in clash or x in p.gather[side].get(d, ()))
    return _without(L, p.gather["lhs"]), _without(R, p.gather["rhs"])


def _output_steps(p: Plan, mm: Matmul, reduce: list[str], inputs: tuple[Array, Array]) -> None:
    """How the product's partial sums are combined (reduce-scatter or psum) and how the output
    is brought to the sharding ``mm`` asks for, into ``p``."""
    O = mm.out  # noqa: E741 - the book's letter
    natural = {d.name: () for d in O.dims}  # the output's sharding as the matmul leaves it
    for arr in inputs:
        for d in arr.dims:
            if d.name in natural and d.axes:
                natural[d.name] = d.axes
    if p.strategy == "matmul_then_reducescatter":
        for a in reduce:
            d = O.dim_of(a)
            if d is not None and not natural[d]:
                p.scatter[d] = p.scatter.get(d, ()) + (a,)
        if not p.scatter:
            raise ConfigError(
                f"op.strategy=matmul_then_reducescatter: the output {O} is not sharded over the "
                f"summed axes {''.join(reduce)}, so there is nothing to scatter; shard an output "
                f"dim over them (e.g. {O.dims[-1].name}_{''.join(reduce)}) or use matmul_then_allreduce"
            )
        for d, axes in p.scatter.items():
            natural[d] = tuple(a for a in O.dim(d).axes if a in axes)
    p.psum = tuple(a for a in reduce if a not in {x for axes in p.scatter.values() for x in axes})
    for d in O.dims:
        cur, want = natural[d.name], d.axes
        if cur == want:
            continue
        if cur:
            p.out_gather[d.name] = cur
        if want:
            p.out_slice[d.name] = want


def _without(arr: Array, gathered: dict[str, tuple[str, ...]]) -> Array:
    out = arr
    for d, axes in gathered.items():
        out = out.with_axes(d, tuple(a for a in out.dim(d).axes if a not in axes))
    return out


def _ring(mm: Matmul) -> tuple:
    """The one-axis patterns a ppermute ring overlaps with compute."""
    L, R, O, contracting = mm.lhs, mm.rhs, mm.out, mm.contracting  # noqa: E741 - the book's letters
    axes = used_axes(mm)
    if len(axes) == 1:
        a = axes[0]
        lfree = [d.name for d in L.dims if d.axes == (a,) and d.name not in contracting]
        rfree = [d.name for d in R.dims if d.axes == (a,) and d.name not in contracting]
        if lfree and rfree and O.dim_of(a) == rfree[0] and not any(R.dim(c).axes or L.dim(c).axes for c in contracting):
            return ("allgather", a, lfree[0])
        shared = [c for c in contracting if L.dim(c).axes == (a,) and R.dim(c).axes == (a,)]
        free = [d.name for d in O.dims if d.axes == (a,)]
        if (
            len(contracting) == 1
            and shared
            and free
            and not (set(L.axes) | set(R.axes)) - {a}
            and free[0] in {d.name for d in R.dims}
            and not R.dim(free[0]).axes
        ):
            return ("reducescatter", a, free[0])
    raise ConfigError(
        f"op.strategy=collective_matmul: {mm} is not one of the two ring patterns it implements, over one "
        "mesh axis: the AllGather side 'A[I_X, J] * B[J, K_X] -> C[I, K_X]' (each device multiplies the "
        "block of A it holds while the next block travels) and the ReduceScatter side "
        "'A[I, J_X] * B[J_X, K] -> C[I, K_X]' (partial sums travel and accumulate)"
    )


def flops(mm: Matmul, dims: dict[str, int]) -> float:
    """2 x the product of every distinct dim: multiply-adds of the whole matmul."""
    names = {d.name for arr in (mm.lhs, mm.rhs) for d in arr.dims}
    return 2.0 * math.prod(dims[n] for n in names)
