"""The answer a sweep's reader wants first: per collective family, its latency floor, its
peak bus bandwidth (and how close that is to the ceiling), the size where it turns
bandwidth-bound, how it compares with the book's model, and how many points to doubt:
each number with its 95% interval, and only what the data shows.

A table in, a table out (:func:`headline_table`); the report shows it on top and writes it
as ``headline.json``; :func:`headline_sentence` says one row in words.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.book.collectives import BY_OP
from analysis.book.units import fmt_bandwidth, fmt_bytes, fmt_duration
from analysis.runs.record import ONE_ROUND

FAMILY_KEYS = ["op", "axes", "group_size", "dtype"]
REGIMES = ("latency", "bandwidth")
HEADLINE_COLUMNS = [
    *FAMILY_KEYS,
    "mesh",
    "points",
    "ok",
    "failed",
    "noisy",
    "unchecked",
    "flagged",
    "one_round",
    "latency_floor_s",
    "latency_floor_ci_low_s",
    "latency_floor_ci_high_s",
    "latency_floor_from",
    "peak_busbw_Bps",
    "peak_busbw_ci_low_Bps",
    "peak_busbw_ci_high_Bps",
    "peak_at_V_bytes",
    "peak_from",
    "peak_share_of_ceiling",
    "bandwidth_regime",
    "V_max_bytes",
    "bandwidth_bound_above_bytes",
    "bandwidth_bound_above_ci_low_bytes",
    "bandwidth_bound_above_ci_high_bytes",
    "measured_over_model_median",
    "model_self_fit",
    *[f"out_of_sample_{r}_{s}" for r in REGIMES for s in ("median", "min", "max", "points")],
]


def _count(g: pd.DataFrame, column: str, word: str) -> pd.Series:
    return g[column].fillna("").astype(str).str.contains(word, regex=False) if column in g else g.index.isna()


def _num(value):
    """A float, or None for a missing value."""
    return float(value) if value is not None and pd.notna(value) else None


def _peak(g: pd.DataFrame) -> dict:
    """The peak bus bandwidth a family's data vouches for: among the unflagged points, the one
    whose 95% interval has the highest lower end (``busbw_ci_*`` where the summary has them, else
    from the time's interval: busbw ~ 1/time; a point without one counts at its value), with
    its value and interval. A noisy point wins only when even its lower end beats every
    steady point's (``peak_from`` then says "noisy point"): a wide interval is no peak."""
    pool = g[g["flags"].fillna("").astype(str).eq("")] if "flags" in g else g
    pool = pool[pool["busbw_Bps"].notna()]
    if not len(pool):
        return {}
    lo = pool["busbw_ci_low_Bps"] if "busbw_ci_low_Bps" in pool else pd.Series(np.nan, index=pool.index)
    hi = pool["busbw_ci_high_Bps"] if "busbw_ci_high_Bps" in pool else pd.Series(np.nan, index=pool.index)
    if {"time_ci_low_s", "time_ci_high_s"} <= set(pool):
        lo = lo.fillna(pool["busbw_Bps"] * pool["time_s"] / pool["time_ci_high_s"])
        hi = hi.fillna(pool["busbw_Bps"] * pool["time_s"] / pool["time_ci_low_s"])
    best = lo.fillna(pool["busbw_Bps"]).idxmax()
    p = pool.loc[best]
    return {
        "peak_busbw_Bps": float(p["busbw_Bps"]),
        "peak_busbw_ci_low_Bps": _num(lo[best]),
        "peak_busbw_ci_high_Bps": _num(hi[best]),
        "peak_at_V_bytes": float(p["V_bytes"]),
        "peak_from": "noisy point" if _count(pool.loc[[best]], "caveats", "noisy").any() else "steady point",
        "peak_share_of_ceiling": _num(p.get("busbw_over_ceiling")),
    }


def _by_regime(g: pd.DataFrame) -> dict:
    """The spread of the out-of-sample measured/model (``measured_over_model_cv``, else
    ``measured_over_model``) among the points the model calls latency-bound and bandwidth-bound."""
    col = "measured_over_model_cv" if "measured_over_model_cv" in g else "measured_over_model"
    out = {}
    for regime in REGIMES:
        r = (
            g.loc[g.get("model_regime", pd.Series(index=g.index, dtype=object)) == regime, col]
            if col in g
            else pd.Series(dtype=float)
        )
        r = r.replace([np.inf, -np.inf], np.nan).dropna()
        out.update(
            {
                f"out_of_sample_{regime}_median": float(r.median()) if len(r) else None,
                f"out_of_sample_{regime}_min": float(r.min()) if len(r) else None,
                f"out_of_sample_{regime}_max": float(r.max()) if len(r) else None,
                f"out_of_sample_{regime}_points": int(len(r)),
            }
        )
    return out


def headline_table(summary: pd.DataFrame, points: pd.DataFrame, fits: pd.DataFrame) -> pd.DataFrame:
    """One row per collective family (:data:`FAMILY_KEYS`).

    ``latency_floor_s``: the median time of the points the fit calls latency-bound (the fit's
    ``latency_floor_s``, with its bootstrap interval), else the smallest median measured
    (``latency_floor_from`` says which). ``peak_busbw_Bps``: the unflagged point whose interval
    has the highest lower end (:func:`_peak`).
    ``bandwidth_bound_above_bytes``: the fit's crossover, only when the family has a bandwidth
    regime (``bandwidth_regime``; else None, and the sentence says "no bandwidth regime in
    range"). ``measured_over_model_median`` is against the model as the report uses it (a
    self-fit where ``model_self_fit``); ``out_of_sample_*`` give the out-of-sample ratio's
    median, range and count by the model's regime. ``failed`` counts the failed points of the
    same op and dtype (a failed point may not know its group).
    """
    failed = summary[(summary["status"] != "ok")].drop_duplicates("point")
    rows = []
    for key, g in points.groupby(FAMILY_KEYS, sort=False):
        fam = dict(zip(FAMILY_KEYS, key))
        fam_failed = failed
        for k in ("op", "dtype"):
            fam_failed = fam_failed[fam_failed[k] == fam[k]]
        f = fits
        for k in FAMILY_KEYS:
            f = f[f[k] == fam[k]] if len(f) and k in f else f
        fit = f.iloc[0] if len(f) else pd.Series(dtype=object)
        row = {**fam, "latency_floor_ci_low_s": None, "latency_floor_ci_high_s": None}
        if int(fam["group_size"]) == 1:  # nothing moves: no latency to speak of, only a copy's time
            row.update(
                latency_floor_s=float(g["time_s"].min()), latency_floor_from="no communication (group of 1): a copy"
            )
        elif pd.notna(fit.get("latency_floor_s")):
            row.update(
                latency_floor_s=float(fit["latency_floor_s"]),
                latency_floor_ci_low_s=_num(fit.get("latency_floor_ci_low_s")),
                latency_floor_ci_high_s=_num(fit.get("latency_floor_ci_high_s")),
                latency_floor_from="fit: median of its latency-bound points",
            )
        else:
            row.update(latency_floor_s=float(g["time_s"].min()), latency_floor_from="smallest median measured")
        regime = bool(fit.get("bandwidth_regime")) if pd.notna(fit.get("bandwidth_regime")) else False
        ratio = (
            g["measured_over_model"].replace([np.inf, -np.inf], np.nan).dropna()
            if "measured_over_model" in g
            else pd.Series(dtype=float)
        )
        row.update(
            {
                "mesh": ", ".join(sorted(set(g["mesh"].astype(str)))),
                "points": int(len(g)) + int(len(fam_failed)),
                "ok": int(len(g)),
                "failed": int(len(fam_failed)),
                "noisy": int(_count(g, "caveats", "noisy").sum()),
                "unchecked": int(_count(g, "caveats", "unchecked").sum()),
                "flagged": int(g["flags"].fillna("").astype(str).ne("").sum()) if "flags" in g else 0,
                # timed in one round (timing=quick): their intervals say nothing of run-to-run drift
                "one_round": int((pd.to_numeric(g["time_rounds"], errors="coerce") == 1).sum())
                if "time_rounds" in g
                else 0,
                **_peak(g),
                "bandwidth_regime": regime if "bandwidth_regime" in fit else None,
                "V_max_bytes": float(g["V_bytes"].max()),
                "bandwidth_bound_above_bytes": _num(fit.get("crossover_bytes")) if regime else None,
                "bandwidth_bound_above_ci_low_bytes": _num(fit.get("crossover_ci_low_bytes")) if regime else None,
                "bandwidth_bound_above_ci_high_bytes": _num(fit.get("crossover_ci_high_bytes")) if regime else None,
                "measured_over_model_median": float(ratio.median()) if len(ratio) else None,
                "model_self_fit": bool(g["model_self_fit"].any()) if "model_self_fit" in g else False,
                **_by_regime(g),
            }
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=HEADLINE_COLUMNS)


def family_name(row) -> str:
    """``AllGather over X (8 devices, float32)``."""
    op = BY_OP[row["op"]].notation if row["op"] in BY_OP else row["op"]
    n = int(row["group_size"])
    return f"{op} over {row['axes']} ({n} device{'s' if n != 1 else ''}, {row['dtype']})"


def within(lo, hi, fmt, label: str = "") -> str:
    """`` (1.2-1.5 GB/s)`` (``label`` first: `` (95%: 1.2-1.5 GB/s)``): one unit for both ends
    where they share it; an unbounded side says so; nothing without an interval."""
    if lo is None or pd.isna(lo):
        return ""
    said = f"{label}: " if label else ""
    if hi is None or pd.isna(hi):
        return f" ({said}{fmt(lo)} or more)"
    a, b = fmt(lo), fmt(hi)
    unit = b.rsplit(" ", 1)[-1] if " " in b else ""
    if unit and a.endswith(" " + unit):
        a = a[: -len(unit) - 1]
    return f" ({said}{a}-{b})"


def _spread(row, regime: str) -> str | None:
    n = row.get(f"out_of_sample_{regime}_points")
    if not n or pd.isna(n):
        return None
    lo, hi, med = (row[f"out_of_sample_{regime}_{s}"] for s in ("min", "max", "median"))
    return f"{regime}-bound " + (f"{lo:.2g}" if int(n) == 1 else f"{lo:.2g}-{hi:.2g}, median {med:.2g}")


def _notes(*notes: str) -> str:
    """`` (a; b)`` of the non-empty notes, or nothing."""
    said = [n for n in notes if n]
    return f" ({'; '.join(said)})" if said else ""


def _is_false(value) -> bool:
    return value is not None and not (isinstance(value, float) and np.isnan(value)) and not bool(value)


def headline_sentence(row) -> str:
    """One family's headline in words, human units, each number with its 95% interval (the
    first says it is one: ``(95%: 417-494 us)``; short enough for one console line)."""
    labelled = []

    def ci(lo, hi, fmt) -> str:
        said = within(lo, hi, fmt, "" if labelled else "95%")
        if said:
            labelled.append(True)
        return said

    if int(row["group_size"]) == 1:
        return (
            f"{family_name(row)}: no communication (group of 1): XLA runs it as a copy, "
            f"{fmt_duration(row['latency_floor_s'])} a step; collectives need at least two devices"
        )
    if str(row.get("latency_floor_from", "")).startswith("fit"):
        parts = [
            f"latency floor about {fmt_duration(row['latency_floor_s'])}"
            + ci(row.get("latency_floor_ci_low_s"), row.get("latency_floor_ci_high_s"), fmt_duration)
        ]
    elif row.get("latency_floor_s") is None or pd.isna(row.get("latency_floor_s")):
        parts = ["no point has a time (the report lists why, under Points without a time)"]
    else:  # one bandwidth-bound point is no latency floor: say what there is
        parts = [f"no fit (too few points), fastest median {fmt_duration(row['latency_floor_s'])}"]
    if row.get("peak_busbw_Bps") is not None and pd.notna(row.get("peak_busbw_Bps")):
        share = row.get("peak_share_of_ceiling")
        parts.append(
            f"peak bus bandwidth {fmt_bandwidth(row['peak_busbw_Bps'])}"
            + ci(row.get("peak_busbw_ci_low_Bps"), row.get("peak_busbw_ci_high_Bps"), fmt_bandwidth)
            + f" at {fmt_bytes(row['peak_at_V_bytes'])}"
            + _notes(
                "a noisy point, picked by its interval's lower end" if row.get("peak_from") == "noisy point" else "",
                f"{share:.0%} of ceiling" if share is not None and pd.notna(share) else "",
            )
        )
    cross = row.get("bandwidth_bound_above_bytes")
    if cross is not None and pd.notna(cross):
        parts.append(
            f"bandwidth-bound above about {fmt_bytes(cross)}"
            + ci(
                row.get("bandwidth_bound_above_ci_low_bytes"), row.get("bandwidth_bound_above_ci_high_bytes"), fmt_bytes
            )
        )
    elif _is_false(row.get("bandwidth_regime")):
        parts.append(f"no bandwidth regime in range (to {fmt_bytes(row['V_max_bytes'])})")
    ratio = row.get("measured_over_model_median")
    if ratio is not None and pd.notna(ratio):
        # a self-fit agrees by construction: its spread is out of sample (each size against a fit
        # without it); another model's is its own, by the model's regime
        spread = "; ".join(s for s in (_spread(row, r) for r in REGIMES) if s)
        self_fit = bool(row.get("model_self_fit"))
        parts.append(
            f"measured/model {ratio:.2g}"
            + _notes("self-fit" if self_fit else "", ("out of sample: " if self_fit else "") + spread if spread else "")
        )
    doubt = [f"{row[k]} {k}" for k in ("failed", "flagged", "noisy", "unchecked") if row.get(k)]
    text = f"{family_name(row)}: " + ", ".join(parts) + (f" ({', '.join(doubt)})" if doubt else "")
    one = row.get("one_round")
    if one and pd.notna(one):  # timing=quick: say what its intervals do not cover
        ok = int(row.get("ok") or 0)
        text += f"; {ONE_ROUND}" if int(one) >= ok else f"; {int(one)} of {ok} point(s) in {ONE_ROUND}"
    return text
