"""The scaling book's cost model (Part 3) for collectives: the time of one collective over
mesh axes on a chip (:func:`predict_collective`; one written in the notation is
:mod:`analysis.book.notation_cost`). One fabric's formulas (rings, lines, a
switch) live in :mod:`analysis.book.fabric_cost`; this module picks the fabric and, for a group
that crosses a domain boundary, combines the levels.

Conventions (see the seeds for derivations):

* ``V_bytes`` is what one device sees of the array the collective works on: the gathered
  result (AllGather), the unreduced input (ReduceScatter, AllReduce), the array before it is
  resharded (AllToAll); in each case sharded over the *other* mesh axes only.
* Inside one domain (a torus slice, an NVLink switch, the host): the one-fabric formula, and
  AllReduce = ReduceScatter + AllGather = 2x.
* Across domains (GPU nodes over InfiniBand, TPU slices over DCN; ``--topology
  nodes=2,gpus_per_node=8`` or ``slices=2``), as the book's GPU chapter prices cross-node
  collectives: a ReduceScatter runs inside each domain on V, then across domains on
  V / (devices per domain), each level over its own W (AllGather the same steps reversed);
  the levels overlap, so T = max over levels (the serial sum is shown too). AllReduce = 2x.
  AllToAll: each device sends V/N^2 to every peer at once; the peers outside its domain are
  reached over the scale-out link, which bounds it: T = max over levels of
  V/N^2 * (peers reached at that level) / W_level.
* A group larger than the hardware's largest domain (``domain_size``) with no topology saying
  how it spans is priced as if it filled domains in order, and flagged in ``note``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from analysis.book import collectives
from analysis.book.errors import HardwareError, NotationError
from analysis.book.fabric_cost import ring_line_cost, switch_cost
from analysis.book.hardware import Hardware, calibrated_for, wraparound_for
from analysis.book.placement import Placement
from analysis.book.topology import Fabric, Layout, fabrics_for, split_axes
from analysis.book.units import fmt_num, fmt_time

__all__ = [
    "CollectivePrediction",
    "Span",
    "predict_collective",
    "active_axes",
    "placed_group",
]


def active_axes(axis_sizes: Sequence[int]) -> int:
    """How many mesh axes a collective really runs over: axes of size 1 move nothing."""
    return sum(1 for n in axis_sizes if int(n) > 1)


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
    levels: tuple[dict, ...] = ()  # across domains: each level's network, devices, V and times

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Span:
    """A group's extent at one level of the network (innermost first): ``sizes`` per mesh axis
    of the collective, ``rings`` whether each is a ring (torus levels)."""

    fabric: Fabric
    sizes: tuple[int, ...]
    rings: tuple[bool, ...] = ()
    own_w: tuple = ()  # per axis: None (the chip's links) or a W of its own (a chip's two cores)

    @property
    def n(self) -> int:
        return math.prod(self.sizes)


def predict_collective(
    kind: str,
    V_bytes: float,
    axis_sizes: Sequence[int],
    hw: Hardware,
    wraparound: Sequence[bool] | None = None,
    spans: Sequence[Span] | None = None,
    own_w: Sequence[float | None] | None = None,
) -> CollectivePrediction:
    """Predict one collective over mesh axes of ``axis_sizes`` (``wraparound`` per axis; by
    default from the hardware's rule with each mesh axis its own physical axis). ``spans``
    says how the group lies over the network's levels (:class:`CostContext` derives them from
    ``--topology``); without them, a group larger than ``hw.domain_size`` is assumed to fill
    domains in order, and the prediction's ``note`` says so."""

    row = collectives.kind(kind)
    k = row.op
    sizes = [int(s) for s in axis_sizes]
    if hw.kind == "auto" or hw.interconnect is None:
        raise HardwareError(f"hardware {hw.name!r} names no chip: pick one (e.g. tpu_v5e, h100, cpu)")
    rings = [bool(r) for r in (wraparound if wraparound is not None else wraparound_for(hw, sizes))]
    if len(rings) != len(sizes):
        raise NotationError(f"wraparound {list(rings)} does not match axis sizes {sizes}")
    # Axes of size 1 move nothing; dropping them keeps k (the axis count) honest.
    own = list(own_w) if own_w is not None else [None] * len(sizes)
    act = [(n, r) for n, r in zip(sizes, rings) if n > 1]
    act_own = [o for n, o in zip(sizes, own) if n > 1]  # W_core for a chip's two cores, else None
    hw = calibrated_for(hw, k, len(act))  # measured constants for this collective, if hw has them
    note = ""
    if spans is None:
        spans, note = _assumed_spans(hw, sizes, rings)
    levels = [s for s in spans or () if s.n > 1]
    if levels and not (len(levels) == 1 and levels[0] is spans[0] and spans[0].fabric.bw_attr == "link_bw_unidir_Bps"):
        return _across(k, float(V_bytes), sizes, rings, list(spans), hw, note)
    return _one_domain(row, V_bytes, sizes, rings, act, act_own, hw)


def _one_domain(row, V_bytes: float, sizes: list[int], rings: list[bool], act: list, act_own: list, hw: Hardware):
    """A collective inside one domain: the one-fabric formula over the active axes ``act``
    (``(size, ring)``, with ``act_own`` their own W or None); on a line, the book's ring answer beside it."""
    k = row.op
    base, mult = row.priced_as, row.cost_times  # AllReduce: 2 x ReduceScatter
    switch = hw.interconnect == "switch"
    if hw.interconnect == "host":
        act = [(n, True) for n, _ in act]
    if not act:
        hops, lat, bw, lat_txt, bw_txt = 0, 0.0, 0.0, "no hops", "no communication (every axis has size 1)"
    elif switch:
        hops, lat, bw, lat_txt, bw_txt = switch_cost(
            base, V_bytes, math.prod(n for n, _ in act), hw.require("hop_latency_s"), hw.require("link_bw_unidir_Bps")
        )
    else:
        hops, lat, bw, lat_txt, bw_txt = ring_line_cost(
            base, V_bytes, [n for n, _ in act], [r for _, r in act], hw, act_own
        )
    formula = f"max({lat_txt}, {bw_txt}) = max({fmt_time(lat)}, {fmt_time(bw)})"
    if mult != 1:
        formula = f"{mult} * ({collectives.BY_OP[base].notation}: {formula}) [{row.notation} = {row.cost_why}]"
    topo = (
        "switch"
        if switch
        else ("ring" if all(r for _, r in act) else "line" if not any(r for _, r in act) else "mixed")
    )
    pred = dict(
        kind=k,
        V_bytes=float(V_bytes),
        axis_sizes=tuple(sizes),
        wraparound=tuple(rings),
        topology=topo,
        hops=mult * hops,
        latency_time_s=mult * lat,
        bandwidth_time_s=mult * bw,
        time_s=mult * max(lat, bw),
        regime="latency" if lat >= bw else "bandwidth",
        formula=formula,
    )
    if topo in ("line", "mixed"):
        pred.update(_book_ring(base, mult, V_bytes, act, act_own, hw))
    return CollectivePrediction(**pred)


def _book_ring(base: str, mult: int, V_bytes: float, act: list, act_own: list, hw: Hardware) -> dict:
    """Where an axis is a line (or a chip's two cores): the book's full-ring answer and a note saying why it differs."""
    _, blat, bbw, blat_txt, bbw_txt = ring_line_cost(base, V_bytes, [n for n, _ in act], [True] * len(act), hw)
    lines = [str(n) for (n, r), o in zip(act, act_own) if not r and o is None]
    notes = []
    if any(o is not None for o in act_own):
        notes.append("the two cores of one chip: on-chip at W_core, not an ICI link")
    if lines:
        notes.append(
            f"axis of {', '.join(lines)} has no wraparound on {hw.name}: a line, so data crosses "
            "N-1 hops one way at the unidirectional bandwidth (about 2x the book's ring formula)"
        )
    return {
        "book_time_s": mult * max(blat, bbw),
        "book_formula": f"{f'{mult} * ' if mult != 1 else ''}max({blat_txt}, {bbw_txt})",
        "note": "; ".join(notes),
    }


def _assumed_spans(hw: Hardware, sizes: list[int], rings: list[bool]) -> tuple[list[Span] | None, str]:
    """A group larger than the largest domain, with no topology: domains filled in order."""
    n = math.prod(sizes)
    if not hw.domain_size or n <= hw.domain_size or hw.interconnect == "host":
        return None, ""
    fabrics = fabrics_for(hw, None, n)
    try:
        parts = split_axes(sizes, [f.block for f in fabrics])
    except NotationError:  # an axis straddles domains unevenly: take the group as one axis
        sizes, rings = [n], [False]
        parts = split_axes(sizes, [f.block for f in fabrics])
    spans = _spans(hw, fabrics, parts, sizes, rings)
    what = " x ".join(f"{s.n} {s.fabric.where} ({s.fabric.name})" for s in spans if s.n > 1)
    d = f"{hw.domain_size} device{'s' if hw.domain_size != 1 else ''}"
    return spans, (
        f"a group of {n} devices is larger than {hw.name}'s largest domain ({d}) "
        f"and no topology says how it spans: priced as {what}, assuming devices fill domains in "
        "order; give --topology nodes=A,gpus_per_node=B (GPUs) or slices=K[,slice=AxB] (TPUs)"
    )


def _spans(
    hw: Hardware, fabrics: list[Fabric], parts: list[tuple[int, ...]], sizes: Sequence[int], rings: Sequence[bool]
) -> list[Span]:
    """Spans from per-axis parts; an inner part smaller than its axis gets the chip's rule."""
    out = []
    for lvl, f in enumerate(fabrics):
        ext = tuple(p[lvl] for p in parts)
        rr = tuple(r if e == n else wraparound_for(hw, [e])[0] for e, n, r in zip(ext, sizes, rings))
        out.append(Span(f, ext, rr))
    return out


_NAMES = {
    "link_bw_unidir_Bps": ("T_min", "W"),
    "node_bw_unidir_Bps": ("T_min", "W_node"),
    "scaleout_bw_unidir_Bps": ("T_out", "W_out"),
}


def _level_cost(s: Span, base: str, V: float, v: float, n_all: int, done: int, hw: Hardware) -> tuple:
    """One level of a group across domains, ``(hops, latency, bandwidth time, their texts)``:
    ``v`` its share of ``V``, ``done`` the devices per block of the levels below it."""
    f = s.fabric
    t_name, w_name = _NAMES[f.bw_attr]
    if f.interconnect == "torus":
        own = s.own_w or (None,) * len(s.sizes)
        act = [(n, r, o) for n, r, o in zip(s.sizes, s.rings, own) if n > 1]
        hops, lat, bw, lat_txt, bw_txt = ring_line_cost(
            base, v, [n for n, _, _ in act], [r for _, r, _ in act], hw, [o for _, _, o in act]
        )
        if base == "all_to_all":
            primed = bw_txt.replace("V ", "V' ", 1)  # the slice's share: V/N^2 to each in-slice peer
            bw_txt = f"V' = V * ({s.n}/{n_all})^2 = {fmt_num(v)} B: {primed}"
    elif base == "all_to_all":
        t, w = hw.require(f.lat_attr), hw.require(f.bw_attr)
        peers = done * s.n - done
        hops, lat, bw = 1, t, V / n_all**2 * peers / w
        lat_txt = f"{t_name} * 1 step = {fmt_num(t)} s"
        bw_txt = (
            f"V/N^2 * (peers reached at this level) / {w_name} = {fmt_num(V)} B / {n_all}^2 * {peers} / "
            f"{fmt_num(w)} B/s"
        )
    else:
        hops, lat, bw, lat_txt, bw_txt = switch_cost(
            base, v, s.n, hw.require(f.lat_attr), hw.require(f.bw_attr), t_name, w_name
        )
        if done > 1:
            bw_txt = bw_txt.replace("V * ", f"V/{done} * ", 1)
    return hops, lat, bw, lat_txt, bw_txt


def _across(
    k: str, V: float, sizes: list[int], rings: list[bool], spans: list[Span], hw: Hardware, note: str
) -> CollectivePrediction:
    """A collective whose group crosses domains: each level over its own fabric (module docstring)."""
    row = collectives.BY_OP[k]
    base, mult = row.priced_as, row.cost_times  # AllReduce: 2 x ReduceScatter at each level
    n_all = math.prod(s.n for s in spans)
    levels, texts, done = [], [], 1  # done: devices per block of the levels below this one
    for s in spans:
        if s.n == 1:
            continue
        f = s.fabric
        v = V * (s.n / n_all) ** 2 if base == "all_to_all" else V / done
        hops, lat, bw, lat_txt, bw_txt = _level_cost(s, base, V, v, n_all, done, hw)
        levels.append(
            {
                "network": f.name,
                "where": f.where,
                "devices": s.n,
                "V_bytes": v,
                "hops": hops,
                "latency_time_s": lat,
                "bandwidth_time_s": bw,
                "time_s": max(lat, bw),
            }
        )
        texts.append(
            f"[{f.where}, {f.name} (N={s.n}): max({lat_txt}, {bw_txt}) = max({fmt_time(lat)}, {fmt_time(bw)})]"
        )
        done *= s.n
    lat, bw = max(lv["latency_time_s"] for lv in levels), max(lv["bandwidth_time_s"] for lv in levels)
    serial = sum(lv["time_s"] for lv in levels)
    formula = (
        f"max over levels, which overlap (the book's cross-node model): {'; '.join(texts)} = "
        f"{fmt_time(max(lat, bw))} (one after another: {fmt_time(serial)})"
    )
    if mult != 1:
        why = f"{row.notation} = {row.cost_why} at each level"
        formula = f"{mult} * ({collectives.BY_OP[base].notation}: {formula}) [{why}]"
    hops = (max if base == "all_to_all" else sum)(lv["hops"] for lv in levels)
    scaled = tuple(
        {**lv, **{key: mult * lv[key] for key in ("hops", "latency_time_s", "bandwidth_time_s", "time_s")}}
        for lv in levels
    )
    return CollectivePrediction(
        kind=k,
        V_bytes=V,
        axis_sizes=tuple(sizes),
        wraparound=tuple(rings),
        topology="hierarchical",
        hops=mult * hops,
        latency_time_s=mult * lat,
        bandwidth_time_s=mult * bw,
        time_s=mult * max(lat, bw),
        regime="latency" if lat >= bw else "bandwidth",
        formula=formula,
        note=note,
        levels=scaled,
    )


def placed_group(hw: Hardware, placement: Placement, axes: Sequence[str]) -> dict:
    """A group over mesh ``axes``, from where the axes lie (``placement``), as keyword
    arguments of :func:`predict_collective`: the chip axes it spans and whether each is a
    ring; the two cores of one chip as a line at ``core_bw_unidir_Bps`` (its own W, not an
    ICI link); and where it also spans slices, the two levels (ICI inside each slice, DCN
    across them) as spans."""
    sizes, rings = placement.links(hw.wraparound, axes)
    own: list = [None] * len(sizes)
    g = placement.group(axes)
    if g.get("core", 1) > 1:
        sizes, rings, own = [*sizes, g["core"]], [*rings, False], [*own, hw.require("core_bw_unidir_Bps")]
    out = {"axis_sizes": sizes, "wraparound": rings, "own_w": own, "spans": None}
    if g.get("slice", 1) > 1:
        inner = math.prod(sizes)
        fabrics = fabrics_for(hw, Layout("(recorded)", "slices", None, g["slice"], inner), inner * g["slice"])
        out["spans"] = [
            Span(fabrics[0], tuple(sizes), tuple(rings), tuple(own)),
            Span(fabrics[1], (g["slice"],), (True,)),
        ]
    return out
