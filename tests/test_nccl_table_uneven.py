"""nccl-tests' table on the sizes a plausible-wrong version prints differently (issue 30's
mutation check): counts that do not divide evenly (nccl-tests prints whole elements), a
collective the table has no per-rank rule for, a long time in microseconds, and bandwidth
cells that are not numbers; and a run's bandwidth with half an interval."""

from __future__ import annotations

import pandas as pd

from analysis.report.nccl_table import avg_busbw_line, nccl_count, nccl_frame


def test_counts_are_whole_elements_rounded_down():
    # 10 B of float32: 2 whole elements (not 2.5); AllGather of 7 int8 over 2 ranks: 3 each
    assert nccl_count("all_reduce", 10, 2, "float32") == 2 and type(nccl_count("all_reduce", 10, 2, "float32")) is int
    assert nccl_count("all_gather", 7, 2, "int8") == 3 and type(nccl_count("all_gather", 7, 2, "int8")) is int
    # a collective without a per-rank rule prints its whole buffer
    assert nccl_count("broadcast", 4096, 8, "float32") == 1024


def test_sizes_print_as_integers_and_a_long_time_keeps_its_last_digits():
    g = pd.DataFrame(
        {
            "op": ["all_reduce"],
            "V_bytes": [64.0 * 2**20],
            "S_bytes": [64.0 * 2**20],  # floats, as summary.csv reads them
            "group_size": [8],
            "dtype": ["float32"],
            "time_s": [0.02],  # 20 ms: 20000.00 us
            "algbw_Bps": [3.3554432e9],
            "busbw_Bps": [5.8720256e9],
            "checked": [True],
        }
    )
    t = nccl_frame(g)
    assert str(t["size"].dtype) == "int64" and t.to_string(index=False).split("\n")[1].split()[:2] == [
        "67108864",
        "16777216",
    ]
    assert t["time (us)"].tolist() == ["20000.00"]


def test_a_bandwidth_cell_that_is_not_a_number_is_skipped_in_the_average():
    assert avg_busbw_line(pd.DataFrame({"busbw_Bps": ["", "-", "3e9", 1e9]})) == "# Avg bus bandwidth    : 2 "


def test_a_run_with_one_end_of_its_interval_missing_has_no_bandwidth_interval():
    from runner.sweep.bandwidth import bandwidth

    # the key as format_version 1 wrote it (read either way)
    result = {
        "status": "ok",
        "experiment": {"op": "all_gather", "V_bytes": 8e9, "group_size": 4},
        "timing": {"summary": {"median_s": 2.0, "ci_low_s": 1.0, "ci_high_s": None}},
    }
    bw = bandwidth(result)
    assert (bw["S_bytes"], bw["algbw_Bps"], bw["busbw_Bps"]) == (8e9, 4e9, 3e9)
    assert "busbw_ci_low_Bps" not in bw and "busbw_ci_high_Bps" not in bw
