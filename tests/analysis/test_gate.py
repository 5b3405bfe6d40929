"""The acceptance gate pinned on sweeps that tell right from plausible-wrong (issue 30): two
families that differ only in dtype or group size, a failed and a non-target row that must not
count, sizes out of order, and points exactly on the bar on both sides."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.gate import below_bar, gate_message

KiB = 1 << 10


def _row(op, n, dtype, V, busbw, status="ok", target=True):
    return {
        "status": status,
        "is_target": target,
        "op": op,
        "axes": "X",
        "group_size": n,
        "dtype": dtype,
        "V_bytes": V,
        "busbw_Bps": busbw,
    }


def _sweep() -> pd.DataFrame:
    return pd.DataFrame(
        [
            # A: all_gather/8/float32, sizes out of order: mean (0.5 + 1 + 2.9 + 2) / 4 = 1.6 GB/s
            # (the median would be 1.5)
            _row("all_gather", 8, "float32", 4 * KiB, 0.5e9),
            _row("all_gather", 8, "float32", 1 * KiB, 1.0e9),
            _row("all_gather", 8, "float32", 2 * KiB, 2.9e9),
            _row("all_gather", 8, "float32", 8 * KiB, 2.0e9),  # on the bar: not "below"
            _row("all_gather", 8, "float32", 16 * KiB, 100e9, status="failed"),  # not counted
            _row("all_gather", 8, "float32", 32 * KiB, 0.1e9, target=False),  # not counted
            _row("all_gather", 8, "float32", 64 * KiB, math.nan),  # no bandwidth: not counted
            # B: the same but bfloat16: mean exactly 2 GB/s, on the bar, passes
            _row("all_gather", 8, "bfloat16", 1 * KiB, 2.0e9),
            _row("all_gather", 8, "bfloat16", 2 * KiB, 2.0e9),
            # C: the same but over 4 devices: one point, 1.9 GB/s, below
            _row("all_gather", 4, "float32", 3 * KiB, 1.9e9),
            # D: all_reduce/8/float32: mean 2 GB/s passes although one point is below
            _row("all_reduce", 8, "float32", 1 * KiB, 3.0e9),
            _row("all_reduce", 8, "float32", 2 * KiB, 1.0e9),
        ]
    )


def test_each_family_is_judged_on_its_own_ok_target_points_with_the_bar_exclusive():
    fails = below_bar(_sweep(), 2e9)
    # A and C only, in the sweep's order; B and D average exactly the bar
    assert fails[["op", "group_size", "dtype"]].values.tolist() == [
        ["all_gather", 8, "float32"],
        ["all_gather", 4, "float32"],
    ]
    assert fails["avg_busbw_Bps"].tolist() == pytest.approx([1.6e9, 1.9e9])
    # points: the family's ok target points with a bandwidth, not those below the bar
    assert fails["points"].tolist() == [4, 1]
    # below: strictly under the bar, smallest first (8 KiB at exactly 2 GB/s is not below)
    assert fails["below"].tolist() == [["1KiB", "4KiB"], ["3KiB"]]


def test_a_bar_just_above_and_just_below_a_familys_average():
    one = pd.DataFrame([_row("all_reduce", 2, "int8", 5, 1.25e9), _row("all_reduce", 2, "int8", 7, 0.75e9)])
    assert below_bar(one, 1e9).empty  # average exactly 1 GB/s
    fails = below_bar(one, 1e9 + 1)
    # only the 0.75 GB/s point is under the bar (1.25 GB/s is above it)
    assert fails["avg_busbw_Bps"].tolist() == [1e9] and fails["below"].tolist() == [["7B"]]
    assert below_bar(one, 1e9 - 1).empty


def test_no_ok_point_means_no_row_and_the_columns_stay():
    failed = pd.DataFrame([_row("all_gather", 8, "float32", KiB, 0.1e9, status="failed")])
    out = below_bar(failed, 1e9)
    assert out.empty and list(out.columns) == ["op", "axes", "group_size", "dtype", "avg_busbw_Bps", "points", "below"]


def test_the_message_names_each_family_and_cuts_the_sizes_after_eight():
    fails = below_bar(_sweep(), 2e9)
    assert gate_message(fails, 2e9) == (
        "bus bandwidth below check.min_busbw_GBps=2: "
        "AllGather over X (8 devices, float32) averages 1.6 GB/s (2 of 4 points below: 1KiB, 4KiB); "
        "AllGather over X (4 devices, float32) averages 1.9 GB/s (1 of 1 points below: 3KiB)"
    )
    eight = pd.DataFrame([_row("all_to_all", 2, "float16", (i + 1) * KiB, 1e8) for i in range(8)])
    line = gate_message(below_bar(eight, 1.25e9), 1.25e9)
    assert line.startswith("bus bandwidth below check.min_busbw_GBps=1.25: AllToAll over X (2 devices, float16)")
    assert line.endswith("(8 of 8 points below: 1KiB, 2KiB, 3KiB, 4KiB, 5KiB, 6KiB, 7KiB, 8KiB)")
    nine = pd.DataFrame([_row("all_to_all", 2, "float16", (i + 1) * KiB, 1e8) for i in range(9)])
    line = gate_message(below_bar(nine, 1.25e9), 1.25e9)
    assert line.endswith("(9 of 9 points below: 1KiB, 2KiB, 3KiB, 4KiB, 5KiB, 6KiB, 7KiB, 8KiB ...)")


def test_a_family_without_a_dtype_is_judged_and_a_0_1_target_column_counts_as_flags():
    # an imported table may leave a family's dtype empty (NaN): it is still a family; and an
    # is_target column of 0/1 (as a CSV may give it) selects the 1 rows only
    rows = [_row("all_gather", 2, math.nan, KiB, 1e9), _row("all_gather", 2, math.nan, 2 * KiB, 5e9, target=0)]
    df = pd.DataFrame(rows).astype({"is_target": "int64"})
    fails = below_bar(df, 2e9)
    assert fails[["op", "group_size", "points"]].values.tolist() == [["all_gather", 2, 1]]
    assert math.isnan(fails["dtype"][0]) and fails["avg_busbw_Bps"].tolist() == [1e9]
