"""Bootstrap replicates of a sweep's medians, for the intervals of everything fitted to them.

A point's time is the median of its rounds' medians (:func:`analysis.statistics.stats.combine_rounds`);
a replicate redraws it the same way, from the samples ``result.json`` keeps for the estimator
the fits use (``timing.estimator``): rounds with replacement, samples within each round.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.runs.record import Result
from analysis.statistics.stats import Z95, bootstrap_medians


def rounds_by_point(results: list[Result]) -> dict[str, list[list[float]]]:
    """``{point: samples}`` of a sweep's ok results that kept samples: their chosen estimator's,
    one list per round (:meth:`analysis.runs.record.Timing.estimator_rounds`)."""
    out = {}
    for r in results:
        found = r.timing.estimator_rounds() if r.ok and r.point is not None else []
        if found:
            out[str(r.point)] = found
    return out


def replicate_times(
    points: pd.DataFrame, rounds: dict | None, n_boot: int, rng: np.random.Generator
) -> tuple[np.ndarray | None, str]:
    """``(n_boot, len(points))`` bootstrap draws of the points' ``time_s``, and what they were
    drawn from (said in fit.json); None instead of draws when no point has samples or an
    interval (nothing to draw from: the fits then carry no intervals rather than empty ones).

    A point with samples in ``rounds`` (keyed by its ``point``) is redrawn from them
    (:func:`analysis.statistics.stats.bootstrap_medians`). One without (a table built by hand, a result
    that kept none) is drawn log-normally from its 95% interval (``time_ci_low_s``,
    ``time_ci_high_s``), and one without an interval is held at its median.
    """
    rounds = rounds or {}
    T = points["time_s"].to_numpy(float)
    draws = np.tile(T, (n_boot, 1))
    used = set()
    names = points["point"].astype(str) if "point" in points else pd.Series([None] * len(points))
    lo = points["time_ci_low_s"].to_numpy(float) if "time_ci_low_s" in points else np.full(len(T), np.nan)
    hi = points["time_ci_high_s"].to_numpy(float) if "time_ci_high_s" in points else np.full(len(T), np.nan)
    for i, name in enumerate(names):
        if name in rounds:
            draws[:, i] = bootstrap_medians(rounds[name], n_boot, rng)
            used.add("rounds")
        elif lo[i] > 0 and hi[i] >= lo[i]:
            sigma = (np.log(hi[i]) - np.log(lo[i])) / (2 * Z95)
            draws[:, i] = T[i] * np.exp(rng.normal(0.0, sigma, n_boot))
            used.add("intervals")
        else:
            used.add("none")
    if used <= {"none"}:
        return None, "nothing: no point kept samples or an interval"
    how = {
        frozenset({"rounds"}): "each point's rounds and the samples within them",
        frozenset({"intervals"}): "each point's 95% interval (log-normal; no samples kept)",
    }.get(frozenset(used), "rounds and samples where kept, else the point's interval")
    return draws, how
