"""The dispatch floor (*step* - *loop*) is never negative (issue: loop estimator free of fixed costs)."""

from __future__ import annotations

import math

import pandas as pd

from analysis.runs.summary import dispatch_floor


def test_dispatch_floor_is_the_difference_zero_within_noise_and_blank_when_the_loop_is_wholly_above():
    df = pd.DataFrame(
        {
            # us: a real floor; loop above step within the intervals; loop wholly above; no step
            "step_time_s": [300e-6, 10e-3, 10e-3, None],
            "loop_time_s": [120e-6, 10.4e-3, 13e-3, 1e-3],
            "step_ci_high_s": [320e-6, 11e-3, 11e-3, None],
            "loop_ci_low_s": [110e-6, 9.9e-3, 12e-3, 0.9e-3],
        }
    )
    got = dispatch_floor(df).tolist()
    assert math.isclose(got[0], 180e-6, rel_tol=1e-12)
    assert got[1] == 0.0
    assert math.isnan(got[2]) and math.isnan(got[3])
    assert (dispatch_floor(df).dropna() >= 0).all()


def test_dispatch_floor_without_intervals_is_blank_where_the_loop_reads_above_not_negative():
    # no interval to call it noise: the medians are all there is, and the loop's is above
    df = pd.DataFrame({"step_time_s": [1e-3, 3e-3], "loop_time_s": [2e-3, 1e-3]})
    got = dispatch_floor(df).tolist()
    assert math.isnan(got[0]) and math.isclose(got[1], 2e-3)
