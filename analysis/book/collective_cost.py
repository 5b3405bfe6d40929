"""The scaling book's cost model (Part 3) for collectives: the time of one collective over
mesh axes on a chip (:func:`predict_collective`), and of one written in the notation
(:class:`CostContext`, :func:`cost_collective`).

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
from dataclasses import asdict, dataclass
from typing import Sequence

from analysis.book.collectives import normalize_kind
from analysis.book.dtypes import dtype_bytes
from analysis.book.errors import HardwareError, NotationError
from analysis.book.hardware import Hardware, calibrated_for, wraparound_for, wraparound_reason
from analysis.book.notation import check, mesh_sizes
from analysis.book.units import fmt_num, fmt_time

__all__ = ["CollectivePrediction", "predict_collective", "active_axes", "CollectiveCost", "CostContext",
           "cost_collective"]

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

    def to_dict(self) -> dict:
        return asdict(self)


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
        lat_txt = f"T_min * ({hop_txt}) = {fmt_num(t_min)} s * {hops}"
    elif not any(rings) and len(sizes) == 1:
        lat_txt = f"T_min * (N-1) = {fmt_num(t_min)} s * {hops}"
    else:
        lat_txt = f"T_min * hops = {fmt_num(t_min)} s * {hops}"
    if kind == "all_to_all":
        n_all = math.prod(sizes)
        per = [n / (w_bi if r else w_uni) for n, r in zip(sizes, rings)]
        bw = V * max(per) / (4 * n_all)
        if all(rings):
            bw_txt = f"V * max(N_i) / (4 * N * W_bidi) = {fmt_num(V)} B * {max(sizes)} / (4 * {n_all} * {fmt_num(w_bi)} B/s)"
        else:
            bw_txt = (f"V * max(N_i / W_i) / (4 * N), W_i = W_bidi on a ring, W_unidir on a line "
                      f"= {fmt_num(V)} B * {fmt_num(max(per))} s/B / (4 * {n_all})")
        return hops, lat, bw, lat_txt, bw_txt
    if all(rings):
        k = len(sizes)
        return hops, lat, V / (w_bi * k), lat_txt, f"V / (W_bidi * k) = {fmt_num(V)} B / ({fmt_num(w_bi)} B/s * {k})"
    if len(sizes) == 1:
        n = sizes[0]
        return (hops, lat, (n - 1) * (V / n) / w_uni, lat_txt,
                f"(N-1) * (V/N) / W_unidir = {n - 1} * ({fmt_num(V)} B / {n}) / {fmt_num(w_uni)} B/s")
    w_eff = sum(w_bi if r else w_uni * n / (n - 1) for n, r in zip(sizes, rings))
    return (hops, lat, V / w_eff, lat_txt,
            f"V / sum(W_eff), W_eff = W_bidi on a ring, W_unidir*N/(N-1) on a line = {fmt_num(V)} B / {fmt_num(w_eff)} B/s")


def _switch(kind: str, V: float, sizes: list[int], hw: Hardware):
    t_min, w = hw.require("hop_latency_s"), hw.require("link_bw_unidir_Bps")
    n = math.prod(sizes)
    if kind == "all_to_all":
        return (1, t_min, V * (n - 1) / (n * n * w), f"T_min * 1 step = {fmt_num(t_min)} s",
                f"V * (N-1) / (N^2 * W) = {fmt_num(V)} B * {n - 1} / ({n}^2 * {fmt_num(w)} B/s)")
    return (n - 1, t_min * (n - 1), V * (n - 1) / (n * w), f"T_min * (N-1) steps = {fmt_num(t_min)} s * {n - 1}",
            f"V * (N-1) / (N * W) = {fmt_num(V)} B * {n - 1} / ({n} * {fmt_num(w)} B/s)")


def predict_collective(kind: str, V_bytes: float, axis_sizes: Sequence[int], hw: Hardware,
                       wraparound: Sequence[bool] | None = None) -> CollectivePrediction:
    """Predict one collective over mesh axes of ``axis_sizes`` (``wraparound`` per axis; by
    default from the hardware's rule with each mesh axis its own physical axis)."""

    k = normalize_kind(kind)
    sizes = [int(s) for s in axis_sizes]
    if hw.kind == "auto" or hw.interconnect is None:
        raise HardwareError(f"hardware {hw.name!r} names no chip: pick one (e.g. tpu_v5e, h100, cpu)")
    rings = [bool(r) for r in (wraparound if wraparound is not None else wraparound_for(hw, sizes))]
    if len(rings) != len(sizes):
        raise NotationError(f"wraparound {list(rings)} does not match axis sizes {sizes}")
    # Axes of size 1 move nothing; dropping them keeps k (the axis count) honest.
    act = [(n, r) for n, r in zip(sizes, rings) if n > 1]
    hw = calibrated_for(hw, k, len(act))  # measured constants for this collective, if hw has them
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


# ---------------------------------------------------------------- collectives in notation
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
class CostContext:
    """What costing expressions needs: the mesh, global dim sizes, dtype, hardware and which
    mesh axes are rings. Build it with :meth:`build`; :meth:`cost` prices one collective."""
    mesh: dict
    sizes: dict
    dtype: str
    bytes_per: float
    hw: Hardware
    rings: dict

    @classmethod
    def build(cls, mesh, sizes, dtype: str, hw: Hardware, topology: str | None) -> "CostContext":
        m = mesh_sizes(mesh)
        name, b = dtype_bytes(dtype)
        rings = dict(zip(m, wraparound_for(hw, list(m.values()), topology))) if hw.interconnect else {}
        return cls(m, dict(sizes or {}), name, b, hw, rings)

    def cost(self, coll) -> CollectiveCost:
        """V and predicted time of ``coll`` (a ``notation.Collective``), already checked."""
        full = coll.operand if coll.kind in ("ReduceScatter", "AllReduce") else coll.operand.without_axes(coll.axes)
        elems = full.local_elements(self.mesh, self.sizes)
        parts = [str(self.sizes[d.name] // math.prod(self.mesh[a] for a in d.axes)) for d in full.dims]
        v = self.bytes_per * elems
        v_txt = f"{fmt_num(self.bytes_per)} B * {' * '.join(parts)} = {v:,.0f} bytes ({v / 2**20:.4g} MiB)"
        sizes = [self.mesh[a] for a in coll.axes]
        pred = predict_collective(coll.kind, v, sizes, self.hw, [self.rings[a] for a in coll.axes])
        if self.hw.interconnect == "torus":
            why = {a: f"{'ring' if self.rings[a] else 'line'} ({wraparound_reason(self.hw, self.mesh[a])})"
                   for a in coll.axes}
        elif self.hw.interconnect == "switch":
            why = dict.fromkeys(coll.axes, "NVSwitch, every GPU one hop from every other")
        else:
            why = dict.fromkeys(coll.axes, "host, the ring formula with the fitted W and T_min")
        notes = tuple(f"{a}={self.mesh[a]}: {why[a]}" for a in coll.axes)
        return CollectiveCost(str(coll), str(coll.result()), tuple(coll.axes), v_txt, pred, notes)


def cost_collective(coll, mesh, sizes, dtype: str, hw: Hardware, topology: str | None = None) -> CollectiveCost:
    """V and predicted time of a parsed collective (``notation.Collective``) on a mesh with
    global dim sizes."""
    check(coll, mesh, sizes)
    return CostContext.build(mesh, sizes, dtype, hw, topology).cost(coll)
