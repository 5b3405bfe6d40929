"""analysis.statistics.stats on scipy's exact distributions: the median's order-statistic interval is
scipy's sign-test interval, equal to the binomial ranks computed by hand before, and Cochran's Q
is held against chi-square's exact quantile (it was a Wilson-Hilferty approximation)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import quantile_test

from analysis.statistics.stats import Z95, median_ci, median_ci_ranks, rounds_disagree


def binomial_ranks(n: int, confidence: float = 0.95) -> tuple[int, int]:
    """The ranks as shardlab computed them before scipy: the largest j with P(B <= j-1) <= tail."""
    tail = (1 - confidence) / 2
    cdf, j = 0.0, 0
    for k in range(n // 2 + 1):
        cdf += math.comb(n, k) / 2**n
        if cdf > tail:
            break
        j = k + 1
    return (0, n - 1) if j == 0 else (j - 1, n - j)


def test_the_median_interval_is_scipys_and_todays_for_6_to_1000_samples():
    for n in range(1, 1001):
        want = binomial_ranks(n)
        assert median_ci_ranks(n) == want, n
        if n >= 6:  # below 6 no pair of ranks reaches 95%: scipy says nan, shardlab the whole range
            ci = quantile_test(np.arange(n, dtype=float), q=0, p=0.5).confidence_interval(0.95)
            assert (ci.low, ci.high) == want, n
    assert median_ci_ranks(5) == (0, 4) and median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)
    # on timings, not ranks: the interval is two of the samples, whatever their order
    x = np.array([9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0, 5.0, 10.0])  # n = 10: ranks 1 and 8
    assert median_ci(x) == (2.0, 9.0)


def rounds_with_q(q: float, sigma: float = 0.1) -> list[dict]:
    """Two rounds whose Cochran's Q is ``q``: equal log-widths sigma, log medians d apart, so
    Q = 2 (d/2)^2 / sigma^2 = d^2 / (2 sigma^2)."""
    d = math.sqrt(2 * q) * sigma
    out = []
    for log_med in (0.0, d):
        med = math.exp(log_med)
        out.append(dict(median_s=med, ci_low_s=med * math.exp(-Z95 * sigma), ci_high_s=med * math.exp(Z95 * sigma)))
    return out


@pytest.mark.parametrize(
    "q,p,disagree",
    [
        # chi2.ppf(0.99, 1) = 6.6349; Wilson-Hilferty said 6.5855, so 6.6 was flagged before
        (6.6, 0.99, False),
        (6.67, 0.99, True),
        # chi2.ppf(0.95, 1) = 3.8415 (Wilson-Hilferty 3.7469)
        (3.80, 0.95, False),
        (3.88, 0.95, True),
        # any level now, not two: chi2.ppf(0.90, 1) = 2.7055
        (2.68, 0.90, False),
        (2.73, 0.90, True),
    ],
)
def test_cochrans_q_is_held_against_chi_squares_exact_quantile(q, p, disagree):
    assert rounds_disagree(rounds_with_q(q), p) is disagree


def test_a_level_outside_0_1_is_one_error_naming_it():
    with pytest.raises(ValueError, match=r"p=1\.5; allowed: a probability strictly between 0 and 1"):
        rounds_disagree(rounds_with_q(1.0), 1.5)


@pytest.mark.parametrize("rounds", [2, 3, 5, 8])
def test_cochrans_q_threshold_is_chi_squares_for_every_round_count(rounds):
    """R rounds, half at log median -d/2 and half at +d/2 (one at 0 when R is odd), equal
    widths sigma: Q = (R - R % 2) (d/2)^2 / sigma^2. Just below and just above
    scipy.stats.chi2.ppf(0.99, R - 1)."""
    from scipy.stats import chi2

    sigma, limit = 0.1, chi2.ppf(0.99, rounds - 1)
    for q, want in ((limit * 0.999, False), (limit * 1.001, True)):
        d = 2 * sigma * math.sqrt(q / (rounds - rounds % 2))
        logs = [-d / 2, d / 2] * (rounds // 2) + [0.0] * (rounds % 2)
        per_round = [
            dict(median_s=math.exp(m), ci_low_s=math.exp(m - Z95 * sigma), ci_high_s=math.exp(m + Z95 * sigma))
            for m in logs
        ]
        assert rounds_disagree(per_round) is want, (rounds, q)


def test_the_worker_and_the_analysis_never_import_scipy_stats():
    """scipy.stats costs every worker start and every analysis command about 1.3 s more than
    the scipy.special functions analysis.statistics.stats uses (quantile_test above is the tests' own)."""
    import subprocess
    import sys

    code = (
        "import sys; import runner.worker.measure, analysis.statistics.stats, analysis.sweep; "
        "print(sorted(m for m in sys.modules if m.startswith('scipy.stats')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
