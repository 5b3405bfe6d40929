"""The scaling book's recipe for a sharded matmul (Part 3), costed with
:mod:`analysis.book.collective_cost`.

:func:`predict_matmul` sorts ``lhs * rhs -> out`` into the book's four cases:

1. no contracting dim is sharded: the multiply needs no communication;
2. one input shards a contracting dim: AllGather it first;
3. both inputs shard a contracting dim over the same axes: multiply locally, then AllReduce
   the partial sums (or ReduceScatter them when the output is sharded);
4. the same mesh axis shards a non-contracting dim of each input: invalid as written, so
   AllGather one input first.

It then adds what turns the local product into the requested output, and times the whole as
``max(T_math, T_comms)`` (overlapped, as a collective matmul) and as their sum (serial), with
``T_math = FLOPs / (devices * C)``. :func:`compare_q4_strategies` is the chapter's Question 4.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from analysis.book.dtypes import dtype_bytes
from analysis.book.errors import BookError, NotationError
from analysis.book.hardware import Hardware
from analysis.book.notation import Array, Collective, Dim, check, replace_unreduced
from analysis.book.notation_cost import CollectiveCost, CostContext
from analysis.book.units import fmt_num, fmt_time

__all__ = ["MatmulPrediction", "predict_matmul", "Q4Comparison", "compare_q4_strategies"]


@dataclass(frozen=True)
class MatmulPrediction:
    """The book's recipe for a sharded matmul: its case, the collectives it prescribes (with
    costs), alternatives, FLOPs and the overlapped / serial totals."""

    expression: str
    case: int
    case_text: str
    steps: tuple[str, ...]
    collectives: tuple[CollectiveCost, ...]
    alternatives: tuple[str, ...]
    notes: tuple[str, ...]
    flops: float
    flops_formula: str
    devices: int
    C_flops_per_s: float | None
    T_math_s: float | None
    T_comms_s: float
    overlapped_time_s: float
    serial_time_s: float
    bound: str
    regime: str | None
    V_bytes: float

    @property
    def time_s(self) -> float:
        """The prediction: overlapped, as a collective matmul would run."""
        return self.overlapped_time_s

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "collectives"}
        d["collectives"] = [c.expression for c in self.collectives]
        d["collective_costs"] = [c.to_dict() for c in self.collectives]
        d["time_s"] = self.time_s
        return d


class _Recipe:
    """The book's recipe for one matmul as it is built: its steps, collectives (costed),
    alternatives, notes, and the cases met (number -> text)."""

    def __init__(self, ctx: CostContext):
        self.ctx = ctx
        self.steps: list[str] = []
        self.colls: list[CollectiveCost] = []
        self.alts: list[str] = []
        self.notes: list[str] = []
        self.case_bits: dict[int, str] = {}

    def add(self, coll, why: str) -> Array:
        """Cost ``coll``, record it as a step (with ``why``) and return the array it leaves."""
        c = self.ctx.cost(coll)
        self.colls.append(c)
        self.steps.append(f"{c.expression} -> {c.result}  ({why})")
        return coll.result()


def predict_matmul(
    mm, mesh, sizes, dtype: str, hw: Hardware, topology: str | None = None, placement=None, precision=None
) -> MatmulPrediction:
    """Classify ``mm`` into the book's four cases and cost what it prescribes (its collectives
    over the physical axes ``placement`` or a slice ``topology`` puts the mesh axes on), its
    T_math at the rate ``dtype`` runs at ``precision`` (:meth:`Hardware.flops`)."""
    check(mm, mesh, sizes)
    rec = _Recipe(CostContext.build(mesh, sizes, dtype, hw, topology, placement))
    out, contracting = mm.out, mm.contracting
    lnames, rnames = [d.name for d in mm.lhs.dims], [d.name for d in mm.rhs.dims]
    out_invalid = out is not None and len(set(out.axes)) != len(out.axes)
    L, R = _case4(rec, mm, out_invalid)
    if out_invalid:
        rec.notes.append(
            f"the requested output {out} uses a mesh axis twice (each device would hold a diagonal "
            "block); the result keeps the sharding left after the gather"
        )
    L, R, reduce_axes, strategy2 = _contracting_dims(rec, L, R, contracting)

    # The local matmul and the sharding it leaves.
    order = [x.name for x in out.dims] if out is not None else lnames + [n for n in rnames if n not in lnames]
    order = [n for n in order if n not in contracting]
    natural = _natural(mm, L, R, order, reduce_axes)
    if out is not None and not out_invalid:
        L, R, natural = _gather_dropped(rec, mm, L, R, natural, order, reduce_axes)
    rec.steps.append(f"local matmul {L} * {R} -> {natural}")
    work_axes = set(L.axes + L.unreduced + R.axes + R.unreduced)
    devices = math.prod(rec.ctx.mesh[a] for a in work_axes)
    if out is not None and not out_invalid:
        _finish_output(natural, out, rec.ctx, rec.add, rec.alts, rec.notes, mm)
    return _prediction(rec, mm, L, R, natural, devices, strategy2, precision)


def _case4(rec: _Recipe, mm, out_invalid: bool) -> tuple[Array, Array]:
    """Case 4: the same axis on a non-contracting dim of each input. Gather one input over it
    (the one that keeps the output's sharding, else the smaller gather); the inputs after."""
    L, R, out, contracting, ctx = mm.lhs, mm.rhs, mm.out, mm.contracting, rec.ctx
    lnames, rnames = [d.name for d in L.dims], [d.name for d in R.dims]
    free_l = {a: d.name for d in L.dims if d.name not in contracting for a in d.axes}
    free_r = {a: d.name for d in R.dims if d.name not in contracting for a in d.axes}
    clash = tuple(a for a in ctx.mesh if a in free_l and a in free_r and free_l[a] != free_r[a])
    if not clash:
        return L, R
    opts = {s: ctx.cost(Collective("AllGather", clash, arr)) for s, arr in (("lhs", L), ("rhs", R))}
    pick = None
    if out is not None and not out_invalid:
        owners = {out.dim_of(a) for a in clash}
        pick = "rhs" if owners <= set(lnames) - set(rnames) else "lhs" if owners <= set(rnames) - set(lnames) else None
    why = "keeps the output's sharding" if pick else "the smaller gather"
    pick = pick or ("lhs" if opts["lhs"].prediction.V_bytes <= opts["rhs"].prediction.V_bytes else "rhs")
    other = "rhs" if pick == "lhs" else "lhs"
    if pick == "lhs":
        L = rec.add(Collective("AllGather", clash, L), why)
    else:
        R = rec.add(Collective("AllGather", clash, R), why)
    rec.alts.append(
        f"or {opts[other].expression} instead: V = {opts[other].prediction.V_bytes:,.0f} bytes, "
        f"{fmt_time(opts[other].time_s)}"
    )
    rec.case_bits[4] = (
        f"case 4: both inputs shard a non-contracting dim over {''.join(clash)}; invalid as "
        f"written, so AllGather one input first ({opts[pick].expression})"
    )
    return L, R


def _contracting_dims(rec: _Recipe, L: Array, R: Array, contracting) -> tuple[Array, Array, list[str], list]:
    """Cases 2 and 3: a contracting dim sharded over the same axes in both inputs is summed
    after the multiply (its axes returned); one sharded in one input only is gathered first.
    Also the axes where Question 4's strategy 2 (slice the other input instead) applies."""
    reduce_axes: list[str] = []
    strategy2 = []
    for d in contracting:
        la, ra = L.dim(d).axes, R.dim(d).axes
        if la and la == ra:
            reduce_axes += la
            rec.case_bits.setdefault(
                3,
                f"case 3: both inputs shard the contracting dim {d} over {''.join(la)}: "
                "multiply locally, then AllReduce (or ReduceScatter if the output is sharded)",
            )
            continue
        for side, ax in (("lhs", la), ("rhs", ra)):
            if not ax:
                continue
            arr, other = (L, R) if side == "lhs" else (R, L)
            if not (la and ra) and not set(ax) & set(other.axes + other.unreduced):
                strategy2.append(ax)
            rec.case_bits.setdefault(
                2, f"case 2: the contracting dim {d} is sharded over {''.join(ax)} in {arr}: AllGather it first"
            )
            new = rec.add(Collective("AllGather", ax, arr), f"gather the contracting dim {d}")
            L, R = (new, R) if side == "lhs" else (L, new)
    return L, R, reduce_axes, strategy2


def _gather_dropped(rec: _Recipe, mm, L: Array, R: Array, natural: Array, order, reduce_axes):
    """An axis the output drops can be gathered from the input that carries it (before the
    matmul) or from the product (after); the book gathers whichever is smaller. The inputs
    and the product after."""
    out, contracting, ctx = mm.out, mm.contracting, rec.ctx
    drop = tuple(a for a in natural.axes if a not in out.axes)
    for side, arr, other in (("lhs", L, R), ("rhs", R, L)):
        if drop and all(arr.dim_of(a) not in (None, *contracting) for a in drop) and not set(drop) & set(other.axes):
            before = ctx.cost(Collective("AllGather", drop, arr))
            after = ctx.cost(Collective("AllGather", drop, natural))
            first, second = (before, after) if before.prediction.V_bytes < after.prediction.V_bytes else (after, before)
            rec.alts.append(
                f"or {second.expression} {'after' if first is before else 'before'} the matmul: "
                f"V = {second.prediction.V_bytes:,.0f} bytes, {fmt_time(second.time_s)}"
            )
            if first is before:
                new = rec.add(
                    Collective("AllGather", drop, arr),
                    "the output is replicated over "
                    f"{''.join(drop)}; gathering this input moves fewer bytes than the product",
                )
                L, R = (new, R) if side == "lhs" else (L, new)
                natural = _natural(mm, L, R, order, reduce_axes)
            break
    return L, R, natural


def _prediction(rec: _Recipe, mm, L, R, natural, devices: int, strategy2: list, precision) -> MatmulPrediction:
    """The recipe's FLOPs and times (T_math left out where the chip has no rate for the dtype),
    Question 4's strategy 2 where it applies, and the case."""
    ctx, colls = rec.ctx, rec.colls
    flops, flops_txt = _flops(L, R, ctx)
    try:
        C = ctx.hw.flops(ctx.dtype, precision)
    except BookError as err:
        C = None
        rec.notes.append(f"{err}: T_math is left out")
    t_math = flops / (devices * C) if C else None
    for ax in strategy2:
        rec.alts.append(_strategy2(natural, ax, flops, devices, C, ctx))
    t_comms = sum(c.time_s for c in colls)
    slowest = max(colls, key=lambda c: c.time_s, default=None)
    case = next((c for c in (4, 2, 3) if c in rec.case_bits), 1)
    text = rec.case_bits.get(
        case, "case 1: no contracting dim is sharded, so the multiply itself needs no communication"
    )
    return MatmulPrediction(
        str(mm),
        case,
        text,
        tuple(rec.steps),
        tuple(colls),
        tuple(rec.alts),
        tuple(rec.notes),
        flops,
        flops_txt,
        devices,
        C,
        t_math,
        t_comms,
        max(t_math or 0.0, t_comms),
        (t_math or 0.0) + t_comms,
        "compute" if (t_math or 0.0) >= t_comms else "comms",
        slowest.prediction.regime if slowest else None,
        sum(c.prediction.V_bytes for c in colls),
    )


def _finish_output(cur, out, ctx: CostContext, add, alts: list, notes: list, mm):
    """Collectives that turn the local product ``cur`` into the requested ``out``."""
    extra = [a for a in out.unreduced if a not in cur.unreduced]
    if extra:
        raise NotationError(f"{mm}: the output is unreduced over {''.join(extra)} but nothing sums over it")
    scatter: dict[str, list[str]] = {}
    reduce_all = []
    for a in cur.unreduced:
        if a in out.unreduced:
            continue
        d = out.dim_of(a)
        if d is not None and cur.dim_of(a) is None:
            scatter.setdefault(d, []).append(a)
        else:
            reduce_all.append(a)
    for d, axes in scatter.items():
        axes = [a for a in out.dim(d).axes if a in axes]
        ar = ctx.cost(Collective("AllReduce", tuple(axes), cur))
        cur = add(Collective("ReduceScatter", tuple(axes), cur, d), f"the output is sharded over {d}")
        alts.append(f"or {ar.expression} and keep a slice: {fmt_time(ar.time_s)} (2x the ReduceScatter)")
    if reduce_all:
        coll = Collective("AllReduce", tuple(reduce_all), cur)
        for d in reversed(cur.dims):  # the book scatters the last dim (K) when the output may stay sharded
            try:
                rs = Collective("ReduceScatter", tuple(reduce_all), cur, d.name)
                check(rs, ctx.mesh, ctx.sizes)
            except NotationError:
                continue
            c = ctx.cost(rs)
            alts.append(
                f"or {c.expression} -> {c.result} if the output may stay sharded: "
                f"{fmt_time(c.time_s)} (half the AllReduce)"
            )
            break
        cur = add(coll, "sum the partial products")
    moves: dict[tuple[str, str], list[str]] = {}
    for d in out.dims:
        for a in d.axes:
            src = cur.dim_of(a)
            if src is not None and src != d.name:
                moves.setdefault((src, d.name), []).append(a)
    for (src, dst), axes in moves.items():
        cur = add(Collective("AllToAll", tuple(axes), cur, dst), f"move {''.join(axes)} from {src} to {dst}")
    drop = tuple(a for a in cur.axes if out.dim_of(a) is None)
    if drop:
        cur = add(Collective("AllGather", drop, cur), "the output is replicated over " + "".join(drop))
    sliced = [a for a in out.axes if cur.dim_of(a) is None]
    if sliced:
        notes.append(
            f"the output is sharded over {''.join(sliced)} where the product is replicated: "
            "each device keeps its slice, no communication"
        )
    if any(set(out.dim(d.name).axes) == set(d.axes) and out.dim(d.name).axes != d.axes for d in cur.dims):
        notes.append("the output orders some subscript's axes differently; that relayout is not modelled")
    return cur


def _natural(mm, L, R, order, reduce_axes):
    """The product's sharding: each output dim keeps its input's axes; partial sums are
    unreduced over the inputs' unreduced axes and the case-3 axes."""
    lnames, rnames = [d.name for d in L.dims], [d.name for d in R.dims]
    dims = []
    for n in order:
        al = L.dim(n).axes if n in lnames else ()
        ar = R.dim(n).axes if n in rnames else ()
        if al and ar and al != ar:
            raise NotationError(f"{mm}: the shared dim {n} is sharded differently in the two inputs")
        dims.append(Dim(n, al or ar))
    name = mm.out.name if mm.out is not None else None
    return Array(tuple(dims), name, tuple(L.unreduced) + tuple(R.unreduced) + tuple(reduce_axes))


def _flops(L, R, ctx: CostContext) -> tuple[float, str]:
    names = [d.name for d in L.dims] + [d.name for d in R.dims if d.name not in {x.name for x in L.dims}]
    flops = 2.0 * math.prod(ctx.sizes[n] for n in names)
    return flops, f"2 * {' * '.join(names)} = 2 * {' * '.join(str(ctx.sizes[n]) for n in names)} = {fmt_num(flops)}"


def _strategy2(natural, ax, flops, devices, C, ctx: CostContext) -> str:
    """Question 4's strategy 2: slice the replicated input instead of gathering, multiply
    locally (1/|ax| of the FLOPs each), then AllReduce the partial products."""
    try:
        c = ctx.cost(Collective("AllReduce", tuple(ax), replace_unreduced(natural, natural.unreduced + tuple(ax))))
    except NotationError:
        return ""
    math_s = flops / (devices * math.prod(ctx.mesh[a] for a in ax) * C) if C else None
    return (
        f"or slice the replicated input, multiply locally and {c.expression} (Question 4's strategy 2): "
        f"comms {fmt_time(c.time_s)}, math {fmt_time(math_s)}, "
        f"overlapped {fmt_time(max(c.time_s, math_s or 0.0))}"
    )


@dataclass(frozen=True)
class Q4Comparison:
    """The chapter's Question 4: ``X[B, D] * Y[D_X, F] -> Z[B, F]`` two ways."""

    strategy1_time_s: float  # AllGather_X Y, then the full matmul on every device
    strategy2_time_s: float  # local matmul on X's slices, then AllReduce_X Z{U_X}
    winner: int
    crossover_B: float | None  # strategy 2 wins for B below this (None: it always wins)
    formulas: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def compare_q4_strategies(B: int, D: int, F: int, X: int, hw: Hardware, dtype: str = "bfloat16") -> Q4Comparison:
    """Question 4 in the book's bandwidth-bound terms, with ``b`` bytes per element:
    strategy 1 ``max(2BDF/C, b*D*F/W)``; strategy 2 ``max(2BDF/(X*C), 2*b*B*F/W)``.
    In comms alone strategy 2 wins when ``D > 2B``. Strategy 2 grows linearly in B from 0
    while strategy 1 starts at the flat ``b*D*F/W``, so they cross once, at
    ``B* = b*D*F / (W * s2)`` with ``s2 = max(2DF/(X*C), 2bF/W)``, provided strategy 1 is
    still flat there (``B* <= b*C/(2W)``); otherwise strategy 2 wins at every B."""
    name, b = dtype_bytes(dtype)
    C, W = hw.flops(name), hw.require("link_bw_bidir_Bps")
    t1 = max(2 * B * D * F / C, b * D * F / W)
    t2 = max(2 * B * D * F / (X * C), 2 * b * B * F / W)
    s2 = max(2 * D * F / (X * C), 2 * b * F / W)
    b_star = b * D * F / (W * s2)
    crossover = b_star if b_star <= b * C / (2 * W) else None
    formulas = {
        "strategy1": f"max(2BDF/C, {b}*D*F/W) = max({fmt_time(2 * B * D * F / C)}, {fmt_time(b * D * F / W)})",
        "strategy2": f"max(2BDF/(X*C), 2*{b}*B*F/W) = max({fmt_time(2 * B * D * F / (X * C))}, "
        f"{fmt_time(2 * b * B * F / W)})",
        "comms_only": "strategy 2 moves less when D > 2B",
    }
    return Q4Comparison(t1, t2, 1 if t1 < t2 else 2, crossover, formulas)
