"""The answer a sweep's reader wants first: per collective family, its latency floor, its
peak bus bandwidth (and how close that is to the ceiling), the size where it turns
bandwidth-bound, how it compares with the book's model, and how many points to doubt.

A table in, a table out (:func:`headline_table`); the report shows it on top and writes it
as ``headline.json``; :func:`headline_sentence` says one row in words.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.book.units import fmt_bandwidth, fmt_bytes, fmt_duration

FAMILY_KEYS = ["op", "axes", "group_size", "dtype"]
HEADLINE_COLUMNS = [
    *FAMILY_KEYS,
    "mesh",
    "points",
    "ok",
    "failed",
    "noisy",
    "unchecked",
    "flagged",
    "latency_floor_s",
    "latency_floor_from",
    "peak_busbw_Bps",
    "peak_at_V_bytes",
    "peak_share_of_ceiling",
    "bandwidth_bound_above_bytes",
    "measured_over_model_median",
]


def _count(g: pd.DataFrame, column: str, word: str) -> int:
    return int(g[column].fillna("").astype(str).str.contains(word, regex=False).sum()) if column in g else 0


def headline_table(summary: pd.DataFrame, points: pd.DataFrame, fits: pd.DataFrame) -> pd.DataFrame:
    """One row per collective family (:data:`FAMILY_KEYS`).

    ``latency_floor_s``: the fit's latency term (T_min x hops, the book's form) where the
    family has a fit, else the smallest median measured (``latency_floor_from`` says which).
    ``peak_busbw_Bps``: the largest bus bandwidth of a point the fits trust (no flag), with
    its V and its share of that point's ceiling. ``bandwidth_bound_above_bytes``: the fit's
    crossover. ``failed`` counts the failed jobs of the same op and dtype (a failed job may
    not know its group).
    """
    failed = summary[(summary["status"] != "ok")].drop_duplicates("job")
    rows = []
    for key, g in points.groupby(FAMILY_KEYS, sort=False):
        fam = dict(zip(FAMILY_KEYS, key))
        fam_failed = failed
        for k in ("op", "dtype"):
            fam_failed = fam_failed[fam_failed[k] == fam[k]]
        trusted = g[g["flags"].fillna("").astype(str).eq("")] if "flags" in g else g
        f = fits
        for k in FAMILY_KEYS:
            f = f[f[k] == fam[k]] if len(f) and k in f else f
        fit = f.iloc[0] if len(f) else None
        t_min = fit.get("T_min_s") if fit is not None else None
        if int(fam["group_size"]) == 1:  # nothing moves: no latency to speak of, only a copy's time
            floor, floor_from = float(g["time_s"].min()), "no communication (group of 1): a copy"
        elif t_min is not None and pd.notna(t_min) and pd.notna(fit.get("hops")):
            floor, floor_from = float(t_min) * float(fit["hops"]), "fit: T_min x hops"
        else:
            floor, floor_from = float(g["time_s"].min()), "smallest median measured"
        peak = trusted.loc[trusted["busbw_Bps"].idxmax()] if trusted["busbw_Bps"].notna().any() else None
        cross = fit.get("crossover_bytes") if fit is not None else None
        ratio = (
            g["measured_over_model"].replace([np.inf, -np.inf], np.nan).dropna()
            if "measured_over_model" in g
            else pd.Series(dtype=float)
        )
        rows.append(
            {
                **fam,
                "mesh": ", ".join(sorted(set(g["mesh"].astype(str)))),
                "points": int(len(g)) + int(len(fam_failed)),
                "ok": int(len(g)),
                "failed": int(len(fam_failed)),
                "noisy": _count(g, "caveats", "noisy"),
                "unchecked": _count(g, "caveats", "unchecked"),
                "flagged": int(g["flags"].fillna("").astype(str).ne("").sum()) if "flags" in g else 0,
                "latency_floor_s": floor,
                "latency_floor_from": floor_from,
                "peak_busbw_Bps": float(peak["busbw_Bps"]) if peak is not None else None,
                "peak_at_V_bytes": float(peak["V_bytes"]) if peak is not None else None,
                "peak_share_of_ceiling": float(peak["busbw_over_ceiling"])
                if peak is not None and pd.notna(peak.get("busbw_over_ceiling"))
                else None,
                "bandwidth_bound_above_bytes": float(cross) if cross is not None and pd.notna(cross) else None,
                "measured_over_model_median": float(ratio.median()) if len(ratio) else None,
            }
        )
    return pd.DataFrame(rows, columns=HEADLINE_COLUMNS)


def family_name(row) -> str:
    """``AllGather over X (8 devices, float32)``."""
    from analysis.book.collectives import BY_OP

    op = BY_OP[row["op"]].notation if row["op"] in BY_OP else row["op"]
    n = int(row["group_size"])
    return f"{op} over {row['axes']} ({n} device{'s' if n != 1 else ''}, {row['dtype']})"


def headline_sentence(row) -> str:
    """One family's headline in words, human units."""
    if int(row["group_size"]) == 1:
        return (
            f"{family_name(row)}: no communication (group of 1): XLA runs it as a copy, "
            f"{fmt_duration(row['latency_floor_s'])} a step; collectives need at least two devices"
        )
    if str(row.get("latency_floor_from", "")).startswith("fit"):
        parts = [f"latency floor about {fmt_duration(row['latency_floor_s'])}"]
    else:  # one bandwidth-bound point is no latency floor: say what there is
        parts = [f"no fit (too few points), fastest median {fmt_duration(row['latency_floor_s'])}"]
    if row.get("peak_busbw_Bps") is not None and pd.notna(row.get("peak_busbw_Bps")):
        share = row.get("peak_share_of_ceiling")
        parts.append(
            f"peak bus bandwidth {fmt_bandwidth(row['peak_busbw_Bps'])} at {fmt_bytes(row['peak_at_V_bytes'])}"
            + (f" ({share:.0%} of its ceiling)" if share is not None and pd.notna(share) else "")
        )
    cross = row.get("bandwidth_bound_above_bytes")
    if cross is not None and pd.notna(cross):
        parts.append(f"bandwidth-bound above about {fmt_bytes(cross)}")
    ratio = row.get("measured_over_model_median")
    if ratio is not None and pd.notna(ratio):
        parts.append(f"measured/model {ratio:.2g}")
    doubt = [f"{row[k]} {k}" for k in ("failed", "flagged", "noisy", "unchecked") if row.get(k)]
    return f"{family_name(row)}: " + ", ".join(parts) + (f" ({', '.join(doubt)})" if doubt else "")
