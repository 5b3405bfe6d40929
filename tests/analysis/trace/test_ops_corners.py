"""The device-op table pinned where a plausible-wrong version differs (issue 30): several
async collectives of two kinds in flight at once and finishing out of order, pairs from the HLO
that cross, an unclosed start on another device, a multi-kernel launch whose span exceeds its
time, medians over three devices and three steps, and per-step union versus sum.

The device-op table by exact expectations (issue 30, round two's mutation check): empty
stats read as missing, a program id no module names, a launch of several kernels with its
XProf stats, dones whose start is not open, an offloaded async-done, whole-number devices,
and the skew of an op whose first start is not at 0, only where the devices share a clock
(issue 37). (Async joins in flight: above; steps and copies: tests/analysis/trace/test_steps.py.)
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.trace import TABLE_COLUMNS, device_ops, device_samples, op_steps, op_summary
from analysis.trace.ops import OPS_COLUMNS


def _tpu(rows) -> pd.DataFrame:
    """``(device, name, start_ns, duration_ns)`` on each device's XLA Ops line (names only, no
    instruction text: joins go by the HLO's pairs or by kind)."""
    out = [(f"/device:TPU:{d}", "XLA Ops", n, float(s), float(t), *[None] * 7) for d, n, s, t in rows]
    return pd.DataFrame(out, columns=TABLE_COLUMNS)


def _spans(ops) -> dict:
    done = [d if isinstance(d, str) else None for d in ops["done_op"]]  # a missing done reads as NaN
    return {(r.device, r.hlo_op): (r.start_ns, r.end_ns, r.kernels, d) for r, d in zip(ops.itertuples(), done)}


IN_FLIGHT = [
    (0, "all-gather-start.9", 0, 5),  # device 0: a start whose done the trace cut off
    (1, "all-gather-start.1", 0, 10),
    (1, "reduce-scatter-start.2", 10, 10),
    (1, "all-gather-start.3", 20, 10),
    (1, "reduce-scatter-done.2", 100, 10),
    (1, "all-gather-done.1", 200, 10),
    (1, "all-gather-done.3", 300, 10),
]


def test_without_the_hlo_a_done_closes_the_earliest_open_start_of_its_kind_on_its_device():
    ops = device_ops(_tpu(IN_FLIGHT))
    assert _spans(ops) == {
        (0, "all-gather-start.9"): (0.0, 5.0, 1, None),  # left alone: device 1's dones are not its
        (1, "all-gather-start.1"): (0.0, 210.0, 2, "all-gather-done.1"),
        (1, "reduce-scatter-start.2"): (10.0, 110.0, 2, "reduce-scatter-done.2"),
        (1, "all-gather-start.3"): (20.0, 310.0, 2, "all-gather-done.3"),
    }
    assert ops["duration_ns"].tolist() == [5.0, 210.0, 100.0, 290.0]
    assert ops["is_async"].tolist() == [False, True, True, True]


def test_the_hlo_pairs_win_over_the_order_even_when_they_cross():
    pairs = {"all-gather-done.1": "all-gather-start.3", "all-gather-done.3": "all-gather-start.1"}
    spans = _spans(device_ops(_tpu(IN_FLIGHT), pairs))
    assert spans[(1, "all-gather-start.1")] == (0.0, 310.0, 2, "all-gather-done.3")
    assert spans[(1, "all-gather-start.3")] == (20.0, 210.0, 2, "all-gather-done.1")
    assert spans[(1, "reduce-scatter-start.2")] == (10.0, 110.0, 2, "reduce-scatter-done.2")


def test_a_call_done_closes_the_earliest_open_start_of_any_kind():
    rows = [
        (0, "all-reduce-start.4", 0, 10),
        (0, "all-gather-start.5", 10, 10),
        (0, "call-done.7", 100, 30),
        (0, "all-gather-done.5", 200, 20),
    ]
    assert _spans(device_ops(_tpu(rows))) == {
        (0, "all-reduce-start.4"): (0.0, 130.0, 2, "call-done.7"),
        (0, "all-gather-start.5"): (10.0, 220.0, 2, "all-gather-done.5"),
    }


def _gpu(rows) -> pd.DataFrame:
    """``(device, op, start_ns, duration_ns, launch)`` kernels of module jit_f."""
    out = [
        (f"/device:GPU:{d}", "Stream #1", f"k{s}", float(s), float(t), op, "jit_f", None, launch, None, None, None)
        for d, op, s, t, launch in rows
    ]
    return pd.DataFrame(out, columns=TABLE_COLUMNS)


def test_op_steps_cap_after_arrival_by_the_longest_device_time_and_take_medians():
    # device 0: one launch of two kernels 0-100 and 900-1000 (200 ns of its own over a 1000 ns span);
    # device 1: 500-650; device 2: 600-610. Last arrival 600, last end 1000: 400 ns, capped at 200.
    rows = [(0, "all-reduce.1", 0, 100, 7), (0, "all-reduce.1", 900, 100, 7)]
    rows += [(1, "all-reduce.1", 500, 150, 8), (2, "all-reduce.1", 600, 10, 9)]
    on_one_clock = _gpu(rows).assign(plane="/host:CPU", line="tf_XLAPjRtCpuClient/1")
    on_one_clock["device_ordinal"] = [0, 0, 1, 2]
    ops = device_ops(on_one_clock)
    assert ops["duration_ns"].tolist() == [200.0, 150.0, 10.0] and ops["kernels"].tolist() == [2, 1, 1]
    st = op_steps(ops).iloc[0]
    assert st["devices"] == 3 and st["arrival_comparable"]
    assert st["after_arrival_s"] == pytest.approx(200e-9) and st["op_time_s"] == pytest.approx(200e-9)
    assert st["with_waiting_s"] == pytest.approx(1000e-9)  # first start to last end
    assert st["device_time_s"] == pytest.approx(150e-9)  # the median of 200, 150, 10 (mean 120)
    assert st["arrival_skew_s"] == pytest.approx(600e-9)
    # three GPUs, three clocks: the figures across devices are not computed; each one's own time is
    st = op_steps(device_ops(_gpu(rows))).iloc[0]
    assert not st["arrival_comparable"] and st[["after_arrival_s", "with_waiting_s", "arrival_skew_s"]].isna().all()
    assert st["device_time_s"] == pytest.approx(150e-9)
    # one GPU: its launch spans 1000 ns but is 200 ns of its own
    st = op_steps(device_ops(_gpu(rows[:2]))).iloc[0]
    assert st["arrival_comparable"] and st["after_arrival_s"] == pytest.approx(200e-9)


def test_op_summary_takes_the_median_over_three_steps():
    # one device, all-gather.1 in three steps of 1, 2 and 6 us: median 2 (mean 3)
    rows = [(0, "all-gather.1", 10_000 * k, d) for k, d in enumerate((1000, 2000, 6000))]
    steps = op_steps(device_ops(_tpu(rows)))
    assert steps["iteration"].tolist() == [0, 1, 2] and steps["devices"].tolist() == [1, 1, 1]
    s = op_summary(steps).iloc[0]
    assert s["iterations"] == 3
    for col in ("op_time_s", "after_arrival_s", "with_waiting_s", "device_time_s"):
        assert s[col] == pytest.approx(2e-6), col


def test_device_samples_sum_the_named_ops_per_device_and_take_the_median_over_devices():
    rows = []
    for d, (f, a) in enumerate(((100, 300), (200, 500), (50, 150))):
        for k in range(2):
            rows += [(d, "fusion.1", 10_000 * k, f), (d, "all-reduce.2", 10_000 * k + 1000, a)]
    ops = device_ops(_tpu(rows))
    # per device 400, 700, 200 ns: the median 400 (the mean 433, the largest op alone 300)
    assert device_samples(ops, {"fusion.1", "all-reduce.2"}) == pytest.approx([400e-9] * 2)
    assert device_samples(ops, {"nothing"}) == []


def test_device_samples_without_names_take_the_union_of_each_devices_ops():
    # 0-100 and 50-150 overlap: 150 ns, plus 300-400: 250 ns (their sum would be 300)
    rows = [(0, "a.1", 0, 100), (0, "b.1", 50, 100), (0, "c.1", 300, 100)]
    rows += [(1, "a.1", 0, 50), (1, "b.1", 100, 50), (1, "c.1", 200, 50)]  # 150 ns, no overlap
    rows += [(2, "a.1", 0, 1000), (2, "b.1", 10, 10), (2, "c.1", 20, 10)]  # 1000 ns, all inside a.1
    assert device_samples(device_ops(_tpu(rows))) == pytest.approx([250e-9])


def test_a_joined_pair_is_found_by_its_done_name_alone():
    rows = [(0, "all-gather-start.1", 0, 10), (0, "all-gather-done.1", 90, 10)]
    ops = device_ops(_tpu(rows))
    assert device_samples(ops, {"all-gather-done.1"}) == pytest.approx([100e-9])


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


def _tpu_table(rows) -> pd.DataFrame:
    return _table([(f"/device:TPU:{d}", "XLA Ops", n, s, t, *[None] * 7) for d, n, s, t in rows])


def test_a_done_whose_start_is_not_open_is_left_alone():
    ops = device_ops(
        _tpu_table(
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
    ops = device_ops(
        _tpu_table([(0, "all-reduce-start.1", 0, 10), (0, "fusion.2", 20, 10), (0, "async-done.9", 90, 10)])
    )
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
    ops = device_ops(_tpu_table(rows))
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
    one = op_steps(device_ops(_tpu_table(rows[:1]))).iloc[0]
    assert one["arrival_comparable"] and one["arrival_skew_s"] == 0.0
    assert one["after_arrival_s"] == pytest.approx(100e-9)


def test_a_done_on_a_device_with_nothing_open_does_not_stop_the_next_devices_joins():
    ops = device_ops(
        _tpu_table(
            [(0, "all-reduce-done.5", 10, 10), (1, "all-reduce-start.5", 0, 10), (1, "all-reduce-done.5", 50, 10)]
        )
    )
    assert ops[["device", "hlo_op", "is_async"]].values.tolist() == [
        [0, "all-reduce-done.5", False],
        [1, "all-reduce-start.5", True],
    ]
    assert ops["end_ns"].tolist() == [20.0, 60.0]
