"""The scaling book's formula for one collective over ONE fabric: a torus of rings and lines
(:func:`ring_line_cost`) or a switch (:func:`switch_cost`). Each returns ``(hops, latency s,
bandwidth s, latency text, bandwidth text)``; :mod:`analysis.book.collective_cost` picks the
fabric, combines levels and doubles AllReduce.

* Rings (wraparound), k axes: ``max(T_min * sum(ceil(N_i/2)), V / (W_bidi * k))``; the book
  writes ``sum N_i / 2``, the same for even axes.
* The two cores of a chip (TPU v3, TPU7x: two JAX devices each) are a line of 2 at their own
  ``W_core`` (``core_bw_unidir_Bps``), not an ICI link.
* Lines (no wraparound): ``max(T_min * (N-1), (N-1) * (V/N) / W_unidir)``; mixed ring/line
  axes add their bandwidths, ``V / sum(W_eff_i)``, ``W_eff = W_bidi`` (ring) or
  ``W_unidir * N / (N-1)`` (line). AllToAll: ``V * max_i(N_i / W_i) / (4 * N)``.
* Switch (``W`` = one device's egress): AllGather/ReduceScatter ``V (N-1) / (N W)`` in N-1
  steps, AllToAll ``V (N-1) / (N^2 W)`` in one step.
"""

from __future__ import annotations

import math

from analysis.book.hardware import Hardware
from analysis.book.units import fmt_num

__all__ = ["ring_line_cost", "switch_cost"]


def ring_line_cost(kind: str, V: float, sizes: list[int], rings: list[bool], hw: Hardware, own_w=None):
    """(hops, latency s, bandwidth s, latency text, bandwidth text) of one ReduceScatter /
    AllGather / AllToAll over torus (or host) axes. ``own_w``: per axis None (the chip's
    links) or a one-way W of its own, a line (the two cores of one chip: ``W_core``)."""
    own = list(own_w) if own_w is not None else [None] * len(sizes)
    links = [r for r, o in zip(rings, own) if o is None]
    t_min = hw.require("hop_latency_s")
    w_bi = hw.require("link_bw_bidir_Bps") if any(links) else None
    w_link = hw.require("link_bw_unidir_Bps") if not all(links) else None
    unis = [w_link if o is None else float(o) for o in own]  # one-way W of each axis
    w_uni = unis[0] if unis else None
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
        per = [n / (w_bi if r else u) for n, r, u in zip(sizes, rings, unis)]
        bw = V * max(per) / (4 * n_all)
        if all(rings):
            bw_txt = (
                f"V * max(N_i) / (4 * N * W_bidi) = {fmt_num(V)} B * {max(sizes)} / (4 * {n_all} * {fmt_num(w_bi)} B/s)"
            )
        else:
            bw_txt = (
                f"V * max(N_i / W_i) / (4 * N), W_i = W_bidi on a ring, W_unidir on a line "
                f"= {fmt_num(V)} B * {fmt_num(max(per))} s/B / (4 * {n_all})"
            )
        return hops, lat, bw, lat_txt, bw_txt
    if all(rings) and not any(o is not None for o in own):
        k = len(sizes)
        return hops, lat, V / (w_bi * k), lat_txt, f"V / (W_bidi * k) = {fmt_num(V)} B / ({fmt_num(w_bi)} B/s * {k})"
    if len(sizes) == 1:
        n = sizes[0]
        return (
            hops,
            lat,
            (n - 1) * (V / n) / w_uni,
            lat_txt,
            f"(N-1) * (V/N) / {'W_core' if own[0] is not None else 'W_unidir'} = {n - 1} * ({fmt_num(V)} B / {n}) "
            f"/ {fmt_num(w_uni)} B/s",
        )
    w_eff = sum(w_bi if r else u * n / (n - 1) for n, r, u in zip(sizes, rings, unis))
    return (
        hops,
        lat,
        V / w_eff,
        lat_txt,
        f"V / sum(W_eff), W_eff = W_bidi on a ring, W_unidir*N/(N-1) on a line"
        f"{' (W_core between the cores of a chip)' if any(o is not None for o in own) else ''} "
        f"= {fmt_num(V)} B / {fmt_num(w_eff)} B/s",
    )


def switch_cost(kind: str, V: float, n: int, t_min: float, w: float, t_name: str = "T_min", w_name: str = "W"):
    """(steps, latency s, bandwidth s, latency text, bandwidth text) of one ReduceScatter /
    AllGather / AllToAll over ``n`` devices behind a switch of per-device egress ``w``."""
    if kind == "all_to_all":
        return (
            1,
            t_min,
            V * (n - 1) / (n * n * w),
            f"{t_name} * 1 step = {fmt_num(t_min)} s",
            f"V * (N-1) / (N^2 * {w_name}) = {fmt_num(V)} B * {n - 1} / ({n}^2 * {fmt_num(w)} B/s)",
        )
    return (
        n - 1,
        t_min * (n - 1),
        V * (n - 1) / (n * w),
        f"{t_name} * (N-1) steps = {fmt_num(t_min)} s * {n - 1}",
        f"V * (N-1) / (N * {w_name}) = {fmt_num(V)} B * {n - 1} / ({n} * {fmt_num(w)} B/s)",
    )
