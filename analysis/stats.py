"""Summary statistics of timing samples, shared by the runner (its stopping rule) and the
analysis (tables, noisy-point flags). Pure numpy; small callables, no state."""
from __future__ import annotations

import math

import numpy as np

Z95 = 1.959964


def median_ci(samples, z: float = Z95) -> tuple[float, float]:
    """Distribution-free 95% confidence interval of the median, from order statistics.

    The number of samples below the median is Binomial(n, 1/2); its normal approximation
    gives the ranks ``n/2 -+ z*sqrt(n)/2``. Needs no assumption about the shape of the
    distribution, which matters for timings (long right tails).
    """
    x = np.sort(np.asarray(samples, dtype=float))
    n = x.size
    if n == 0:
        return (math.nan, math.nan)
    half = z * math.sqrt(n) / 2
    lo = max(int(math.floor(n / 2 - half)), 0)
    hi = min(int(math.ceil(n / 2 + half)), n - 1)
    return float(x[lo]), float(x[hi])


def rel_ci_halfwidth(samples) -> float:
    """Half the CI's width over the median: 0.05 means the median is known to +-5%."""
    med = float(np.median(samples))
    lo, hi = median_ci(samples)
    return (hi - lo) / (2 * med) if med > 0 else math.inf


def summarize(samples) -> dict:
    """Median, mean, p10/p90, CV and the median's 95% CI of a list of times (seconds)."""
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        return {"n": 0}
    lo, hi = median_ci(x)
    med = float(np.median(x))
    mean = float(x.mean())
    return {
        "n": int(x.size),
        "median_s": med,
        "mean_s": mean,
        "min_s": float(x.min()),
        "p10_s": float(np.percentile(x, 10)),
        "p90_s": float(np.percentile(x, 90)),
        "std_s": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "cv": float(x.std(ddof=1) / mean) if x.size > 1 and mean > 0 else 0.0,
        "ci_low_s": lo,
        "ci_high_s": hi,
        "rel_ci_halfwidth": (hi - lo) / (2 * med) if med > 0 else math.inf,
    }
