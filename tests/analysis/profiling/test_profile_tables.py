"""The profile's step and collective tables pinned where a plausible-wrong version differs
(issue 30): two collectives in flight at once (hidden time over their union, not summed), an
idle gap in the step (a share of step time, not of busy time), three devices and three steps
with different times (medians, not means or maxima), an op before the first step, and a
multi-kernel op whose span exceeds its time.

The profile's HLO table, labels, collective table order, typical step and timeline by exact
expectations (issue 30, round two's mutation check): every kind of group a collective can
have (mesh axes, not whole axes, a group of one, uneven, all devices, source-target pairs),
names that say one thing and opcodes another, a collective the trace never ran, and steps
and modules side by side. (Hidden time, shares and medians: tests/analysis/profiling/test_profile_tables.py.)
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import analysis.profiling.profile as prof
from analysis.hlo import Collective, parse_collectives

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


NAN = float("nan")
MESH = {"X": 4, "Y": 2}  # device ids 2x + y


def _c(name, kind, operand, result, groups=None, size=None, pairs=None) -> Collective:
    return Collective(
        name=name,
        kind=kind,
        computation="main",
        is_async=False,
        dtype="f32",
        operand_bytes=operand,
        result_bytes=result,
        replica_groups=groups,
        group_size=size,
        num_groups=len(groups) if groups else None,
        source_target_pairs=pairs,
        dimensions=None,
        channel_id=None,
        op_name=None,
    )


COLLECTIVES = [
    _c("ag", "all-gather", 1024, 4096, ((0, 2, 4, 6), (1, 3, 5, 7)), 4),  # over X
    _c("a2a", "all-to-all", 1000, 1000, ((0, 1), (2, 3), (4, 5), (6, 7)), 2),  # over Y
    _c("one", "all-reduce", 1024, 1024, tuple((d,) for d in range(8)), 1),  # a group of one
    _c("odd", "reduce-scatter", 4096, 2048, ((0, 3), (1, 2), (4, 7), (5, 6)), 2),  # not whole axes
    _c("uneven", "all-reduce", 1024, 1024, ((0, 1, 2), (3, 4, 5, 6, 7)), None),
    _c("all", "all-reduce", 512, 512, None, 8),  # replica_groups={}: every device
    _c("cp", "collective-permute", 256, 256, None, None, ((0, 1), (1, 0))),
]


def _plain(table: pd.DataFrame, cols) -> list[list]:
    return [[None if isinstance(v, float) and math.isnan(v) else v for v in row] for row in table[cols].values.tolist()]


def test_the_hlo_table_names_each_kind_of_group_and_its_bytes():
    t = prof.hlo_table({"m": COLLECTIVES}, MESH)
    cols = ["name", "kind", "computation", "dtype", "replica_groups", "group_size", "mesh_axes"]
    cols += ["V_bytes", "S_bytes", "busbw_factor", "model_time_s", "model_note"]
    no = "no model (no --hardware)"
    assert _plain(t, cols) == [
        ["ag", "all-gather", "main", "f32", "{{0,2,4,6},{1,3,5,7}}", 4, "X", 4096.0, 4096.0, 0.75, None, no],
        # all-to-all: V is the operand times the group; nccl-tests' S the per-rank buffer, V / n
        ["a2a", "all-to-all", "main", "f32", "{{0,1},{2,3},{4,5},{6,7}}", 2, "Y", 2000.0, 1000.0, 0.5, None, no],
        # a group of one spans no axis and moves nothing: factor 0, not unknown
        ["one", "all-reduce", "main", "f32", "{{0},{1},{2},{3},{4},{5},{6},{7}}", 1, "none", 1024.0, 1024.0, 0.0]
        + [None, no],
        ["odd", "reduce-scatter", "main", "f32", "{{0,3},{1,2},{4,7},{5,6}}", 2, "group of 2 (not whole mesh axes)"]
        + [4096.0, 4096.0, 0.5, None, no],
        # no group size: V from the operand, but no S or factor; no mesh axes either
        ["uneven", "all-reduce", "main", "f32", "{{0,1,2},{3,4,5,6,7}}", None, "uneven groups (not whole mesh axes)"]
        + [1024.0, None, None, None, no],
        ["all", "all-reduce", "main", "f32", "{}", 8, "X,Y", 512.0, 512.0, 1.75, None, no],
        ["cp", "collective-permute", "main", "f32", "{{0,1},{1,0}}", None, "2 pairs", None, None, None, None, no],
    ]
    # without a mesh: the group's size
    bare = prof.hlo_table({"m": COLLECTIVES})
    assert bare["mesh_axes"].tolist() == [
        "group of 4",
        "group of 2",
        "group of 1",
        "group of 2",
        "uneven groups",
        "group of 8",
        "2 pairs",
    ]


def test_the_model_is_asked_with_the_collective_and_the_axes_its_groups_span():
    calls = []

    def predict(c, axes):
        calls.append((c.name, axes))
        return {"model_time_s": float(len(axes)), "model_note": f"{c.name} over {','.join(axes) or '-'}"}

    t = prof.hlo_table({"m": COLLECTIVES[:2], "n": COLLECTIVES[5:]}, MESH, predict)
    assert calls == [("ag", ("X",)), ("a2a", ("Y",)), ("all", ("X", "Y")), ("cp", ())]
    assert t["hlo_module"].tolist() == ["m", "m", "n", "n"]
    assert t["model_time_s"].tolist() == [1.0, 1.0, 2.0, 0.0]
    assert t["model_note"].tolist() == ["ag over X", "a2a over Y", "all over X,Y", "cp over -"]


def test_labels_come_from_the_opcode_then_the_name_then_xprofs_category():
    ops = pd.DataFrame(
        {
            "hlo_op": ["psum.7", "all-gather.3", "all-reduce.9", "fusion.1", "fusion.2", "fusion.3"],
            "hlo_category": [NAN, "", "", "all-gather fusion", "fusion", NAN],
        }
    )
    opcodes = {"psum.7": "all-reduce", "all-reduce.9": "fusion", "fusion.1": "fusion", "fusion.2": "fusion"}
    out = prof.label_ops(ops, {"all-gather.3"}, opcodes)
    # psum.7 by its opcode; all-gather.3 as the HLO's collective; all-reduce.9 is a fusion
    # whatever its name; fusion.1 by its category
    assert out["is_collective"].tolist() == [True, True, False, True, False, False]
    assert out["is_collective"].dtype == bool
    # without opcodes, the name decides
    assert prof.label_ops(ops, set(), None)["is_collective"].tolist() == [False, True, True, True, False, False]


def _ops(rows) -> pd.DataFrame:
    """(device, hlo_op, start_ns, end_ns, is_collective, step), module m, one execution each."""
    ops = pd.DataFrame(rows, columns=["device", "hlo_op", "start_ns", "end_ns", "is_collective", "step"])
    ops = ops.assign(hlo_module="m", duration_ns=(ops["end_ns"] - ops["start_ns"]).astype(float))
    ops["iteration"] = ops.groupby(["device", "hlo_op"]).cumcount()
    return ops


def _hlo() -> pd.DataFrame:
    colls = [_c(n, "all-reduce", 1000, 1000, ((0, 1),), 2) for n in ("c1", "c2", "c3", "c4")]
    hlo = prof.hlo_table({"m": colls})
    hlo["model_time_s"] = [1e-7, 1e-7, 4e-7, 1e-7]
    return hlo


def test_the_collective_table_is_ordered_by_time_per_step_and_keeps_collectives_never_run():
    ops = _ops(
        [
            (0, "f", 0, 1000, False, 0),
            (0, "c1", 0, 100, True, 0),
            (0, "c2", 100, 400, True, 0),
            (0, "c3", 400, 600, True, 0),
        ]
    )
    t = prof.collective_table(ops, _hlo(), prof.step_table(ops))
    # c2 300 ns, c3 200 ns, c1 100 ns per step, then c4, which the trace never ran
    assert t["name"].tolist() == ["c2", "c3", "c1", "c4"]
    assert t["executions"].tolist() == [1, 1, 1, 0] and t["executions"].dtype == np.int64
    assert list(t.index) == [0, 1, 2, 3] and "index" not in t
    # measured/model from the time after arrival (one device: its own time)
    want = [3.0, 0.5, 1.0, NAN]
    assert t["measured_over_model"].tolist() == pytest.approx(want, nan_ok=True)
    assert t["last_arrival_over_model"].tolist() == pytest.approx(want, nan_ok=True)


def test_a_trace_with_no_step_runs_no_collective():
    ops = _ops([(0, "c1", 0, 100, True, -1)])
    t = prof.collective_table(ops, _hlo(), prof.step_table(ops))
    assert t["name"].tolist() == ["c1", "c2", "c3", "c4"] and t["executions"].tolist() == [0, 0, 0, 0]


def test_the_typical_step_is_the_median_ones_of_its_module():
    rows = []
    for step, span in enumerate([5.0, 1.0, 4.0, 2.0, 3.0]):
        rows += [("m", step, 0, span - 1), ("m", step, 1, span + 1)]  # the median over devices: span
        rows += [("n", step, 0, 10.0 - span)]  # another module, the other way round
    steps = pd.DataFrame(rows, columns=["hlo_module", "step", "device", "step_s"])
    # m's spans sorted: 1 (step 1), 2 (3), 3 (4), 4 (2), 5 (0); the middle of five is step 4
    assert prof.typical_step(steps, "m") == 4
    # four steps: the lower middle, (4 - 1) // 2 = 1: spans 1, 2, 4, 5 -> step 3
    assert prof.typical_step(steps[steps["step"] != 4], "m") == 3
    # n's spans: 5 (0), 9 (1), 6 (2), 8 (3), 7 (4): 7 -> step 4
    assert prof.typical_step(steps, "n") == 4


def test_the_timeline_of_one_step_of_one_module():
    ops = pd.DataFrame(
        {
            "hlo_module": ["m", "m", "m", "m", "n", "m"],
            "step": [1, 1, 1, 1, 1, 0],
            "device": [0, 0, 1, 1, 0, 0],
            "hlo_op": ["fusion.1", "psum.1", "ag.2", "fusion.1", "psum.1", "psum.1"],
            "is_collective": [False, True, True, False, True, True],
            "start_ns": [5000, 6000, 5500, 8000, 1000, 100],
            "end_ns": [6000, 9000, 7500, 9500, 2000, 900],
        }
    )
    t = prof.timeline(ops, "m", 1, {"psum.1": "all-reduce"})
    # from the step's first start on any device (5000 ns); ag.2 has no kind: "collective"
    want = pd.DataFrame(
        {
            "device": [0, 0, 1, 1],
            "lane": ["compute", "communication", "communication", "compute"],
            "label": ["compute", "all-reduce", "collective", "compute"],
            "name": ["fusion.1", "psum.1", "ag.2", "fusion.1"],
            "start_s": [0.0, 1e-6, 0.5e-6, 3e-6],
            "end_s": [1e-6, 4e-6, 2.5e-6, 4.5e-6],
        }
    )
    pd.testing.assert_frame_equal(t.reset_index(drop=True), want, check_dtype=False, rtol=1e-12)


def test_empty_groups_print_as_braces():
    assert prof._braces(None) == "{}" and prof._braces(()) == "{}"
    assert prof._braces(((0, 1), (2,))) == "{{0,1},{2}}"


@pytest.mark.parametrize("x,want", [(-5.0, 0.0), (0.0, 0.0), (5.0, 5.0), (10.0, 10.0), (15.0, 10.0), (25.0, 15.0)])
def test_the_covered_length_before_a_point(x, want):
    spans = np.array([[0.0, 10.0], [20.0, 30.0]])
    assert prof._covered(spans, np.array([x]))[0] == want


def test_the_step_table_is_sorted_by_module_step_and_device_with_whole_numbers():
    # listed device 1 first, steps and devices as floats (as a table read back may hold them)
    ops = pd.DataFrame(
        {
            "hlo_module": ["m", "m", "m", "m"],
            "step": [1.0, 0.0, 0.0, 1.0],
            "device": [1.0, 1.0, 0.0, 0.0],
            "start_ns": [1000, 0, 0, 1000],
            "end_ns": [1400, 300, 200, 1500],
            "is_collective": [False, True, False, True],
        }
    )
    steps = prof.step_table(ops)
    assert list(steps.columns) == prof.STEP_COLUMNS and list(steps.index) == [0, 1, 2, 3]
    assert steps[["step", "device"]].values.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert steps["step"].dtype == np.int64 and steps["device"].dtype == np.int64
    assert steps["collective_s"].tolist() == pytest.approx([0.0, 300e-9, 500e-9, 0.0])
    # no step runs compute beside its collective: nothing hidden, not even a nanosecond
    assert steps["hidden_s"].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_steps_of_ops_before_the_anchor_are_minus_one_and_whole_numbers():
    ops = pd.DataFrame(
        {
            "hlo_module": ["m"] * 5,
            "device": [0] * 5,
            "hlo_op": ["init", "a", "b", "a", "b"],
            "start_ns": [0, 10, 20, 30, 40],
            "end_ns": [5, 15, 25, 35, 45],
        }
    )
    out = prof.assign_steps(ops)
    # "init" runs fewest times (once) and first: it is the anchor, and every op is in step 0
    assert out["step"].tolist() == [0, 0, 0, 0, 0] and out["step"].dtype == np.int64
    assert list(out.columns) == [*ops.columns, "step"]
    late = ops.assign(hlo_op=["x", "a", "b", "a", "b"], start_ns=[0, 10, 20, 30, 40])
    late = pd.concat([late, late.assign(start_ns=late["start_ns"] + 100)], ignore_index=True)
    # x runs twice (0 and 100): the anchor; nothing comes before its first run
    assert prof.assign_steps(late)["step"].tolist() == [0] * 5 + [1] * 5


def test_collectives_of_equal_time_keep_the_hlos_order():
    names = [f"c{i:02d}" for i in range(20)]
    hlo = prof.hlo_table({"m": [_c(n, "all-reduce", 1000, 1000, ((0, 1),), 2) for n in names]})
    # every collective 100 ns, listed in the trace in reverse order
    rows = [(0, n, 100 * i, 100 * i + 100, True, 0) for i, n in enumerate(reversed(names))]
    ops = _ops(rows)
    t = prof.collective_table(ops, hlo, prof.step_table(ops))
    assert t["name"].tolist() == names


def test_the_hlo_tables_bytes_and_group_count_and_a_model_without_a_note():
    t = prof.hlo_table({"m": COLLECTIVES[:1]}, MESH, lambda c, axes: {"model_time_s": 2e-6})
    row = t.iloc[0]
    assert (row["operand_bytes"], row["result_bytes"], row["num_groups"]) == (1024, 4096, 2)
    # a model that says nothing leaves the note empty, not "no model"
    assert (row["model_time_s"], row["model_note"]) == (2e-6, "")


def test_a_collective_on_two_devices_is_timed_after_the_last_arrival():
    # device 0 runs c1 0-100 ns, device 1 50-120 ns: after arrival 50-120 (70 ns, under the
    # longest device time, 100 ns); with waiting 0-120; skew 50
    ops = pd.concat([_ops([(0, "c1", 0, 100, True, 0)]), _ops([(1, "c1", 50, 120, True, 0)])], ignore_index=True)
    row = prof.collective_table(ops, _hlo(), prof.step_table(ops)).set_index("name").loc["c1"]
    assert row["time_after_arrival_s"] == pytest.approx(70e-9) and row["time_last_arrival_s"] == pytest.approx(70e-9)
    assert row["time_with_waiting_s"] == pytest.approx(120e-9) and row["arrival_skew_s"] == pytest.approx(50e-9)
