"""The report's section on the chapter's claims (the table comes from :mod:`analysis.claims`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.claims import FAILS, HOLDS, MISSING, TOLERANCE, UNSURE, claims_table
from analysis.report.document import Report
from analysis.runs.rundir import write_text_atomic


def add_claims_section(rep: Report, summary: pd.DataFrame, root: Path) -> pd.DataFrame | None:
    """Append the claims table to ``rep`` and write ``<root>/claims.csv`` when the sweep
    holds evidence for at least two claims; return the table (or None)."""
    table = claims_table(summary)
    if (table["verdict"] != MISSING).sum() < 2:
        return None
    write_text_atomic(Path(root) / "claims.csv", table.to_csv(index=False))
    rep.heading("The chapter's claims, checked here")
    rep.text(
        f"Each claim is a ratio of two untraced medians (the interval combines their 95% CIs "
        f"conservatively) against the book's value. A verdict only where the whole interval gives it: "
        f"**{HOLDS}**: the interval lies within {TOLERANCE:.0%} of the book's value; **{FAILS}**: it lies "
        f"wholly outside that band; **{UNSURE}**: it reaches both. The two "
        "backward-pass claims are decided by the compiled HLO; their ratio is the cost side. Also in "
        "`claims.csv`."
    )
    shown = table.copy()
    shown["95% CI"] = [
        f"{lo:.3g} to {hi:.3g}" if np.isfinite(lo) else "" for lo, hi in zip(shown["ci_low"], shown["ci_high"])
    ]
    rep.table(shown[["claim", "measured", "expected", "ratio", "95% CI", "verdict", "reason"]])
    return table
