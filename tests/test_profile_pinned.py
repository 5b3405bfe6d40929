"""The profile's step and collective tables pinned where a plausible-wrong version differs
(issue 30): two collectives in flight at once (hidden time over their union, not summed), an
idle gap in the step (a share of step time, not of busy time), three devices and three steps
with different times (medians, not means or maxima), an op before the first step, and a
multi-kernel op whose span exceeds its time."""

from __future__ import annotations

import pandas as pd
import pytest

import analysis.profiling.profile as prof
from analysis.hlo import parse_collectives

OPCODES = {"psum.1": "all-reduce", "psum.2": "all-reduce", "fusion.0": "fusion", "fusion.3": "fusion"}
OPCODES |= {"fusion.4": "fusion", "fusion.9": "fusion"}


def _analyse(rows, durations=None):
    """``rows``: (device, hlo_op, start_ns, end_ns); ``durations``: {row index: duration_ns} where
    an op's own time is less than its span (several kernels). All-reduces over 4 devices."""
    ops = pd.DataFrame(rows, columns=["device", "hlo_op", "start_ns", "end_ns"]).assign(hlo_module="m")
    ops["duration_ns"] = (ops["end_ns"] - ops["start_ns"]).astype(float)
    for i, d in (durations or {}).items():
        ops.loc[i, "duration_ns"] = float(d)
    ops["iteration"] = ops.groupby(["device", "hlo_op"]).cumcount()
    hlo_text = "p = f32[8]{0} parameter(0)\n" + "\n".join(
        f"{n} = f32[8]{{0}} all-reduce(p), replica_groups={{}}" for n, o in OPCODES.items() if o == "all-reduce"
    )
    colls = {"m": parse_collectives(hlo_text, num_devices=4)}
    ops = prof.assign_steps(prof.label_ops(ops, {c.name for c in colls["m"]}, OPCODES))
    steps = prof.step_table(ops)
    table = prof.collective_table(ops, prof.hlo_table(colls, None, None), steps)
    return steps, table.set_index("name")


def _layout(device: int, t0: float, tail: float) -> list:
    """One step: psum.1 50-250 and psum.2 150-300 in flight together, compute 0-100 and
    200-260, idle until fusion.4 at ``tail`` (+100)."""
    return [
        (device, "fusion.0", t0, t0 + 100),
        (device, "psum.1", t0 + 50, t0 + 250),
        (device, "psum.2", t0 + 150, t0 + 300),
        (device, "fusion.3", t0 + 200, t0 + 260),
        (device, "fusion.4", t0 + tail, t0 + tail + 100),
    ]


def _three_devices():
    rows = [(0, "psum.1", -1000, -900)]  # before the first step: not counted
    for d in range(3):
        for k in range(3):
            rows += _layout(d, 1000.0 * k, 600 if d == 2 else 400)
    return _analyse(rows)


def test_the_step_table_takes_hidden_time_over_the_union_of_collectives():
    steps, _ = _three_devices()
    assert len(steps) == 9 and sorted(steps["step"].unique()) == [0, 1, 2]
    s = steps[steps["device"] == 0].iloc[0]
    # collectives [50, 300]: 250; compute [0, 100] + [200, 260] + [400, 500]: 260;
    # hidden = [50, 100] + [200, 260] = 110 (per collective summed: 100 + 60 = 160)
    assert (s["step_s"], s["busy_s"], s["compute_s"]) == pytest.approx((500e-9, 400e-9, 260e-9))
    assert (s["collective_s"], s["hidden_s"], s["exposed_s"], s["idle_s"]) == pytest.approx(
        (250e-9, 110e-9, 140e-9, 100e-9)
    )
    assert steps[steps["device"] == 2]["idle_s"].tolist() == pytest.approx([300e-9] * 3)  # gap 300-600


def test_the_step_summary_is_the_median_over_devices():
    steps, _ = _three_devices()
    summary = prof.step_summary(steps)
    assert summary["devices"].tolist() == [3, 3, 3]
    # idle 100, 100 and 300 ns: the median 100 (the mean 167); the step 500, 500, 700: 500
    assert summary["idle_s"].tolist() == pytest.approx([100e-9] * 3)
    assert summary["step_s"].tolist() == pytest.approx([500e-9] * 3)


def test_each_collective_hides_under_compute_only_and_its_share_is_of_the_step():
    _, t = _three_devices()
    p1, p2 = t.loc["psum.1"], t.loc["psum.2"]
    assert (p1["executions"], p1["devices"], p1["executions_per_step"]) == (9, 3, 1)  # not the one before step 0
    # psum.1 50-250: under compute [50, 100] and [200, 250]: 100 hidden (not under psum.2)
    assert (p1["time_per_step_s"], p1["hidden_per_step_s"], p1["exposed_per_step_s"]) == pytest.approx(
        (200e-9, 100e-9, 100e-9)
    )
    assert p1["hidden_frac"] == pytest.approx(0.5)
    # a share of the step's 500 ns (of the 400 busy it would be 0.5); device 2: 200 / 700
    assert p1["step_share"] == pytest.approx(0.4)
    assert (p2["time_per_step_s"], p2["hidden_per_step_s"]) == pytest.approx((150e-9, 60e-9))
    # all-reduce of 32 B over 4: busbw = 32 B / 200 ns x 2 x 3 / 4
    assert p1["algbw_Bps"] == pytest.approx(32 / 200e-9) and p1["busbw_Bps"] == pytest.approx(32 / 200e-9 * 1.5)


def test_per_step_figures_are_medians_over_steps_with_uneven_counts():
    # one device: per step fusion.0 (the anchor), fusion.9 100-150 (compute), and psum.1:
    # twice 100-150, 150-200 in step 0; 100-300 in step 1; 100-700 in step 2
    rows = []
    for k, spans in enumerate(([(100, 150), (150, 200)], [(100, 300)], [(100, 700)])):
        t0 = 1000.0 * k
        rows += [(0, "fusion.0", t0, t0 + 50), (0, "fusion.9", t0 + 100, t0 + 150)]
        rows += [(0, "psum.1", t0 + a, t0 + b) for a, b in spans]
    _, t = _analyse(rows)
    p = t.loc["psum.1"]
    assert (p["executions"], p["executions_per_step"]) == (4, 1)  # per step 2, 1, 1: the median 1
    # per step 100, 200, 600 ns: the median 200 (the mean 300); each step 50 hidden
    assert (p["time_per_step_s"], p["hidden_per_step_s"]) == pytest.approx((200e-9, 50e-9))
    assert p["hidden_frac"] == pytest.approx(0.25)  # of the time per step, not per execution
    # executions 50, 50, 200, 600: median 125, 90th percentile 200 + 0.7 x 400 = 480
    assert (p["time_median_s"], p["time_p90_s"]) == pytest.approx((125e-9, 480e-9))


def test_after_arrival_is_capped_by_the_longest_device_time_and_skew_is_a_median():
    # device 0: 0-1000 with 200 ns of its own (kernels); device 1 arrives 500, 520, 590 after
    # it and runs 150 ns. After arrival min(1000 - 5xx, 200) = 200; skew 500, 520, 590: 520
    rows, durations = [], {}
    for k, late in enumerate((500, 520, 590)):
        t0 = 10_000.0 * k
        durations[len(rows)] = 200
        rows += [(0, "psum.1", t0, t0 + 1000), (1, "psum.1", t0 + late, t0 + late + 150)]
    _, t = _analyse(rows, durations)
    p = t.loc["psum.1"]
    assert p["time_after_arrival_s"] == pytest.approx(200e-9)
    assert p["time_with_waiting_s"] == pytest.approx(1000e-9)
    assert p["arrival_skew_s"] == pytest.approx(520e-9)
