"""The device-op table by exact expectations (issue 30, round two's mutation check): empty
stats read as missing, a program id no module names, a launch of several kernels with its
XProf stats, dones whose start is not open, an offloaded async-done, whole-number devices,
and the skew of an op whose first start is not at 0, only where the devices share a clock
(issue 37). (Async joins in flight: test_ops_pinned.py; steps and copies: test_ops_steps.py.)"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.trace import TABLE_COLUMNS, device_ops, op_steps, op_summary
from analysis.trace.ops import OPS_COLUMNS


def _table(rows) -> pd.DataFrame:
    """``(plane, line, name, start_ns, duration_ns, hlo_op, hlo_module, ordinal, scope,
    display_name, program_id, hlo_category)``."""
    return pd.DataFrame(rows, columns=TABLE_COLUMNS).astype({"start_ns": float, "duration_ns": float})


def test_empty_stats_are_missing_and_an_unnamed_program_has_no_module():
    gpu = "/device:GPU:0"
    ops = device_ops(
        _table(
            [
                # an empty hlo_op stat: the display name; an empty module: the program's
                (gpu, "Stream #1", "k1", 0, 10, "", "", None, None, "fusion.1", "7", None),
                # program 8 is nowhere named: no module
                (gpu, "Stream #1", "k2", 20, 10, "fusion.2", None, None, None, None, "8", None),
                ("/device:TPU:0", "XLA Modules", "jit_step(7)", 0, 100, None, None, None, None, None, None, None),
            ]
        )
    )
    assert list(ops.columns) == OPS_COLUMNS and list(ops.index) == [0, 1]
    assert ops[["hlo_op", "hlo_module"]].values.tolist() == [["fusion.1", "jit_step"], ["fusion.2", ""]]
    assert ops["device"].dtype == np.int64 and ops["device"].tolist() == [0, 0]
    # no async op: nothing joined, no done
    assert ops["is_async"].tolist() == [False, False] and ops["is_async"].dtype == bool
    assert ops["done_op"].tolist() == [None, None]


def test_a_launch_of_several_kernels_keeps_its_last_name_and_first_stats():
    gpu = "/device:GPU:1"
    ops = device_ops(
        _table(
            [
                (gpu, "Stream #1", "memset", 0, 10, "custom-call.1", "jit_f", None, 5, None, "3", "gemm"),
                (gpu, "Stream #1", "gemm_kernel", 100, 50, "custom-call.1", "jit_f", None, 5, None, "4", "other"),
            ]
        )
    )
    row = ops.iloc[0]
    assert (row["name"], row["program_id"], row["hlo_category"]) == ("gemm_kernel", "3", "gemm")
    assert (row["start_ns"], row["end_ns"], row["duration_ns"], row["kernels"]) == (0.0, 150.0, 60.0, 2)
    assert row["device"] == 1 and len(ops) == 1


def _tpu(rows) -> pd.DataFrame:
    return _table([(f"/device:TPU:{d}", "XLA Ops", n, s, t, *[None] * 7) for d, n, s, t in rows])


def test_a_done_whose_start_is_not_open_is_left_alone():
    ops = device_ops(
        _tpu(
            [
                (0, "all-gather-start.1", 0, 10),
                (0, "reduce-scatter-done.2", 50, 10),  # no reduce-scatter start is open
                (0, "all-gather-done.3", 60, 10),  # the HLO pairs it with a start not in the trace
                (0, "all-gather-done.1", 80, 10),  # after both: still closes its start
            ]
        ),
        pairs={"all-gather-done.3": "all-gather-start.3"},
    )
    assert ops["hlo_op"].tolist() == ["all-gather-start.1", "reduce-scatter-done.2", "all-gather-done.3"]
    assert ops["is_async"].tolist() == [True, False, False] and ops["end_ns"].tolist() == [90.0, 60.0, 70.0]
    assert ops["done_op"][0] == "all-gather-done.1" and ops["done_op"][1:].isna().all()


def test_an_async_done_closes_the_earliest_open_start_of_any_kind():
    ops = device_ops(_tpu([(0, "all-reduce-start.1", 0, 10), (0, "fusion.2", 20, 10), (0, "async-done.9", 90, 10)]))
    assert ops["hlo_op"].tolist() == ["all-reduce-start.1", "fusion.2"]
    assert ops["is_async"].tolist() == [True, False] and ops["is_async"].dtype == bool
    assert ops["done_op"][0] == "async-done.9" and pd.isna(ops["done_op"][1])
    assert (ops["end_ns"].tolist(), ops["duration_ns"].tolist()) == ([100.0, 30.0], [100.0, 10.0])


def _cpu(rows) -> pd.DataFrame:
    """CPU op events: every device's ops on the one host plane (one clock)."""
    line = "tf_XLAPjRtCpuClient/1"
    return _table([("/host:CPU", line, n, s, t, n, "jit_f", d, None, None, None, None) for d, n, s, t in rows])


def test_the_arrival_skew_is_the_last_start_minus_the_first():
    ops = device_ops(
        _cpu([(0, "all-gather.1", 1000, 100), (1, "all-gather.1", 1030, 80), (2, "all-gather.1", 1010, 60)])
    )
    assert ops["clock"].tolist() == ["/host:CPU"] * 3
    steps = op_steps(ops)
    assert steps["arrival_skew_s"].tolist() == pytest.approx([30e-9])
    assert steps["arrival_comparable"].tolist() == [True]
    summary = op_summary(steps)
    assert list(summary.columns) == [
        "hlo_module",
        "hlo_op",
        "iterations",
        "devices",
        "op_time_s",
        "after_arrival_s",
        "with_waiting_s",
        "device_time_s",
        "arrival_skew_s",
        "arrival_comparable",
    ]
    assert summary["arrival_skew_s"].tolist() == pytest.approx([30e-9])
    assert summary["arrival_comparable"].tolist() == [True]


def test_chips_on_their_own_clocks_get_no_arrival_figures_only_device_time():
    """Issue 37 item 10: TPU chips' timestamps are each chip's own clock; subtracting one
    chip's start from another's is no skew. The same op on 3 TPUs: the arrival figures are
    NaN and say why; the device time (median duration) stands."""
    rows = [(0, "all-gather.1", 1000, 100), (1, "all-gather.1", 1030, 80), (2, "all-gather.1", 1010, 60)]
    ops = device_ops(_tpu(rows))
    assert ops["clock"].tolist() == ["/device:TPU:0", "/device:TPU:1", "/device:TPU:2"]
    st = op_steps(ops).iloc[0]
    assert not st["arrival_comparable"]
    for col in ("arrival_skew_s", "after_arrival_s", "with_waiting_s", "op_time_s"):
        assert np.isnan(st[col]), col
    assert st["device_time_s"] == pytest.approx(80e-9) and st["devices"] == 3
    summary = op_summary(op_steps(ops)).iloc[0]
    assert not summary["arrival_comparable"] and np.isnan(summary["arrival_skew_s"])
    assert summary["device_time_s"] == pytest.approx(80e-9)
    # one chip alone is on one clock: its figures stand (no skew with itself)
    one = op_steps(device_ops(_tpu(rows[:1]))).iloc[0]
    assert one["arrival_comparable"] and one["arrival_skew_s"] == 0.0
    assert one["after_arrival_s"] == pytest.approx(100e-9)


def test_a_done_on_a_device_with_nothing_open_does_not_stop_the_next_devices_joins():
    ops = device_ops(
        _tpu([(0, "all-reduce-done.5", 10, 10), (1, "all-reduce-start.5", 0, 10), (1, "all-reduce-done.5", 50, 10)])
    )
    assert ops[["device", "hlo_op", "is_async"]].values.tolist() == [
        [0, "all-reduce-done.5", False],
        [1, "all-reduce-start.5", True],
    ]
    assert ops["end_ns"].tolist() == [20.0, 60.0]
