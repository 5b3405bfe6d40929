"""The claims' verdicts pinned on both sides of every edge (issue 30): the band's ends are in
it, just past them is "cannot tell" until the whole interval is out; ">1" needs the interval
wholly above 1; the ratio's interval is the conservative one; a claim reads the middle point of
several and never a failed one."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.claims import FAILS, HOLDS, UNSURE, claims_table, ratio_ci, verdict


@pytest.mark.parametrize(
    "lo,hi,want",
    [
        # expected 2: the band is 2 / 1.25 = 1.6 to 2 x 1.25 = 2.5, both ends in it
        (1.6, 2.5, HOLDS),
        (1.55, 2.0, UNSURE),  # 1.55 is out of the band (2 x 0.75 = 1.5 would take it in)
        (1.6, 2.6, UNSURE),
        (1.0, 1.6, UNSURE),  # touches the band: not wholly outside
        (1.0, 1.5999, FAILS),
        (2.5, 3.0, UNSURE),
        (2.5001, 3.0, FAILS),
    ],
)
def test_the_band_of_an_expected_ratio_on_both_sides_of_each_end(lo, hi, want):
    assert verdict((lo + hi) / 2, lo, hi, 2.0) == want


@pytest.mark.parametrize(
    "lo,hi,want", [(1.0, 1.2, UNSURE), (1.0001, 1.2, HOLDS), (0.9, 1.0, FAILS), (0.9, 1.0001, UNSURE)]
)
def test_more_than_one_needs_the_interval_wholly_above_one(lo, hi, want):
    assert verdict((lo + hi) / 2, lo, hi, ">1") == want


def test_the_ratio_interval_is_the_conservative_one():
    a = pd.Series({"time_s": 2.0, "time_ci_low_s": 1.8, "time_ci_high_s": 2.4})
    b = pd.Series({"time_s": 1.0, "time_ci_low_s": 0.9, "time_ci_high_s": 1.2})
    # a's low over b's high, a's high over b's low: 1.5 to 2.667 (not 2.0 to 2.0)
    assert ratio_ci(a, b) == pytest.approx((2.0, 1.5, 2.4 / 0.9))


def _row(point, op, group, V, t, status="ok"):
    return {
        "point": point,
        "status": status,
        "op": op,
        "group_size": group,
        "V_bytes": V,
        "axes": "X",
        "n_axes": 1,
        "grad": False,
        "time_s": t,
        "time_ci_low_s": t * 0.99,
        "time_ci_high_s": t * 1.01,
        "backend": "cpu",
        "hlo_kind": "all-gather",
        "expr": None,
        "dims": None,
        "strategy": None,
    }


def test_a_claim_reads_the_middle_of_several_points_and_no_failed_one():
    big = 8 << 20
    rows = [
        _row("ag8a", "all_gather", 8, big, 1.0e-3),
        _row("ag8b", "all_gather", 8, big, 9.0e-3),
        _row("ag8c", "all_gather", 8, big, 1.2e-3),  # the middle of 1.0, 1.2 and 9.0 ms
        _row("ag2", "all_gather", 2, big, 1.2e-3),
        _row("ag2x", "all_gather", 2, big, 5e-3, status="failed"),  # would be the middle of two
        _row("ag2s", "all_gather", 2, 4096, 10e-6),
        _row("ag8s", "all_gather", 8, 4096, 30e-6),
    ]
    t = claims_table(pd.DataFrame(rows)).set_index("claim")
    same = t.loc["bandwidth-bound cost does not depend on the number of devices"]
    assert same["ratio"] == pytest.approx(1.0) and same["verdict"] == HOLDS
    small = t.loc["small buffers are latency-bound, and there more devices cost more"]
    assert small["ratio"] == pytest.approx(3.0) and small["verdict"] == HOLDS  # the smallest V, not the largest
