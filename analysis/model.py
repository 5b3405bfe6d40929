"""The scaling book's cost model (Part 3) for collectives and sharded matmuls.

Conventions (see the seeds for derivations):

* ``V_bytes`` is what one device sees of the array the collective works on: the gathered
  result (AllGather), the unreduced input (ReduceScatter, AllReduce), the array before it is
  resharded (AllToAll); in each case sharded over the *other* mesh axes only.
* Rings (wraparound), k axes: ``T = max(T_min * sum(ceil(N_i/2)), V / (W_bidi * k))``; the
  book writes ``sum N_i / 2``, the same for even axes.
* Lines (no wraparound): data crosses N-1 hops one way, ``T = max(T_min * (N-1),
  (N-1) * (V/N) / W_unidir)``. Mixed ring/line axes add their bandwidths:
  ``V / sum(W_eff_i)`` with ``W_eff = W_bidi`` (ring) or ``W_unidir * N / (N-1)`` (line).
* AllReduce = ReduceScatter + AllGather = 2x. AllToAll: ``V * max_i(N_i / W_i) / (4 * N)``
  (N = devices in the group; ``V / (4 W_bidi)`` on a 1-D ring).
* Switch (GPU node, ``W`` = one GPU's NVLink egress = ``link_bw_unidir_Bps``, N = GPUs in
  the group): AllGather/ReduceScatter ``V (N-1) / (N W)`` in N-1 steps, AllToAll
  ``V (N-1) / (N^2 W)`` in one step, AllReduce 2x.
* Host (``cpu``): the ring formula with W and T_min the caller fitted.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Sequence

from analysis.hardware import Hardware, wraparound_for, wraparound_reason
from analysis.notation import (Array, Collective, Dim, NotationError, check, mesh_sizes, parse,
                               replace_unreduced)

__all__ = ["CollectivePrediction", "predict_collective", "normalize_kind", "dtype_bytes",
           "Q4Comparison", "compare_q4_strategies", "fmt_time", "DTYPE_BYTES", "CollectiveCost",
           "cost_collective", "MatmulPrediction", "predict_matmul", "ArrayPrediction", "predict_expr"]

DTYPE_BYTES = {"float64": 8, "float32": 4, "int32": 4, "bfloat16": 2, "float16": 2, "int16": 2,
               "int8": 1, "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "int4": 0.5}
_DTYPE_ALIASES = {"bf16": "bfloat16", "f32": "float32", "fp32": "float32", "f16": "float16",
                  "fp16": "float16", "f64": "float64", "fp8": "float8_e4m3fn", "s8": "int8", "i8": "int8"}
_KINDS = {"allgather": "all_gather", "reducescatter": "reduce_scatter", "allreduce": "all_reduce",
          "alltoall": "all_to_all"}
NOTATION_KIND = {"all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
                 "all_reduce": "AllReduce", "all_to_all": "AllToAll"}


def normalize_kind(kind: str) -> str:
    """``"AllGather"``, ``"all-gather"``, ``"all_gather"`` -> ``"all_gather"``."""
    key = kind.replace("_", "").replace("-", "").lower()
    if key not in _KINDS:
        raise NotationError(f"unknown collective {kind!r} (one of {', '.join(_KINDS.values())})")
    return _KINDS[key]


def dtype_bytes(dtype: str) -> tuple[str, float]:
    """Canonical dtype name and its bytes per element (``"bf16"`` -> ``("bfloat16", 2)``)."""
    name = _DTYPE_ALIASES.get(dtype.lower(), dtype.lower())
    if name not in DTYPE_BYTES:
        raise NotationError(f"unknown dtype {dtype!r} (one of {', '.join(DTYPE_BYTES)})")
    return name, DTYPE_BYTES[name]


def fmt_time(t: float | None) -> str:
    """Seconds in a readable unit (``2.33e-05`` -> ``"23.30 us"``)."""
    if t is None:
        return "n/a"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(t) >= scale:
            return f"{t / scale:.2f} {unit}"
    return f"{t * 1e9:.2f} ns"


def _g(x: float) -> str:
    return f"{x:.4g}"


@dataclass(frozen=True)
class CollectivePrediction:
    """A collective's predicted time; ``book_*`` is the book's simple full-ring answer,
    given where the topology-aware answer differs (``note`` says why)."""
    kind: str
    V_bytes: float
    axis_sizes: tuple[int, ...]
    wraparound: tuple[bool, ...]
    topology: str
    hops: float
    latency_time_s: float
    bandwidth_time_s: float
    time_s: float
    regime: str
    formula: str
    book_time_s: float | None = None
    book_formula: str | None = None
    note: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["predicted_time_s"] = self.time_s
        return d


def _ring_line(kind: str, V: float, sizes: list[int], rings: list[bool], hw: Hardware):
    """(hops, latency s, bandwidth s, latency text, bandwidth text) of one ReduceScatter /
    AllGather / AllToAll over torus (or host) axes."""
    t_min = hw.require("hop_latency_s")
    w_bi = hw.require("link_bw_bidir_Bps") if any(rings) else None
    w_uni = hw.require("link_bw_unidir_Bps") if not all(rings) else None
    hops = sum(math.ceil(n / 2) if r else n - 1 for n, r in zip(sizes, rings))
    lat = t_min * hops
    if all(rings):
        hop_txt = " + ".join(f"ceil({n}/2)" for n in sizes)
        lat_txt = f"T_min * ({hop_txt}) = {_g(t_min)} s * {hops}"
    elif not any(rings) and len(sizes) == 1:
        lat_txt = f"T_min * (N-1) = {_g(t_min)} s * {hops}"
    else:
        lat_txt = f"T_min * hops = {_g(t_min)} s * {hops}"
    if kind == "all_to_all":
        n_all = math.prod(sizes)
        per = [n / (w_bi if r else w_uni) for n, r in zip(sizes, rings)]
        bw = V * max(per) / (4 * n_all)
        if all(rings):
            bw_txt = f"V * max(N_i) / (4 * N * W_bidi) = {_g(V)} B * {max(sizes)} / (4 * {n_all} * {_g(w_bi)} B/s)"
        else:
            bw_txt = (f"V * max(N_i / W_i) / (4 * N), W_i = W_bidi on a ring, W_unidir on a line "
                      f"= {_g(V)} B * {_g(max(per))} s/B / (4 * {n_all})")
        return hops, lat, bw, lat_txt, bw_txt
    if all(rings):
        k = len(sizes)
        return hops, lat, V / (w_bi * k), lat_txt, f"V / (W_bidi * k) = {_g(V)} B / ({_g(w_bi)} B/s * {k})"
    if len(sizes) == 1:
        n = sizes[0]
        return (hops, lat, (n - 1) * (V / n) / w_uni, lat_txt,
                f"(N-1) * (V/N) / W_unidir = {n - 1} * ({_g(V)} B / {n}) / {_g(w_uni)} B/s")
    w_eff = sum(w_bi if r else w_uni * n / (n - 1) for n, r in zip(sizes, rings))
    return (hops, lat, V / w_eff, lat_txt,
            f"V / sum(W_eff), W_eff = W_bidi on a ring, W_unidir*N/(N-1) on a line = {_g(V)} B / {_g(w_eff)} B/s")


def _switch(kind: str, V: float, sizes: list[int], hw: Hardware):
    t_min, w = hw.require("hop_latency_s"), hw.require("link_bw_unidir_Bps")
    n = math.prod(sizes)
    if kind == "all_to_all":
        return (1, t_min, V * (n - 1) / (n * n * w), f"T_min * 1 step = {_g(t_min)} s",
                f"V * (N-1) / (N^2 * W) = {_g(V)} B * {n - 1} / ({n}^2 * {_g(w)} B/s)")
    return (n - 1, t_min * (n - 1), V * (n - 1) / (n * w), f"T_min * (N-1) steps = {_g(t_min)} s * {n - 1}",
            f"V * (N-1) / (N * W) = {_g(V)} B * {n - 1} / ({n} * {_g(w)} B/s)")


def predict_collective(kind: str, V_bytes: float, axis_sizes: Sequence[int], hw: Hardware,
                       wraparound: Sequence[bool] | None = None) -> CollectivePrediction:
    """Predict one collective over mesh axes of ``axis_sizes`` (``wraparound`` per axis; by
    default from the hardware's rule with each mesh axis its own physical axis)."""

    k = normalize_kind(kind)
    sizes = [int(s) for s in axis_sizes]
    if hw.kind == "auto" or hw.interconnect is None:
        raise NotationError(f"hardware {hw.name!r} names no chip: pick one (e.g. tpu_v5e, h100, cpu)")
    rings = [bool(r) for r in (wraparound if wraparound is not None else wraparound_for(hw, sizes))]
    if len(rings) != len(sizes):
        raise NotationError(f"wraparound {list(rings)} does not match axis sizes {sizes}")
    # Axes of size 1 move nothing; dropping them keeps k (the axis count) honest.
    act = [(n, r) for n, r in zip(sizes, rings) if n > 1]
    base = "reduce_scatter" if k == "all_reduce" else k
    switch = hw.interconnect == "switch"
    if hw.interconnect == "host":
        act = [(n, True) for n, _ in act]
    if not act:
        hops, lat, bw, lat_txt, bw_txt = 0, 0.0, 0.0, "no hops", "no communication (every axis has size 1)"
    elif switch:
        hops, lat, bw, lat_txt, bw_txt = _switch(base, V_bytes, [n for n, _ in act], hw)
    else:
        hops, lat, bw, lat_txt, bw_txt = _ring_line(base, V_bytes, [n for n, _ in act], [r for _, r in act], hw)
    mult = 2 if k == "all_reduce" else 1
    formula = f"max({lat_txt}, {bw_txt}) = max({fmt_time(lat)}, {fmt_time(bw)})"
    if mult == 2:
        formula = f"2 * (ReduceScatter: {formula}) [AllReduce = ReduceScatter + AllGather]"
    topo = "switch" if switch else ("ring" if all(r for _, r in act) else
                                    "line" if not any(r for _, r in act) else "mixed")
    pred = dict(kind=k, V_bytes=float(V_bytes), axis_sizes=tuple(sizes), wraparound=tuple(rings),
                topology=topo, hops=mult * hops, latency_time_s=mult * lat, bandwidth_time_s=mult * bw,
                time_s=mult * max(lat, bw), regime="latency" if lat >= bw else "bandwidth", formula=formula)
    if topo in ("line", "mixed"):
        _, blat, bbw, blat_txt, bbw_txt = _ring_line(base, V_bytes, [n for n, _ in act], [True] * len(act), hw)
        pred["book_time_s"] = mult * max(blat, bbw)
        pred["book_formula"] = f"{'2 * ' if mult == 2 else ''}max({blat_txt}, {bbw_txt})"
        lines = [str(n) for n, r in act if not r]
        pred["note"] = (f"axis of {', '.join(lines)} has no wraparound on {hw.name}: a line, so data crosses "
                        "N-1 hops one way at the unidirectional bandwidth (about 2x the book's ring formula)")
    return CollectivePrediction(**pred)


@dataclass(frozen=True)
class Q4Comparison:
    """The chapter's Question 4: ``X[B, D] * Y[D_X, F] -> Z[B, F]`` two ways."""
    strategy1_time_s: float   # AllGather_X Y, then the full matmul on every device
    strategy2_time_s: float   # local matmul on X's slices, then AllReduce_X Z{U_X}
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
    formulas = {"strategy1": f"max(2BDF/C, {b}*D*F/W) = max({fmt_time(2 * B * D * F / C)}, {fmt_time(b * D * F / W)})",
                "strategy2": f"max(2BDF/(X*C), 2*{b}*B*F/W) = max({fmt_time(2 * B * D * F / (X * C))}, "
                             f"{fmt_time(2 * b * B * F / W)})",
                "comms_only": "strategy 2 moves less when D > 2B"}
    return Q4Comparison(t1, t2, 1 if t1 < t2 else 2, crossover, formulas)


# ---------------------------------------------------------------- expressions in notation
@dataclass(frozen=True)
class CollectiveCost:
    """A collective written in notation, with its V and predicted time."""
    expression: str
    result: str
    axes: tuple[str, ...]
    V_formula: str
    prediction: CollectivePrediction
    axis_notes: tuple[str, ...] = ()

    @property
    def time_s(self) -> float:
        return self.prediction.time_s

    def to_dict(self) -> dict:
        d = {"expression": self.expression, "result": self.result, "axes": list(self.axes),
             "V_formula": self.V_formula, "axis_notes": list(self.axis_notes),
             "collectives": [self.expression]}
        return {**d, **self.prediction.to_dict()}


@dataclass(frozen=True)
class _Ctx:
    mesh: dict
    sizes: dict
    dtype: str
    bytes_per: float
    hw: Hardware
    rings: dict


def _context(mesh, sizes, dtype, hw, topology) -> _Ctx:
    m = mesh_sizes(mesh)
    name, b = dtype_bytes(dtype)
    rings = dict(zip(m, wraparound_for(hw, list(m.values()), topology))) if hw.interconnect else {}
    return _Ctx(m, dict(sizes or {}), name, b, hw, rings)


def _cost(coll, ctx: _Ctx) -> CollectiveCost:
    full = coll.operand if coll.kind in ("ReduceScatter", "AllReduce") else coll.operand.without_axes(coll.axes)
    elems = full.local_elements(ctx.mesh, ctx.sizes)
    parts = [str(ctx.sizes[d.name] // math.prod(ctx.mesh[a] for a in d.axes)) for d in full.dims]
    v = ctx.bytes_per * elems
    v_txt = f"{_g(ctx.bytes_per)} B * {' * '.join(parts)} = {v:,.0f} bytes ({v / 2**20:.4g} MiB)"
    sizes = [ctx.mesh[a] for a in coll.axes]
    pred = predict_collective(coll.kind, v, sizes, ctx.hw, [ctx.rings[a] for a in coll.axes])
    if ctx.hw.interconnect == "torus":
        why = {a: f"{'ring' if ctx.rings[a] else 'line'} ({wraparound_reason(ctx.hw, ctx.mesh[a])})" for a in coll.axes}
    elif ctx.hw.interconnect == "switch":
        why = dict.fromkeys(coll.axes, "NVSwitch, every GPU one hop from every other")
    else:
        why = dict.fromkeys(coll.axes, "host, the ring formula with the fitted W and T_min")
    notes = tuple(f"{a}={ctx.mesh[a]}: {why[a]}" for a in coll.axes)
    return CollectiveCost(str(coll), str(coll.result()), tuple(coll.axes), v_txt, pred, notes)


def cost_collective(coll, mesh, sizes, dtype: str, hw: Hardware, topology: str | None = None) -> CollectiveCost:
    """V and predicted time of a parsed collective (``notation.Collective``) on a mesh with
    global dim sizes."""
    check(coll, mesh, sizes)
    return _cost(coll, _context(mesh, sizes, dtype, hw, topology))


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
    def predicted_time_s(self) -> float:
        return self.overlapped_time_s

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "collectives"}
        d["collectives"] = [c.expression for c in self.collectives]
        d["collective_costs"] = [c.to_dict() for c in self.collectives]
        d["predicted_time_s"] = self.predicted_time_s
        return d


def predict_matmul(mm, mesh, sizes, dtype: str, hw: Hardware, topology: str | None = None) -> MatmulPrediction:
    """Classify ``mm`` into the book's four cases and cost what it prescribes."""
    check(mm, mesh, sizes)
    ctx = _context(mesh, sizes, dtype, hw, topology)
    L, R, out, contracting = mm.lhs, mm.rhs, mm.out, mm.contracting
    lnames, rnames = [d.name for d in L.dims], [d.name for d in R.dims]
    steps, colls, alts, notes = [], [], [], []
    case_bits: dict[int, str] = {}
    out_invalid = out is not None and len(set(out.axes)) != len(out.axes)

    def add(coll, why: str) -> Array:
        c = _cost(coll, ctx)
        colls.append(c)
        steps.append(f"{c.expression} -> {c.result}  ({why})")
        return coll.result()

    # Case 4: the same axis on a non-contracting dim of each input.
    free_l = {a: d.name for d in L.dims if d.name not in contracting for a in d.axes}
    free_r = {a: d.name for d in R.dims if d.name not in contracting for a in d.axes}
    clash = tuple(a for a in ctx.mesh if a in free_l and a in free_r and free_l[a] != free_r[a])
    if clash:
        opts = {s: _cost(Collective("AllGather", clash, arr), ctx) for s, arr in (("lhs", L), ("rhs", R))}
        pick = None
        if out is not None and not out_invalid:
            owners = {out.dim_of(a) for a in clash}
            pick = "rhs" if owners <= set(lnames) - set(rnames) else "lhs" if owners <= set(rnames) - set(lnames) else None
        why = "keeps the output's sharding" if pick else "the smaller gather"
        pick = pick or ("lhs" if opts["lhs"].prediction.V_bytes <= opts["rhs"].prediction.V_bytes else "rhs")
        other = "rhs" if pick == "lhs" else "lhs"
        if pick == "lhs":
            L = add(Collective("AllGather", clash, L), why)
        else:
            R = add(Collective("AllGather", clash, R), why)
        alts.append(f"or {opts[other].expression} instead: V = {opts[other].prediction.V_bytes:,.0f} bytes, "
                    f"{fmt_time(opts[other].time_s)}")
        case_bits[4] = (f"case 4: both inputs shard a non-contracting dim over {''.join(clash)}; invalid as "
                        f"written, so AllGather one input first ({opts[pick].expression})")
    if out_invalid:
        notes.append(f"the requested output {out} uses a mesh axis twice (each device would hold a diagonal "
                     "block); the result keeps the sharding left after the gather")

    # Cases 2 and 3: the contracting dims.
    reduce_axes: list[str] = []
    strategy2 = []
    for d in contracting:
        la, ra = L.dim(d).axes, R.dim(d).axes
        if la and la == ra:
            reduce_axes += la
            case_bits.setdefault(3, f"case 3: both inputs shard the contracting dim {d} over {''.join(la)}: "
                                    "multiply locally, then AllReduce (or ReduceScatter if the output is sharded)")
            continue
        for side, ax in (("lhs", la), ("rhs", ra)):
            if not ax:
                continue
            arr, other = (L, R) if side == "lhs" else (R, L)
            if not (la and ra) and not set(ax) & set(other.axes + other.unreduced):
                strategy2.append(ax)
            case_bits.setdefault(2, f"case 2: the contracting dim {d} is sharded over {''.join(ax)} "
                                    f"in {arr}: AllGather it first")
            new = add(Collective("AllGather", ax, arr), f"gather the contracting dim {d}")
            L, R = (new, R) if side == "lhs" else (L, new)

    # The local matmul and the sharding it leaves.
    order = [x.name for x in out.dims] if out is not None else lnames + [n for n in rnames if n not in lnames]
    order = [n for n in order if n not in contracting]
    natural = _natural(mm, L, R, order, reduce_axes)
    if out is not None and not out_invalid:
        # An axis the output drops can be gathered from the input that carries it (before the
        # matmul) or from the product (after); the book gathers whichever is smaller.
        drop = tuple(a for a in natural.axes if a not in out.axes)
        for side, arr, other in (("lhs", L, R), ("rhs", R, L)):
            if drop and all(arr.dim_of(a) not in (None, *contracting) for a in drop) \
                    and not set(drop) & set(other.axes):
                before = _cost(Collective("AllGather", drop, arr), ctx)
                after = _cost(Collective("AllGather", drop, natural), ctx)
                first, second = (before, after) if before.prediction.V_bytes < after.prediction.V_bytes else (after, before)
                alts.append(f"or {second.expression} {'after' if first is before else 'before'} the matmul: "
                            f"V = {second.prediction.V_bytes:,.0f} bytes, {fmt_time(second.time_s)}")
                if first is before:
                    new = add(Collective("AllGather", drop, arr), "the output is replicated over "
                              f"{''.join(drop)}; gathering this input moves fewer bytes than the product")
                    L, R = (new, R) if side == "lhs" else (L, new)
                    natural = _natural(mm, L, R, order, reduce_axes)
                break
    steps.append(f"local matmul {L} * {R} -> {natural}")
    work_axes = set(L.axes + L.unreduced + R.axes + R.unreduced)
    devices = math.prod(ctx.mesh[a] for a in work_axes)
    cur = natural
    if out is not None and not out_invalid:
        cur = _finish_output(cur, out, ctx, add, alts, notes, mm)
    flops, flops_txt = _flops(L, R, ctx)
    try:
        C = ctx.hw.flops(ctx.dtype)
    except NotationError as err:
        C = None
        notes.append(f"{err}: T_math is left out")
    t_math = flops / (devices * C) if C else None
    for ax in strategy2:
        alts.append(_strategy2(natural, ax, flops, devices, C, ctx))
    t_comms = sum(c.time_s for c in colls)
    slowest = max(colls, key=lambda c: c.time_s, default=None)
    case = next((c for c in (4, 2, 3) if c in case_bits), 1)
    text = case_bits.get(case, "case 1: no contracting dim is sharded, so the multiply itself needs no communication")
    return MatmulPrediction(
        str(mm), case, text, tuple(steps), tuple(colls), tuple(alts), tuple(notes), flops,
        flops_txt, devices, C, t_math, t_comms, max(t_math or 0.0, t_comms), (t_math or 0.0) + t_comms,
        "compute" if (t_math or 0.0) >= t_comms else "comms",
        slowest.prediction.regime if slowest else None, sum(c.prediction.V_bytes for c in colls))


def _finish_output(cur, out, ctx: _Ctx, add, alts: list, notes: list, mm):
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
        ar = _cost(Collective("AllReduce", tuple(axes), cur), ctx)
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
            c = _cost(rs, ctx)
            alts.append(f"or {c.expression} -> {c.result} if the output may stay sharded: "
                        f"{fmt_time(c.time_s)} (half the AllReduce)")
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
        notes.append(f"the output is sharded over {''.join(sliced)} where the product is replicated: "
                     "each device keeps its slice, no communication")
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


def _flops(L, R, ctx: _Ctx) -> tuple[float, str]:
    names = [d.name for d in L.dims] + [d.name for d in R.dims if d.name not in {x.name for x in L.dims}]
    flops = 2.0 * math.prod(ctx.sizes[n] for n in names)
    return flops, f"2 * {' * '.join(names)} = 2 * {' * '.join(str(ctx.sizes[n]) for n in names)} = {_g(flops)}"


def _strategy2(natural, ax, flops, devices, C, ctx: _Ctx) -> str:
    """Question 4's strategy 2: slice the replicated input instead of gathering, multiply
    locally (1/|ax| of the FLOPs each), then AllReduce the partial products."""
    try:
        c = _cost(Collective("AllReduce", tuple(ax), replace_unreduced(natural, natural.unreduced + tuple(ax))), ctx)
    except NotationError:
        return ""
    math_s = flops / (devices * math.prod(ctx.mesh[a] for a in ax) * C) if C else None
    return (f"or slice the replicated input, multiply locally and {c.expression} (Question 4's strategy 2): "
            f"comms {fmt_time(c.time_s)}, math {fmt_time(math_s)}, "
            f"overlapped {fmt_time(max(c.time_s, math_s or 0.0))}")


@dataclass(frozen=True)
class ArrayPrediction:
    """A bare array: what one device holds and how long reading it from HBM takes."""
    expression: str
    local_shape: tuple[int, ...]
    bytes_per_device: float
    bytes_total: float
    predicted_time_s: float | None
    formula: str

    def to_dict(self) -> dict:
        return {**asdict(self), "V_bytes": self.bytes_per_device, "regime": None, "collectives": []}


def predict_expr(expr, mesh, sizes, dtype: str, hw: Hardware, topology: str | None = None):
    """Predict an expression (text or parsed): a collective, a matmul or a bare array."""
    expr = parse(expr) if isinstance(expr, str) else expr
    if isinstance(expr, Collective):
        return cost_collective(expr, mesh, sizes, dtype, hw, topology)
    if not isinstance(expr, Array):
        return predict_matmul(expr, mesh, sizes, dtype, hw, topology)
    check(expr, mesh, sizes)
    m, (_, b) = mesh_sizes(mesh), dtype_bytes(dtype)
    shape = tuple(sizes[d.name] // math.prod(m[a] for a in d.axes) for d in expr.dims)
    per = b * math.prod(shape)
    total = per * math.prod(m.values())
    t = per / hw.hbm_bw_Bps if hw.hbm_bw_Bps else None
    txt = f"{_g(b)} B * {' * '.join(map(str, shape))} = {per:,.0f} bytes per device"
    if t is not None:
        txt += f"; read from HBM in {_g(per)} B / {_g(hw.hbm_bw_Bps)} B/s = {fmt_time(t)}"
    return ArrayPrediction(str(expr), shape, per, total, t, txt)
