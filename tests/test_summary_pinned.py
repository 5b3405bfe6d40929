"""summary.csv's flags pinned on both sides of every threshold (issue 30): a point's interval
against its ceiling's (touching is not above; the interval, not the median, on each side), an
inconsistent ceiling, page faults against every device's bus bytes, the profiler's slowdown,
the dispatch floor and share."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.runs.summary import _dispatch_share, dispatch_floor, flags

MiB = 1 << 20


def _row(**kw):
    base = {
        "status": "ok",
        "op": "all_reduce",
        "group_size": 4,
        "device_count": 4,
        "S_bytes": float(MiB),
        "missing_reason": None,
        "no_communication": None,
        "busbw_Bps": 9e9,
        "busbw_ci_low_Bps": 8e9,
        "ceiling_busbw_Bps": 10e9,
        "ceiling_ci_high_Bps": 12e9,
        "ceiling_inconsistent": None,
        "busbw_over_ceiling": 0.9,
        "page_faults_per_step": 0.0,
        "checked": True,
        "trace_command_buffers": None,
        "rounds_disagree": False,
        "noisy": False,
        "profiler_slowdown": 1.0,
    }
    return {**base, **kw}


def _flags(*rows):
    f, c = flags(pd.DataFrame(list(rows)))
    return f.tolist(), c.tolist()


def test_a_point_is_above_its_ceiling_only_when_its_interval_is_wholly_above_the_ceilings():
    above = "bus bandwidth 1.30x its ceiling (a measurement problem)"
    f, _ = _flags(
        _row(busbw_Bps=13e9, busbw_ci_low_Bps=12e9, busbw_over_ceiling=1.3),  # touching: not above
        _row(busbw_Bps=13e9, busbw_ci_low_Bps=12.1e9, busbw_over_ceiling=1.3),
        # the ceiling's interval high end, not its value (10): 11 is below it
        _row(busbw_Bps=13e9, busbw_ci_low_Bps=11e9, busbw_over_ceiling=1.3),
        # the point's interval low end, not its median (13): 11 is below 12
        _row(busbw_Bps=13e9, busbw_ci_low_Bps=11e9, busbw_over_ceiling=1.3, ceiling_ci_high_Bps=12e9),
        # no interval on either side: the values stand in (13 > 10)
        _row(busbw_Bps=13e9, busbw_ci_low_Bps=math.nan, busbw_over_ceiling=1.3, ceiling_ci_high_Bps=math.nan),
    )
    assert f == ["", above, "", "", above]


def test_above_an_inconsistent_ceiling_is_a_caveat_not_a_flag():
    f, c = _flags(
        _row(busbw_Bps=13e9, busbw_ci_low_Bps=12.5e9, busbw_over_ceiling=1.3, ceiling_inconsistent="16 KiB: a dip")
    )
    assert f == [""]
    assert c == [
        "bus bandwidth 1.30x a ceiling that is inconsistent here (16 KiB: a dip): "
        "the ceiling is in doubt, the point is kept"
    ]


def test_page_faults_against_every_devices_bus_bytes_on_both_sides():
    # AllReduce of S = 1 MiB over 4, 4 devices: 4 x 1 MiB x 2 x 3/4 = 6 MiB written a step;
    # a quarter of it, 1.5 MiB, is 384 pages of 4 KiB
    f, _ = _flags(_row(page_faults_per_step=384.0), _row(page_faults_per_step=385.0))
    assert f == ["", "page-faulting (385 minor faults a step)"]


def test_failed_and_missing_and_no_communication():
    f, _ = _flags(
        _row(status="failed", missing_reason="no device time"),  # the reason only with a time
        _row(missing_reason="no device time: the trace holds no collective"),
        _row(no_communication="group of 1"),
    )
    assert f == ["failed", "no device time: the trace holds no collective", "no communication (group of 1)"]


def test_caveats_in_order_and_the_profiler_slowdown_on_both_sides_of_5x():
    _, c = _flags(
        _row(profiler_slowdown=5.0),
        _row(profiler_slowdown=5.01, checked=False, rounds_disagree=True, noisy=True),
    )
    assert c == [
        "",
        "unchecked; its rounds disagree; noisy; trace unrepresentative: the traced step ran 5.01x the "
        "untraced one (above 5x); its timing is untraced and stands",
    ]


def test_the_dispatch_floor_reads_zero_inside_the_noise_and_blank_past_it():
    df = pd.DataFrame(
        {
            "step_time_s": [10.0, 8.0, 8.0, 8.0, np.nan],
            "loop_time_s": [8.0, 10.0, 10.0, 10.0, 1.0],
            "step_ci_high_s": [11.0, 9.0, 9.0, 9.0, np.nan],
            "loop_ci_low_s": [7.0, 8.5, 9.0, 9.5, 0.5],
        }
    )
    # 2; loop above but intervals overlap: 0; touching: 0; loop's wholly above: blank; no step: blank
    got = dispatch_floor(df).tolist()
    assert got[:3] == [2.0, 0.0, 0.0] and math.isnan(got[3]) and math.isnan(got[4])


def test_the_dispatch_share_is_blank_on_cpu_and_when_negative():
    assert _dispatch_share(0.3, "gpu") == 0.3 and _dispatch_share(0.0, "tpu") == 0.0
    assert _dispatch_share(0.3, "cpu") is None and _dispatch_share(-0.01, "gpu") is None
    assert _dispatch_share(math.nan, "gpu") is None and _dispatch_share(None, "gpu") is None


def test_a_few_stray_page_faults_do_not_flag_a_small_point():
    # AllGather S = 1 KiB over 8, 8 devices: 8 x 1 KiB x 7/8 = 7 KiB written a step, so a single
    # fault is more than a quarter of it; fewer than 32 faults a step are noise, 32 are not
    small = {"op": "all_gather", "group_size": 8, "device_count": 8, "S_bytes": 1024.0}
    f, _ = _flags(_row(**small, page_faults_per_step=0.4), _row(**small, page_faults_per_step=31.0))
    assert f == ["", ""]
    f, _ = _flags(_row(**small, page_faults_per_step=32.0))
    assert f == ["page-faulting (32 minor faults a step)"]
