"""The device-op table pinned where a plausible-wrong version differs (issue 30): several
async collectives of two kinds in flight at once and finishing out of order, pairs from the HLO
that cross, an unclosed start on another device, a multi-kernel launch whose span exceeds its
time, medians over three devices and three steps, and per-step union versus sum."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.trace import TABLE_COLUMNS, device_ops, device_samples, op_steps, op_summary


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
