"""analysis.statistics.stats on scipy's exact distributions: the median's order-statistic interval is
scipy's sign-test interval, equal to the binomial ranks computed by hand before, and Cochran's Q
is held against chi-square's exact quantile (it was a Wilson-Hilferty approximation)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import quantile_test, t

from analysis.statistics.stats import (
    Z95,
    combine_rounds,
    few_rounds_halfwidth,
    median_ci,
    median_ci_ranks,
    rounds_disagree,
)


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


def test_few_rounds_are_student_t_on_their_log_medians():
    # two rounds at 1 and 2 ms: sd of the logs ln(2)/sqrt(2), over sqrt(2) rounds, times t(1)
    assert few_rounds_halfwidth([1e-3, 2e-3]) == pytest.approx(t.ppf(0.975, 1) * math.log(2) / 2)
    five = np.array([1.0, 1.1, 0.9, 1.05, 0.95]) * 1e-3
    assert few_rounds_halfwidth(five) == pytest.approx(t.ppf(0.975, 4) * np.log(five).std(ddof=1) / math.sqrt(5))
    assert few_rounds_halfwidth([1e-3]) == 0.0 and few_rounds_halfwidth([1e-3, 0.0]) == 0.0
    # the combined interval of two steady rounds is t's, around the median of their medians
    s = combine_rounds([[1e-3] * 9, [2e-3] * 9])
    h = t.ppf(0.975, 1) * math.log(2) / 2
    assert s["median_s"] == pytest.approx(1.5e-3)
    assert (s["ci_low_s"], s["ci_high_s"]) == pytest.approx((1.5e-3 * math.exp(-h), 1.5e-3 * math.exp(h)))


def test_an_interval_from_few_rounds_covers_the_centre_the_next_rounds_come_from():
    """Rounds whose medians scatter by 10% (the machine's state, round to round) around 1 ms:
    the interval of 2 or 3 of them covers 1 ms about 95% of the time. The bootstrap over the
    rounds alone cannot reach past their extremes: 2 rounds cover the centre half the time."""
    rng = np.random.default_rng(3)
    for n_rounds, least in ((2, 0.92), (3, 0.92)):
        covered = 0
        for _ in range(300):
            centres = np.exp(rng.normal(0, 0.1, n_rounds)) * 1e-3
            rounds = [c * np.exp(rng.normal(0, 0.01, 25)) for c in centres]
            s = combine_rounds(rounds, seed=int(rng.integers(1000)))
            covered += s["ci_low_s"] <= 1e-3 <= s["ci_high_s"]
        assert covered / 300 >= least, (n_rounds, covered)
