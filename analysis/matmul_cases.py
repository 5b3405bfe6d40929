"""Sharded matmul points against the book's cases: tables only (the report section that shows
them is :mod:`analysis.report.matmul_section`).

For every matmul point: which of the book's four cases it is and the collectives the book
prescribes (:func:`analysis.book.matmul_cost.predict_matmul`), the collectives XLA emitted (from the
summary's HLO rows), a mark where they differ and why, the measured time beside T_math,
T_comms, their max and sum, the FLOP/s achieved, and how much collective time overlapped
compute in the trace. A sweep that runs the chapter's Question 4 strategies over a dim also
gets the crossover: measured, and where the model puts it.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pandas as pd

from analysis.book.collectives import BY_NOTATION
from analysis.book.dtypes import dtype_bytes
from analysis.book.errors import BookError
from analysis.book.hardware import Hardware, load_hardware
from analysis.book.matmul_cost import predict_matmul
from analysis.book.notation import parse
from analysis.book.units import fmt_duration
from analysis.runs.summary import dims_of, mesh_of
from analysis.strategy_crossover import measured_crossover, q4_table, varying_dim


def matmul_points(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per matmul point, with the collectives found in its compiled HLO."""
    mm = summary[summary["op"] == "matmul"]
    if not len(mm):
        return mm
    rows = []
    for _point, g in mm.groupby("point", sort=False):
        first = g.iloc[0].to_dict()
        kinds = (
            g.dropna(subset=["hlo_kind"]) if {"hlo_kind", "hlo_axes"} <= set(g) else g.iloc[0:0].assign(hlo_axes=None)
        )
        first["emitted"] = sorted(f"{k} over {a or '?'}" for k, a in zip(kinds["hlo_kind"], kinds["hlo_axes"]))
        rows.append(first)
    out = pd.DataFrame(rows)
    devices = pd.to_numeric(out["device_count"], errors="coerce")
    out["flops_per_s"] = pd.to_numeric(out["flops"], errors="coerce") / pd.to_numeric(out["time_s"], errors="coerce")
    out["flops_per_s_per_device"] = out["flops_per_s"] / devices
    out["intensity"] = [intensity(e, d, t) for e, d, t in zip(out["expr"], out["dims"], out["dtype"])]
    return out.reset_index(drop=True)


def intensity(expr, dims, dtype) -> float:
    """FLOPs per byte of the matmul's two inputs and its output (global sizes): where it sits
    on the roofline. NaN when the expression or dims do not parse."""
    try:
        mm, d = parse(expr), dims_of(dims)
        size = dtype_bytes(dtype)[1]
        arrays = [mm.lhs, mm.rhs] + ([mm.out] if mm.out is not None else [])
        nbytes = size * sum(np.prod([d[x.name] for x in a.dims]) for a in arrays)
        names = {x.name for a in (mm.lhs, mm.rhs) for x in a.dims}
        return float(2 * np.prod([d[n] for n in names]) / nbytes)
    except (BookError, KeyError, ValueError, TypeError, AttributeError):
        return float("nan")


def ring_pairs(points: pd.DataFrame) -> pd.DataFrame:
    """Collective matmul (``ring``) and its naive counterpart (``naive``: the same expression
    and dims, another strategy) side by side: ``expr, size, kind, time_s`` (``size`` the dim
    that varies across the pairs, else the product of the dims)."""
    ok = points[points["status"] == "ok"]
    rings = ok[ok["strategy"] == "collective_matmul"]
    rows = []
    for r in rings.itertuples():
        naive = ok[(ok["expr"] == r.expr) & (ok["dims"] == r.dims) & (ok["strategy"] != "collective_matmul")]
        if not len(naive):
            continue
        d = dims_of(r.dims)
        rows.append({"expr": r.expr, "dims": r.dims, "kind": "ring", "time_s": r.time_s, "_d": d})
        rows.append(
            {"expr": r.expr, "dims": r.dims, "kind": "naive", "time_s": float(naive["time_s"].median()), "_d": d}
        )
    out = pd.DataFrame(rows, columns=["expr", "dims", "kind", "time_s", "_d"])
    if not len(out):
        return out.drop(columns="_d").assign(size=[])
    varying = varying_dim(out["dims"])
    out["size"] = [d.get(varying) if varying else float(np.prod(list(d.values()))) for d in out["_d"]]
    return out.drop(columns="_d")


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _unit(hw: Hardware) -> Hardware:
    """Constants of 1 where the entry has none: enough to classify and list collectives."""
    return dataclasses.replace(
        hw,
        link_bw_bidir_Bps=hw.link_bw_bidir_Bps or 1.0,
        link_bw_unidir_Bps=hw.link_bw_unidir_Bps or 1.0,
        hop_latency_s=hw.hop_latency_s or 1.0,
    )


@functools.lru_cache(maxsize=1)
def _cpu() -> Hardware:
    """The ``cpu`` entry, read once: the stand-in that classifies a point when no constants are
    given (every point of a sweep asks, twice: for its case and for its d as it ran)."""
    return load_hardware("cpu")


def book_recipe(row: dict, hw: Hardware | None) -> dict:
    """The book's case, prescribed collectives and (with constants) T_math / T_comms."""
    try:
        mm = parse(row["expr"])
        base = hw or _cpu()
        precision = row.get("precision")
        precision = precision if isinstance(precision, str) else None  # NaN: a run from before the key
        p = predict_matmul(
            mm, mesh_of(row["mesh_axes"]), dims_of(row["dims"]), row["dtype"], _unit(base), None, None, precision
        )
    except (BookError, KeyError, ValueError) as exc:
        return {"case": None, "prescribed": [], "book_note": str(exc)}
    prescribed = sorted(f"{BY_NOTATION[c.expression.split('_')[0]].hlo} over {''.join(c.axes)}" for c in p.collectives)
    out = {
        "case": p.case,
        "case_text": p.case_text,
        "prescribed": prescribed,
        "book_alternatives": list(p.alternatives),
    }
    has_links = hw is not None and hw.link_bw_bidir_Bps is not None and hw.hop_latency_s is not None
    out["T_comms_s"] = p.T_comms_s if has_links else np.nan
    out["T_math_s"] = p.T_math_s if (hw is not None and p.C_flops_per_s) else np.nan
    # T_math = FLOPs / (d * C): d is the devices the product is split over, fewer than the
    # mesh's when the recipe gathers an input and every device of an axis repeats the work
    out["work_devices"], out["flops"], out["C_flops_per_s"] = p.devices, p.flops, p.C_flops_per_s
    out["bound_s"] = np.nanmax([out["T_math_s"], out["T_comms_s"]]) if has_links and p.T_math_s else np.nan
    out["serial_s"] = out["T_math_s"] + out["T_comms_s"]
    return out


def explain(prescribed: list[str], emitted: list[str], strategy: str, case: int | None) -> tuple[str, str]:
    """``("same", "")`` or ``("DIFFERS", why)`` for the book's collectives vs the HLO's."""
    if sorted(prescribed) == sorted(emitted):
        return "same", ""
    ekinds = {e.split(" over ")[0] for e in emitted}
    pkinds = {p.split(" over ")[0] for p in prescribed}
    if strategy == "collective_matmul" and ekinds == {"collective-permute"}:
        return "DIFFERS", (
            "by design: the ring replaces the prescribed collective by collective-permutes, "
            "one block per step, so each can overlap a block's multiply"
        )
    if "reduce-scatter" in pkinds and "all-reduce" in ekinds and "reduce-scatter" not in ekinds:
        return "DIFFERS", (
            "XLA reduced fully and kept a slice (all-reduce + dynamic-slice) instead of a "
            "reduce-scatter: twice the bytes the book prescribes (seen on TPU too)"
        )
    if strategy == "auto" and ekinds == {"all-reduce"} and pkinds == {"all-gather"}:
        return "DIFFERS", (
            "XLA sliced the replicated input and all-reduced the product instead of gathering "
            "(Question 4's strategy 2): the product is the smaller array to move at these dims"
        )
    if strategy == "matmul_then_allreduce" and "all-reduce" in ekinds and "all-gather" in pkinds:
        return "DIFFERS", (
            "the strategy slices the replicated input and sums partial products "
            "(Question 4's strategy 2) instead of gathering"
        )
    if strategy == "allgather_then_matmul" and ekinds <= {"all-gather"}:
        return "DIFFERS", "the strategy gathers the contracting dims instead of summing partial products"
    if strategy not in ("auto", None):
        return "DIFFERS", f"strategy {strategy} states its own collectives"
    return "DIFFERS", "XLA chose other collectives than the book's recipe"


def case_table(points: pd.DataFrame, hw: Hardware | None) -> pd.DataFrame:
    """The report's matmul table, one row per point (failed points show their error)."""
    rows = []
    for r in points.to_dict("records"):
        book = book_recipe(r, hw) if _text(r.get("expr")) and _text(r.get("dims")) else {"prescribed": [], "case": None}
        mark, why = (
            explain(book.get("prescribed", []), r["emitted"], r.get("strategy"), book.get("case"))
            if r["status"] == "ok"
            else ("", "")
        )
        rows.append(
            {
                "point": r["point"],
                "expr": r.get("expr") or "",
                "strategy": r.get("strategy"),
                "dims": r.get("dims"),
                "case": book.get("case"),
                "book prescribes": ", ".join(book.get("prescribed", [])) or "none",
                "HLO has": _counted(r["emitted"]) if r["status"] == "ok" else "",
                "match": mark,
                "why": why or _text(r.get("error"))[:200],
                "time (s)": r.get("time_s"),
                "d": book.get("work_devices"),
                "T_math (s)": book.get("T_math_s"),
                "T_comms (s)": book.get("T_comms_s"),
                "max (s)": book.get("bound_s"),
                "sum (s)": book.get("serial_s"),
                "FLOP/s": r.get("flops_per_s"),
                "trace: collective overlapped": r.get("trace_overlap_frac"),
                "status": r["status"],
            }
        )
    return pd.DataFrame(rows)


def _counted(items: list[str]) -> str:
    """``a, a, b`` -> ``a x2, b``."""
    counts = pd.Series(items, dtype=object).value_counts(sort=False)
    return ", ".join(k if n == 1 else f"{k} x{n}" for k, n in counts.items()) or "none"


SPLIT_EVERY_WAY = ("matmul_then_allreduce", "matmul_then_reducescatter", "collective_matmul")


def work_devices_as_ran(row: dict) -> float | None:
    """The devices a point's product was split over, as it ran: every device for the strategies
    that multiply local blocks (partial sums reduced after, or a ring), the book's recipe's d
    for ``auto`` (XLA's choice, which the case table compares with the recipe) and for
    ``allgather_then_matmul`` (the recipe: gather, then repeat the product along that axis)."""
    if row.get("strategy") in SPLIT_EVERY_WAY:
        return float(row["device_count"])
    d = book_recipe(row, None).get("work_devices")
    return float(d) if d else None


def measured_C(points: pd.DataFrame) -> tuple[float | None, str]:
    """C for hardware without published FLOP/s: the FLOP/s per working device of the fastest
    matmul without communication, or else of any matmul (then a lower bound), and how it was
    got. Per *working* device (FLOPs / (time x d), d the devices the product was split over as
    it ran: :func:`work_devices_as_ran`), so that an ``auto`` point C came from has a T_math equal
    to its time, and a point that split the product 8 ways is not read as 8x faster."""
    C, how, _ = _fastest(points)
    return C, how


def C_source_point(points: pd.DataFrame) -> str | None:
    """The point :func:`measured_C` took C from: its T_math equals its own time by construction,
    so it is no evidence for the model (the headline leaves it out of measured / T_math)."""
    return _fastest(points)[2]


def _fastest(points: pd.DataFrame) -> tuple[float | None, str, str | None]:
    """(C, how it was got, the point it came from): see :func:`measured_C`."""
    ok = points[points["status"] == "ok"]
    if not len(ok):
        return None, "", None
    d = pd.Series([work_devices_as_ran(r) for r in ok.to_dict("records")], index=ok.index, dtype=float)
    d = d.fillna(pd.to_numeric(ok["device_count"], errors="coerce"))
    per_worker = pd.to_numeric(ok["flops"], errors="coerce") / (pd.to_numeric(ok["time_s"], errors="coerce") * d)
    if not per_worker.notna().any():
        return None, "", None
    local = ok["emitted"].map(len) == 0
    pool = per_worker[local] if local.any() and per_worker[local].notna().any() else per_worker
    best = pool.idxmax()
    how = (
        "the fastest matmul without communication in this sweep"
        if pool is not per_worker
        else "the fastest matmul of this sweep, communication included (a lower bound: no point here ran without it)"
    )
    point = str(ok.at[best, "point"]) if "point" in ok else None  # a table built by hand may name no points
    return float(pool[best]), how, point


def model_hardware(
    points: pd.DataFrame, model_hw: Hardware | None
) -> tuple[Hardware | None, float | None, str, str | None]:
    """The constants the matmul tables use: ``model_hw`` (else the entry the points ran on), with
    C measured here (:func:`measured_C`) where the entry publishes no FLOP/s; the measured C
    (or None), a note on what is measured or missing, for the report to print, and the point C
    came from where the tables use it (None where C is published)."""
    hw_name = points["hardware"].dropna().mode()
    hw = model_hw or (load_hardware(hw_name.iloc[0]) if len(hw_name) else None)
    C, how, source = _fastest(points)
    note, c_point = "", None
    if hw is not None and C and not hw.flops_per_s:
        hw = dataclasses.replace(hw, flops_per_s={d: C for d in set(points["dtype"].dropna())})
        c_point = source
        note = (
            f" `{hw.name}` has no published FLOP/s: C = {C:.3g} FLOP/s per device, from `{source}`, {how} "
            "(its FLOPs over its time and its d); its own T_math equals its time by construction, so the "
            "headline's measured / model leaves it out."
        )
    if hw is not None and hw.link_bw_bidir_Bps is None:
        note += (
            f" `{hw.name}` has no link constants, so T_comms is left out: calibrate them from an "
            "AllGather sweep (`python -m analysis calibrate`) and rebuild with `--hardware NAME`."
        )
    return hw, C, note, c_point


def matmul_headline(points: pd.DataFrame, table: pd.DataFrame, c_point: str | None = None) -> list[str]:
    """The answer a matmul sweep's reader wants first, in a few sentences: how many ran, whether
    XLA emitted the collectives the book prescribes, the best compute rate, how the measured
    times compare with the book's max(T_math, T_comms), and Question 4's and collective
    matmul's verdicts where the sweep ran them. ``table``: :func:`case_table` of ``points``;
    ``c_point``: the point C was measured from (:func:`C_source_point`), left out of measured / model."""
    ok = table[table["status"] == "ok"]
    said = [f"{len(table)} matmul points: {len(ok)} ok, {len(table) - len(ok)} failed"]
    if len(ok):
        differs = ok[ok["match"] == "DIFFERS"]
        said[0] += (
            f"; the compiled HLO has the collectives the book prescribes in {len(ok) - len(differs)} of {len(ok)}"
            + (f" (the other {len(differs)}: by design or XLA's choice, see the case table)" if len(differs) else "")
        )
        rate = pd.to_numeric(ok["FLOP/s"], errors="coerce")
        if rate.notna().any():
            best = ok.loc[rate.idxmax()]
            said.append(
                f"fastest: `{best['point']}` ({best['strategy']}) at {rate.max() / 1e9:.3g} GFLOP/s "
                f"in {fmt_duration(best['time (s)'])}"
            )
        bound = pd.to_numeric(ok["max (s)"], errors="coerce")
        t_math = pd.to_numeric(ok["T_math (s)"], errors="coerce")
        model = bound.where(bound.notna(), t_math)
        ratio = (pd.to_numeric(ok["time (s)"], errors="coerce") / model)[ok["point"] != c_point].dropna()
        if len(ratio):
            what = "max(T_math, T_comms)" if bound.notna().any() else "T_math (no link constants for T_comms)"
            said.append(
                f"measured / the book's {what}: median {ratio.median():.2g} over {len(ratio)} "
                + ("point" if len(ratio) == 1 else "points")
                + (
                    f" (leaving out `{c_point}`, whose time gave C)"
                    if c_point is not None and (ok["point"] == c_point).any()
                    else ""
                )
            )
    q4 = q4_table(points)
    for expr, g in q4.groupby("expr"):
        cross, dim = measured_crossover(g), g["dim"].iloc[0]
        said.append(
            f"Question 4 (`{expr}`): multiply-then-AllReduce "
            + (
                f"starts to win at {dim} ≈ {cross:.0f}"
                if cross
                else f"{'always' if (g['ratio_2_over_1'] < 1).all() else 'never'} wins over {dim} = "
                f"{g['value'].min():.0f}..{g['value'].max():.0f}"
            )
        )
    pairs = ring_pairs(points)
    if len(pairs):
        t = pairs.pivot_table(index=["expr", "dims"], columns="kind", values="time_s")
        r = (t["ring"] / t["naive"]).median()
        said.append(
            f"collective matmul: the ring takes {r:.2g}x the naive time (median of {len(t)} size"
            f"{'s' if len(t) != 1 else ''}; "
            f"{'faster' if r < 1 else 'no faster'} here)"
        )
    return [x[0].upper() + x[1:] + "." for x in said]


@dataclasses.dataclass(frozen=True)
class Matmuls:
    """A sweep's matmul points, analysed once for the headline and the report's section:
    ``points`` (:func:`matmul_points`), ``table`` (:func:`case_table`), and the constants, the
    measured C and the note of :func:`model_hardware`."""

    points: pd.DataFrame
    table: pd.DataFrame
    hw: Hardware | None
    C: float | None
    note: str
    C_point: str | None = None  # the point C was measured from, where the tables use a measured C

    @property
    def headline(self) -> list[str]:
        return matmul_headline(self.points, self.table, self.C_point)


def load_matmuls(summary: pd.DataFrame, model_hw: Hardware | None) -> Matmuls | None:
    """The sweep's matmuls (None when it ran none)."""
    points = matmul_points(summary)
    if not len(points):
        return None
    hw, C, note, c_point = model_hardware(points, model_hw)
    return Matmuls(points, case_table(points, hw), hw, C, note, c_point)
