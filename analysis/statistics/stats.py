"""Summary statistics of timing samples, shared by the runner (its stopping rule) and the
analysis (tables, noisy-point flags). Numpy, and scipy's exact distributions where a quantile
is needed; small callables, no state."""

from __future__ import annotations

import functools
import math

import numpy as np

# imported with the module, not at first use: the runner's stopping rule asks for an interval
# between timed samples, where a first import would land mid-measurement. scipy.special, not
# scipy.stats: the same binomial CDF and chi-square quantile (scipy.stats.binom.cdf and
# chi2.ppf call these; tests/analysis/statistics/test_stats.py holds them equal) at a third of the import
# (0.5 s against 1.8 s on 2 cores), paid by every worker and every analysis command
from scipy.special import bdtr, betainc, chdtri, stdtrit

CONFIDENCE = 0.95
Z95 = 1.959964  # the standard normal's 97.5% quantile


@functools.lru_cache(maxsize=4096)
def median_ci_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int]:
    """0-based ranks ``(lo, hi)`` of the sorted samples that bound the median with at least
    ``confidence``, from the exact binomial distribution.

    The number of samples below the true median is Binomial(n, 1/2), so ``[x_(j), x_(n+1-j)]``
    (1-based) covers it with probability ``1 - 2 P(B <= j-1)``; ``j`` is the largest rank that
    keeps that at least ``confidence``, from the binomial CDF (``scipy.special.bdtr``). That is
    scipy's sign-test interval (``scipy.stats.quantile_test(...).confidence_interval()`` on the
    ranks ``0..n-1`` themselves; tests/analysis/statistics/test_stats.py holds them equal).
    Below 6 samples no pair of ranks reaches 95% (scipy says nan), and the whole range (min,
    max) is returned. Published tables
    agree: n = 10 gives ranks 2 and 9, n = 100 gives 40 and 61 (1-based).
    """
    if n < 1:
        raise ValueError("median_ci_ranks needs at least one sample")
    # P(B <= k) from scipy's binomial; j counts the ranks whose tail stays within (1 - confidence) / 2.
    # (quantile_test itself takes ~2 ms a call, paid between the runner's timed samples for every
    # new n, where this takes ~0.3 ms; tests hold the two equal for n = 6..1000)
    cdf = bdtr(np.arange(n // 2 + 1), n, 0.5)  # scipy.stats.binom.cdf
    j = int(np.searchsorted(cdf, (1 - confidence) / 2, side="right"))
    if j == 0:
        return 0, n - 1
    return j - 1, n - j


def median_ci(samples, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Distribution-free confidence interval of the median, from order statistics.

    Needs no assumption about the shape of the distribution, which matters for timings (long
    right tails). See :func:`median_ci_ranks` for the ranks.
    """
    x = np.sort(np.asarray(samples, dtype=float))
    if x.size == 0:
        return (math.nan, math.nan)
    lo, hi = median_ci_ranks(int(x.size), confidence)
    return float(x[lo]), float(x[hi])


def rel_ci_halfwidth(samples) -> float:
    """Half the CI's width over the median: 0.05 means the median is known to +-5%."""
    med = float(np.median(samples))
    lo, hi = median_ci(samples)
    return (hi - lo) / (2 * med) if med > 0 else math.inf


def summarize(samples) -> dict:
    """Median, mean, percentiles, CV and the median's 95% CI of a list of times (seconds)."""
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


def percentiles(samples) -> dict:
    """p10, p90, p95, p99 and max of a list of times, as nccl-tests and PARAM users read them."""
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        return {}
    p10, p90, p95, p99 = np.percentile(x, [10, 90, 95, 99])
    return {"p10_s": float(p10), "p90_s": float(p90), "p95_s": float(p95), "p99_s": float(p99), "max_s": float(x.max())}


BOOTSTRAP = 2000


def combine_rounds(rounds: list, seed: int = 0, confidence: float = CONFIDENCE) -> dict:
    """One summary of samples taken in several rounds (lists of seconds, one per round).

    The point estimate is the median of the rounds' medians. Its interval is a two-level
    bootstrap: rounds are drawn with replacement, each drawn round's samples are redrawn
    with replacement, and the median of the redrawn rounds' medians is taken; the interval
    is the central ``confidence`` of those. So it covers the spread between rounds (drift,
    other points on the machine) as well as the noise within each, which one round's interval
    cannot. It is widened, where narrower, to Student's t on the log round medians with R - 1
    degrees of freedom (:func:`few_rounds_halfwidth`): a bootstrap over R rounds cannot reach
    past their extremes, which cover the rounds' centre with probability ``1 - 2**(1 - R)``
    only (50% at 2 rounds). With one round it is the order-statistic interval of
    :func:`median_ci`. A redrawn
    round's median is drawn from the round's order statistics (:func:`bootstrap_medians`, as
    the fits' bootstrap draws it): O(n) a round, where redrawing every sample cost O(n x 2000),
    1.3 s for five rounds of 5000 samples against 10 ms now.

    ``rounds_disagree`` is true when the rounds' medians differ by more than their own
    intervals allow (:func:`rounds_disagree`): a measurement that moved between rounds.
    """
    rounds = [np.asarray(r, dtype=float) for r in rounds if len(r)]
    if not rounds:
        return {"n": 0, "rounds": 0}
    pooled = np.concatenate(rounds)
    per_round = [summarize(r) for r in rounds]
    medians = np.array([s["median_s"] for s in per_round])
    out = summarize(pooled)
    out.update(percentiles(pooled))
    out["rounds"] = len(rounds)
    out["round_medians_s"] = medians.tolist()
    out["within_round_rel_ci"] = float(np.median([s["rel_ci_halfwidth"] for s in per_round]))
    out["rounds_disagree"] = rounds_disagree(per_round)
    if len(rounds) == 1:
        return out  # summarize's order-statistic interval
    med = float(np.median(medians))
    boot = bootstrap_medians(rounds, BOOTSTRAP, np.random.default_rng(seed))
    tail = 100 * (1 - confidence) / 2
    lo, hi = (float(v) for v in np.percentile(boot, [tail, 100 - tail]))
    h = few_rounds_halfwidth(medians, confidence)
    lo, hi = min(lo, med * math.exp(-h)), max(hi, med * math.exp(h))  # the estimate lies inside, by construction
    out.update(median_s=med, ci_low_s=lo, ci_high_s=hi, rel_ci_halfwidth=(hi - lo) / (2 * med) if med > 0 else math.inf)
    return out


def few_rounds_halfwidth(medians, confidence: float = CONFIDENCE) -> float:
    """Half the width, in log space, of Student's t interval of the centre of rounds whose
    medians are ``medians``: ``t(R - 1) * sd(log medians) / sqrt(R)`` (0 below 2 positive medians).

    Each round sees the machine in a state of its own (drift, other work), so R rounds are R
    draws, and a rerun's rounds are more: with few draws, the spread among them says little
    about the spread of the next, which t's R - 1 degrees of freedom account for (12.7 at 2
    rounds, 2.8 at 5), the usual remedy when a bootstrap has few clusters (Cameron, Gelbach and
    Miller, "Bootstrap-based improvements for inference with clustered errors", 2008). On 13 default
    sweeps of the 17-point AllGather on this project's 2-core machine, it made 1190 of 1326 pairs
    of intervals from different sweeps overlap, against 1123 with the bootstrap alone (docs/measuring.md)."""
    logs = np.log(np.asarray([m for m in medians if m > 0], dtype=float))
    if logs.size < 2:
        return 0.0
    return float(stdtrit(logs.size - 1, 0.5 + confidence / 2) * logs.std(ddof=1) / math.sqrt(logs.size))


def rounds_disagree(per_round: list[dict], p: float = 0.99) -> bool:
    """Whether the rounds' medians differ more than their own intervals allow: Cochran's Q on
    the log medians (each weighted by its interval's width) above the ``p`` quantile of
    chi-square with R-1 degrees of freedom (``scipy.special.chdtri``, as ``scipy.stats.chi2.ppf``;
    any ``p`` in (0, 1)). Pairwise overlap would flag almost every point of 5 rounds by chance alone."""
    if not 0 < p < 1:
        raise ValueError(f"rounds_disagree: p={p!r}; allowed: a probability strictly between 0 and 1")
    if len(per_round) < 2:
        return False
    logs, w = [], []
    for s in per_round:
        lo, hi, med = s["ci_low_s"], s["ci_high_s"], s["median_s"]
        if not (med > 0 and lo > 0 and hi > 0):
            continue
        sigma = max((math.log(hi) - math.log(lo)) / (2 * Z95), 1e-6)
        logs.append(math.log(med))
        w.append(1 / sigma**2)
    if len(logs) < 2:
        return False
    logs, w = np.asarray(logs), np.asarray(w)
    mean = float(np.sum(w * logs) / np.sum(w))
    q = float(np.sum(w * (logs - mean) ** 2))
    return q > float(chdtri(len(logs) - 1, 1 - p))  # scipy.stats.chi2.ppf(p, R - 1)


def resampled_medians(samples, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``n_boot`` draws of the median of a resample (with replacement, same size) of ``samples``.

    Drawn from the order statistics instead of by resampling, which costs O(n) per point
    instead of O(n x n_boot) (a 1 KiB point has thousands of samples a round): the resample's
    m-th smallest value (m = (n+1)//2, the median; its lower middle for an even n) is at most
    ``x_(j)`` exactly when at least m of the n draws are, which is Binomial(n, j/n) >= m, i.e.
    the regularised incomplete beta ``I_{j/n}(m, n-m+1)``. A uniform draw through that CDF picks j.
    """
    x = np.sort(np.asarray(samples, dtype=float))
    j = np.searchsorted(_median_rank_cdf(x.size), rng.random(n_boot), side="left")
    return x[np.minimum(j, x.size - 1)]


@functools.lru_cache(maxsize=256)
def _median_rank_cdf(n: int) -> np.ndarray:
    """P(the median of a size-n resample is at most the j-th smallest sample), j = 1..n: the
    same for every point with n samples, so computed once per n."""
    m = (n + 1) // 2
    return betainc(m, n - m + 1, np.arange(1, n + 1) / n)


def bootstrap_medians(rounds: list, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``n_boot`` draws of a point's estimate, the median of its rounds' medians, under the
    two-level bootstrap of :func:`combine_rounds`: rounds drawn with replacement, and each drawn
    round's median redrawn from its own samples (:func:`resampled_medians`)."""
    rounds = [np.asarray(r, dtype=float) for r in rounds if len(r)]
    if not rounds:
        raise ValueError("bootstrap_medians needs at least one round with samples")
    redrawn = np.stack([resampled_medians(r, n_boot, rng) for r in rounds], axis=1)
    if len(rounds) == 1:
        return redrawn[:, 0]
    pick = rng.integers(0, len(rounds), size=(n_boot, len(rounds)))
    return np.median(np.take_along_axis(redrawn, pick, axis=1), axis=1)


def percentile_interval(values, estimate: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The central ``confidence`` of bootstrap ``values`` (order statistics, so an infinite
    value, e.g. "no bandwidth regime in this replicate", stays infinite instead of turning the
    bound into NaN), widened to hold ``estimate``. NaN values are ignored; none left gives
    ``(estimate, estimate)``."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if not v.size:
        return estimate, estimate
    tail = (1 - confidence) / 2
    lo, hi = (float(q) for q in np.quantile(v, [tail, 1 - tail], method="inverted_cdf"))
    if estimate == estimate:
        lo, hi = min(lo, estimate), max(hi, estimate)
    return lo, hi
