"""What ``analysis compare`` prints on the console: per shared point, both sweeps' times
in us and bus bandwidths in GB/s (the report's units), the ratio with its 95% interval, and how
many points differ; the files hold the rest."""

from __future__ import annotations

import pandas as pd

from analysis.book.units import fmt_bytes, fmt_duration

MAX_LINES = 40  # more points than this: the first ones, and the count of the rest


def _gbs(bps) -> str:
    return "" if pd.isna(bps) else f"{bps / 1e9:.3g} GB/s"


def console_summary(ratios: pd.DataFrame, max_lines: int = MAX_LINES) -> str:
    """``ratios`` (:func:`analysis.compare.ratio_table`) as lines for people."""
    out = []
    for (sweep, ref), g in ratios.groupby(["sweep", "reference"], sort=False):
        n_diff = int(g["differs"].sum())
        out.append(f"{sweep} against {ref}: {len(g)} shared points, {n_diff} differ (95% interval excludes 1)")
        for r in g.head(max_lines).itertuples():
            op = getattr(r, "op", "")
            out.append(
                f"  {op:<15s} {fmt_bytes(r.V_bytes):>9s}  "
                f"{fmt_duration(r.time_s_ref):>8s} -> {fmt_duration(r.time_s):>8s}"
                f"  x{r.time_ratio:.3g} [{r.time_ratio_ci_low:.3g}, {r.time_ratio_ci_high:.3g}]"
                f"  busbw {_gbs(r.busbw_Bps_ref)} -> {_gbs(r.busbw_Bps)}" + ("  differs" if r.differs else "")
            )
        if len(g) > max_lines:
            out.append(f"  ... and {len(g) - max_lines} more (ratios.csv)")
    return "\n".join(out)
