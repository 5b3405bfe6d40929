"""The ceiling curve pinned on both sides of its thresholds (issue 30): a dip lifted by exactly
DIP is consistent and one a little deeper is not, an interval exactly SPREAD wide is consistent,
a zero rate is no sample, and a size without samples is no neighbour to lift by."""

from __future__ import annotations

import math

import pytest

from runner.worker.copy_curve import smooth

KiB, GB = 1 << 10, 1e9
SIZES = [4 * KiB, 16 * KiB, 64 * KiB]


def _nine(center: float) -> list[float]:
    return [center * f for f in (1.0, 0.6, 1.4, 0.9, 1.1, 0.8, 1.2, 0.7, 1.3)]


def test_a_dip_lifted_by_exactly_dip_is_consistent_and_a_deeper_one_is_not():
    rows = smooth(SIZES, [_nine(8 * GB), _nine(3 * GB), _nine(6 * GB)])
    assert rows[1]["busbw_Bps"] == pytest.approx(6 * GB) and rows[1]["inconsistent"] is None  # 2.0x
    rows = smooth(SIZES, [_nine(8 * GB), _nine(2.9 * GB), _nine(6 * GB)])
    assert rows[1]["busbw_Bps"] == pytest.approx(6 * GB)
    assert rows[1]["inconsistent"] == "its median 2.9 GB/s lies 2.1x below both neighbouring sizes"


def test_an_interval_exactly_spread_wide_is_consistent_and_a_wider_one_is_not():
    # nine repeats: the median's 95% interval is ranks 2 and 8, here 1 and 10 GB/s (10x)
    even = [0.5, 1, 2, 3, 4, 5, 6, 10, 20]
    rows = smooth(SIZES, [_nine(9 * GB), [v * GB for v in even], _nine(3 * GB)])
    assert (rows[1]["ci_low_Bps"], rows[1]["ci_high_Bps"]) == pytest.approx((1 * GB, 10 * GB))
    assert rows[1]["inconsistent"] is None
    wider = [0.5, 1, 2, 3, 4, 5, 6, 10.5, 20]
    rows = smooth(SIZES, [_nine(9 * GB), [v * GB for v in wider], _nine(3 * GB)])
    assert rows[1]["inconsistent"] == "its repeats spread 1-10.5 GB/s (95% interval of the median, 9 repeats)"


def test_a_zero_rate_is_no_sample():
    rows = smooth(SIZES, [[0.0, 2 * GB, 4 * GB], [5 * GB], [5 * GB]])
    assert rows[0]["n"] == 2 and rows[0]["median_Bps"] == pytest.approx(3 * GB)


def test_a_size_without_samples_is_no_neighbour():
    # 16 KiB lies below 4 KiB's 8 GB/s, but its other neighbour has no sample: not lifted
    rows = smooth(SIZES, [_nine(8 * GB), _nine(3 * GB), []])
    assert rows[1]["busbw_Bps"] == pytest.approx(3 * GB) and rows[1]["inconsistent"] is None
    assert math.isnan(rows[2]["busbw_Bps"]) and rows[2]["inconsistent"] == "no sample"
