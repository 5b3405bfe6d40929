"""An acceptance gate, as nccl-tests' ``check_avg_bw``: a sweep fails when a collective
family's average bus bandwidth is below a bar.

nccl-tests averages the bus bandwidth over every size it ran ("Avg bus bandwidth"); so does
this, per family (op, axes, group size, dtype), over the family's ok points in ``summary.csv``
(the estimator the report uses). Families with no ok point are not judged here: their points
failed, which fails the sweep anyway.
"""

from __future__ import annotations

import pandas as pd

from analysis.book.units import fmt_bandwidth, format_size
from analysis.headline import FAMILY_KEYS, family_name


def below_bar(summary: pd.DataFrame, min_busbw_Bps: float) -> pd.DataFrame:
    """One row per family whose average ``busbw_Bps`` is below ``min_busbw_Bps``: the family's
    keys, ``avg_busbw_Bps``, ``points`` and ``below`` (the sizes under the bar, smallest first)."""
    ok = summary[(summary["status"] == "ok") & summary["is_target"].astype(bool) & summary["busbw_Bps"].notna()]
    rows = []
    for key, g in ok.groupby(FAMILY_KEYS, sort=False, dropna=False):
        avg = float(g["busbw_Bps"].mean())
        if avg < min_busbw_Bps:
            under = g[g["busbw_Bps"] < min_busbw_Bps].sort_values("V_bytes")
            rows.append(
                {
                    **dict(zip(FAMILY_KEYS, key)),
                    "avg_busbw_Bps": avg,
                    "points": len(g),
                    "below": [format_size(v) for v in under["V_bytes"]],
                }
            )
    return pd.DataFrame(rows, columns=[*FAMILY_KEYS, "avg_busbw_Bps", "points", "below"])


def gate_message(failures: pd.DataFrame, min_busbw_Bps: float) -> str:
    """One line naming each family under the bar and its points below it."""
    parts = []
    for _, row in failures.iterrows():
        sizes = ", ".join(row["below"][:8]) + (" ..." if len(row["below"]) > 8 else "")
        parts.append(
            f"{family_name(row)} averages {fmt_bandwidth(row['avg_busbw_Bps'])} "
            f"({len(row['below'])} of {row['points']} points below: {sizes})"
        )
    return f"bus bandwidth below check.min_busbw_GBps={min_busbw_Bps / 1e9:g}: " + "; ".join(parts)
