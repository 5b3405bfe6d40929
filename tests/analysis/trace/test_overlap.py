"""The compute/collective overlap measure on synthetic intervals with known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.trace.overlap import intersection_length, merge_intervals, op_kind, overlap_by_device, overlap_summary


def ops(rows):
    df = pd.DataFrame(rows, columns=["device", "hlo_op", "start_ns", "end_ns"])
    df["iteration"] = df.groupby(["device", "hlo_op"]).cumcount()
    return df


@pytest.mark.parametrize(
    "name,kind",
    [
        ("all-gather.3", "collective"),
        ("all-reduce-start", "collective"),
        ("collective-permute-done.2", "collective"),
        ("reduce-scatter", "collective"),
        ("all_gather.3", "collective"),
        ("dot.1", "compute"),
        ("ynn_fusion", "compute"),
        ("fusion.12", "compute"),
        ("all-gather-fusion-like-name", "compute"),  # only exact op kinds count
    ],
)
def test_op_kind(name, kind):
    assert op_kind(name) == kind


def test_merge_and_intersect():
    a = merge_intervals([0, 5, 3, 20], [4, 10, 6, 25])  # [0,10) and [20,25)
    assert a.tolist() == [[0, 10], [20, 25]]
    b = merge_intervals([8, 22], [21, 30])  # [8,21) and [22,30)
    assert intersection_length(a, b) == 2 + 1 + 3  # [8,10) + [20,21) + [22,25)
    assert intersection_length(a, merge_intervals([], [])) == 0


def test_serial_collective_does_not_overlap():
    df = ops([(0, "dot.1", 0, 100), (0, "all-gather.1", 100, 150), (1, "dot.1", 0, 100), (1, "all-gather.1", 100, 160)])
    per = overlap_by_device(df)
    assert per["overlap_frac"].tolist() == [0.0, 0.0]
    assert per["collective_s"].tolist() == pytest.approx([50e-9, 60e-9])


def test_async_collective_spans_start_to_done_and_hides_under_compute():
    # collective-permute in flight from 10 to 90; two dots cover 20..60 and 70..100
    df = ops(
        [
            (0, "collective-permute-start.1", 10, 12),
            (0, "dot.1", 20, 60),
            (0, "dot.2", 70, 100),
            (0, "collective-permute-done.1", 88, 90),
        ]
    )
    per = overlap_by_device(df)
    assert per["collective_s"].iloc[0] == pytest.approx(80e-9)
    assert per["overlap_s"].iloc[0] == pytest.approx(60e-9)  # 40 + 20
    assert per["overlap_frac"].iloc[0] == pytest.approx(0.75)


def test_overlapping_ops_of_one_kind_count_once_and_summary_is_per_iteration():
    rows = []
    for it in range(2):  # two iterations, 1000 ns apart
        t = 1000 * it
        rows += [(0, "all-gather.1", t, t + 100), (0, "all-gather.2", t + 50, t + 150), (0, "dot.1", t + 100, t + 300)]
    s = overlap_summary(ops(rows))
    assert s["trace_collective_s"] == pytest.approx(150e-9)  # per iteration, merged
    assert s["trace_compute_s"] == pytest.approx(200e-9)
    assert s["trace_overlap_s"] == pytest.approx(50e-9)
    assert s["trace_overlap_frac"] == pytest.approx(1 / 3)


def test_no_collectives_gives_nan_fraction():
    per = overlap_by_device(ops([(0, "dot.1", 0, 10)]))
    assert np.isnan(per["overlap_frac"].iloc[0])
