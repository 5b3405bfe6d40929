"""summary.csv's flags pinned on both sides of every threshold (issue 30): a point's interval
against its ceiling's (touching is not above; the interval, not the median, on each side), an
inconsistent ceiling, page faults against every device's bus bytes, the profiler's slowdown,
the dispatch floor and share.

The dispatch floor (*step* - *loop*) is never negative (issue: loop estimator free of fixed costs).

summary.csv's column order (:data:`analysis.runs.summary.COLUMN_ORDER`): first what a person
reads, as nccl-tests' table and the headline show it, then the rest a group at a time; every
column keeps its place and none is lost.

Watched failing on a planted reorder (``time_s`` and ``estimator`` swapped in FIRST_COLUMNS) and
on a planted column missing from every group (``hlo_axes``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.report.columns import SUMMARY
from analysis.runs.summary import (
    COLUMN_GROUPS,
    COLUMN_ORDER,
    FIRST_COLUMNS,
    _dispatch_share,
    dispatch_floor,
    flags,
    in_reading_order,
)

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


RESULTS_PAGE = Path(__file__).resolve().parents[3] / "docs" / "results.md"

# what a person reads first: which point, what ran, the time with its estimator and interval,
# nccl-tests' two bandwidths, the book's time beside it, and what to doubt (pinned exactly)
READ_FIRST = [
    "point",
    "status",
    "op",
    "axes",
    "size_bytes",
    "dtype",
    "mesh",
    "estimator",
    "time_s",
    "time_ci_low_s",
    "time_ci_high_s",
    "algbw_Bps",
    "busbw_Bps",
    "model_time_s",
    "flags",
    "caveats",
]


def test_the_first_columns_are_those_a_person_reads_in_that_order():
    assert list(FIRST_COLUMNS) == READ_FIRST
    assert list(COLUMN_ORDER[: len(READ_FIRST)]) == READ_FIRST


def test_every_column_has_one_place():
    assert len(COLUMN_ORDER) == len(set(COLUMN_ORDER))
    assert not set(FIRST_COLUMNS) & {c for group in COLUMN_GROUPS.values() for c in group}
    # the column dictionary (columns.md) and the order name the same columns
    assert set(COLUMN_ORDER) == set(SUMMARY)


def test_reading_order_keeps_every_column_and_its_values():
    shuffled = list(reversed(COLUMN_ORDER)) + ["a_new_column"]
    df = pd.DataFrame([{c: i for i, c in enumerate(shuffled)}])
    out = in_reading_order(df)
    assert list(out.columns) == [*COLUMN_ORDER, "a_new_column"]  # an unplaced column follows, kept
    assert out.iloc[0].to_dict() == df.iloc[0].to_dict()
    # a summary without some columns (no model, no sweep yet) keeps the order of those it has
    part = pd.DataFrame(columns=["sweep_id", "time_s", "point", "hlo_op"])
    assert list(in_reading_order(part).columns) == ["point", "time_s", "hlo_op", "sweep_id"]


def test_the_results_page_lists_the_columns_in_that_order():
    text = RESULTS_PAGE.read_text()
    section = text.split("### summary.csv's columns", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    assert [re.findall(r"`(\w+)`", row) for row in rows] == [list(FIRST_COLUMNS), *map(list, COLUMN_GROUPS.values())]


def test_the_column_dictionary_lists_them_in_the_files_order(tmp_path):
    from analysis.report.columns import write_dictionary

    md = write_dictionary(tmp_path / "columns.md").read_text()
    summary_part = md.split("## summary.csv", 1)[1].split("\n## ", 1)[0]
    listed = [line.split("`")[1] for line in summary_part.splitlines() if line.startswith("| `")]
    assert listed == list(COLUMN_ORDER)
