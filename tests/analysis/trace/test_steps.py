"""The device-op table, round three (issue 37): which async pairs are one execution (items 5),
where a step begins when an op runs several times in one (6), and which planes hold a
device's ops (9). Tables in the real encodings, built by hand; every expected value worked out
by hand. (The real CPU run of a step with a scan: tests/analysis/trace/test_steps.py.)

Issue 37 item 6 on a real CPU run: a step that runs its psum four times (a ``lax.scan``,
tests/helpers/scan_step.py) measured through the runner as ``op=program``. The device estimator must
give one sample per traced step, each the step's whole device time, not the k-th run of each
op taken for step k (which read a quarter of the step, and four times as many samples).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from scan_step import RUNS
from xspace_bytes import varint_field, xevent, xplane

from analysis.hlo import async_pairs, collective_executions, instruction_opcodes
from analysis.trace import TABLE_COLUMNS, device_ops, device_samples, read_xplane
from analysis.trace.overlap import overlap_summary
from runner import run


def _table(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=TABLE_COLUMNS).astype({"start_ns": float, "duration_ns": float})


# --- item 5: only collectives' async halves are joined -----------------------------------------

HLO = """HloModule jit_step, num_partitions=4

%fused (p.0: f32[8]) -> f32[8] {
  %p.0 = f32[8]{0} parameter(0)
  ROOT %n.0 = f32[8]{0} negate(f32[8]{0} %p.0)
}

%wrapped_negate (p.2: f32[8]) -> f32[8] {
  %p.2 = f32[8]{0} parameter(0)
  ROOT %n.2 = f32[8]{0} negate(f32[8]{0} %p.2)
}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

%wrapped_all_reduce (p.3: f32[8]) -> f32[8] {
  %p.3 = f32[8]{0} parameter(0)
  ROOT %ar.3 = f32[8]{0} all-reduce(f32[8]{0} %p.3), replica_groups={{0,1,2,3}}, to_apply=%add
}

ENTRY %main (p.1: f32[8]) -> f32[32] {
  %p.1 = f32[8]{0} parameter(0)
  %copy-start.1 = (f32[8]{0:S(5)}, f32[8]{0}, u32[]) copy-start(f32[8]{0} %p.1)
  %all-gather-start.2 = (f32[8]{0}, f32[32]{0}) all-gather-start(f32[8]{0} %p.1), replica_groups={{0,1}}, dimensions={0}
  %fusion.3 = f32[8]{0} fusion(f32[8]{0} %p.1), kind=kLoop, calls=%fused
  %async-start.4 = ((f32[8]{0}), f32[8]{0}, u32[]) async-start(f32[8]{0} %fusion.3), calls=%wrapped_negate
  %async-start.5 = ((f32[8]{0}), f32[8]{0}, u32[]) async-start(f32[8]{0} %fusion.3), calls=%wrapped_all_reduce
  %copy-done.1 = f32[8]{0:S(5)} copy-done((f32[8]{0:S(5)}, f32[8]{0}, u32[]) %copy-start.1)
  %async-done.4 = f32[8]{0} async-done(((f32[8]{0}), f32[8]{0}, u32[]) %async-start.4)
  %async-done.5 = f32[8]{0} async-done(((f32[8]{0}), f32[8]{0}, u32[]) %async-start.5)
  ROOT %all-gather-done.2 = f32[32]{0} all-gather-done((f32[8]{0}, f32[32]{0}) %all-gather-start.2)
}
"""
_TEXT = {  # each instruction's line in the entry, as a TPU op's metadata name is its text
    line.split(" = ")[0].strip().removeprefix("ROOT ").lstrip("%"): line.strip().removeprefix("ROOT ")
    for line in HLO.split("ENTRY", 1)[1].splitlines()
    if " = " in line
}
# (name, start ns, duration ns, category) of one step on one TPU: the host offload's copy is
# in flight 0..290, the all-gather 20..350, a negate offloaded as async 250..380, an
# all-reduce wrapped in async-start/-done 255..400
_STEP = [
    ("copy-start.1", 0, 10, "data formatting"),
    ("all-gather-start.2", 20, 10, "all-gather"),
    ("fusion.3", 40, 200, "loop fusion"),
    ("async-start.4", 250, 5, "loop fusion"),
    ("async-start.5", 255, 5, "all-reduce"),
    ("copy-done.1", 260, 30, "data formatting"),
    ("all-gather-done.2", 300, 50, "all-gather"),
    ("async-done.4", 360, 20, "loop fusion"),
    ("async-done.5", 390, 10, "all-reduce"),
]


def _tpu_step(devices=2) -> pd.DataFrame:
    rows = []
    for d in range(devices):
        plane = f"/device:TPU:{d}"
        rows.append((plane, "XLA Modules", "jit_step(7)", 0, 1000, *[None] * 4, None, None, None))
        for name, start, dur, cat in _STEP:
            rows.append((plane, "XLA Ops", _TEXT[name], start, dur, *[None] * 4, name, "7", cat))
    return _table(rows)


def _spans(ops) -> list:
    return [
        [r.hlo_op, r.start_ns, r.end_ns, r.duration_ns, bool(r.is_async), r.done_op if r.is_async else None]
        for r in ops[ops["device"] == 0].itertuples()
    ]


def test_a_host_offloads_copy_start_and_copy_done_stay_two_ops_while_collectives_join():
    """XProf keeps copy-start and copy-done as two ops (each its own time); joining them drew
    one 290 ns op over the fusion it overlaps, counted as the copy's time."""
    ops = device_ops(_tpu_step(), async_pairs(HLO), collectives=set(collective_executions(HLO)))
    assert _spans(ops) == [
        ["copy-start.1", 0.0, 10.0, 10.0, False, None],
        ["all-gather-start.2", 20.0, 350.0, 330.0, True, "all-gather-done.2"],
        ["fusion.3", 40.0, 240.0, 200.0, False, None],
        ["async-start.4", 250.0, 255.0, 5.0, False, None],  # wraps a negate: no collective
        ["async-start.5", 255.0, 400.0, 145.0, True, "async-done.5"],  # wraps the all-reduce
        ["copy-done.1", 260.0, 290.0, 30.0, False, None],
        ["async-done.4", 360.0, 380.0, 20.0, False, None],
    ]
    assert len(ops) == 14  # the same on device 1
    # XProf's per-op time: each copy half its own event's duration
    per_op = ops.groupby("hlo_op")["duration_ns"].median().to_dict()
    assert (per_op["copy-start.1"], per_op["copy-done.1"]) == (10.0, 30.0)


def test_without_the_hlo_every_async_wrapper_is_joined_but_copies_never_are():
    # the trace alone: pairs from each done's operand in its text; no list of collectives
    ops = device_ops(_tpu_step())
    assert _spans(ops) == [
        ["copy-start.1", 0.0, 10.0, 10.0, False, None],
        ["all-gather-start.2", 20.0, 350.0, 330.0, True, "all-gather-done.2"],
        ["fusion.3", 40.0, 240.0, 200.0, False, None],
        ["async-start.4", 250.0, 380.0, 130.0, True, "async-done.4"],
        ["async-start.5", 255.0, 400.0, 145.0, True, "async-done.5"],
        ["copy-done.1", 260.0, 290.0, 30.0, False, None],
    ]


def test_a_copy_done_does_not_close_an_open_collective_nor_a_collective_done_a_copy():
    # names only (no text, no HLO): a copy-done between a start and its done is left alone
    plane = "/device:TPU:0"
    rows = [
        (plane, "XLA Ops", n, s, t, *[None] * 7)
        for n, s, t in (("copy-start", 0, 5), ("all-reduce-start", 10, 5), ("copy-done", 50, 5), ("async-done", 80, 5))
    ]
    ops = device_ops(_table(rows))
    assert ops[["hlo_op", "end_ns", "is_async"]].values.tolist() == [
        ["copy-start", 5.0, False],
        ["all-reduce-start", 85.0, True],
        ["copy-done", 55.0, False],
    ]


# --- item 6: steps are module executions; an op may run several times in one --------------------


def _cpu(rows) -> pd.DataFrame:
    """``(device, op, start_ns, duration_ns)``: CPU op events, every device on the host plane."""
    line = "tf_XLAPjRtCpuClient/1"
    return _table([("/host:CPU", line, n, s, t, n, "jit_step", d, None, None, "6", None) for d, n, s, t in rows])


def _scan_step_rows(k: int, d: int) -> list:
    """Step k on CPU device d: a copy, then a while loop whose body runs a psum and a fusion
    four times; the psums take 100 + 10 k + 5 d ns each."""
    t0 = 10_000 * k + 100 * d
    rows = [(d, "copy.1", t0, 50), (d, "while.2", t0 + 100, 800)]
    for j in range(4):
        rows += [(d, "psum.3", t0 + 100 + 200 * j, 100 + 10 * k + 5 * d), (d, "fusion.4", t0 + 210 + 200 * j, 50)]
    return rows


def test_a_psum_run_four_times_a_step_is_summed_per_step_on_cpu():
    ops = device_ops(_cpu([r for k in range(3) for d in range(2) for r in _scan_step_rows(k, d)]))
    psum = ops[(ops["hlo_op"] == "psum.3") & (ops["device"] == 0)]
    assert psum["step"].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert psum["iteration"].tolist() == list(range(12))  # its runs, counted on
    assert (ops.groupby("hlo_op")["step"].max() == 2).all() and (ops["step"] >= 0).all()
    # per device 4 x (100 + 10k + 5d): 400 + 40k and 420 + 40k, their median 410 + 40k
    assert device_samples(ops, {"psum.3"}) == pytest.approx([410e-9, 450e-9, 490e-9])
    # the whole program: the copy (50) and the while loop (800), the loop's body inside it
    assert device_samples(ops) == pytest.approx([850e-9] * 3)
    # the overlap summary's per-step figures divide by 3 steps, not by the 12 psum runs
    # (JAX names the all-reduce psum.3: the HLO's opcodes say it is a collective)
    summary = overlap_summary(ops, {"psum.3": "all-reduce"})
    # device 0's psums 1320 ns in all, device 1's 1380: the median 1350 ns over 3 steps
    assert summary["trace_collective_s"] == pytest.approx(450e-9)


def test_a_step_that_opens_with_its_loop_begins_at_the_loops_first_run_on_gpu():
    """The least-run kernel (fusion.9, once a step) comes last: a step cut at it would put
    each step's all-reduces in the step before (and step 0's in none)."""
    rows = []
    for d in range(2):
        clock = 7_000_000 * d  # each GPU's own clock: steps are cut per device
        for k in range(3):
            t0 = clock + 10_000 * k
            for j in range(4):
                rows.append((d, "all-reduce.3", t0 + 200 * j, 100 + k))
                rows.append((d, "fusion.4", t0 + 100 + 200 * j, 50))
            rows.append((d, "fusion.9", t0 + 900, 30))
    table = _table(
        [
            (f"/device:GPU:{d}", "Stream #7", f"kernel_{n}", s, t, n, "jit_step", None, None, None, "5", None)
            for d, n, s, t in rows
        ]
    )
    ops = device_ops(table)
    assert ops.groupby(["device", "hlo_op"])["step"].apply(list).to_dict() == {
        (d, n): [k for k in range(3) for _ in range(4 if n != "fusion.9" else 1)]
        for d in range(2)
        for n in ("all-reduce.3", "fusion.4", "fusion.9")
    }
    assert device_samples(ops, {"all-reduce.3"}) == pytest.approx([400e-9, 404e-9, 408e-9])


def test_a_conditional_op_run_in_some_steps_only_is_placed_by_time():
    # fusion.5 runs in steps 0 and 2 only (2 runs in 3 steps): no multiple of the step count
    rows = [r for k in range(3) for r in _scan_step_rows(k, 0)]
    rows += [(0, "fusion.5", 950, 10), (0, "fusion.5", 20_950, 10)]
    ops = device_ops(_cpu(rows), steps=3)
    assert ops.loc[ops["hlo_op"] == "fusion.5", "step"].tolist() == [0, 2]
    assert device_samples(ops, {"fusion.5"}) == pytest.approx([10e-9, 10e-9])  # steps 0 and 2
    assert device_samples(ops, {"psum.3"}) == pytest.approx([400e-9, 440e-9, 480e-9])
    # not told the 3 steps, the least-run op is taken to run once a step: the rule's limit
    assert device_ops(_cpu(rows)).loc[lambda o: o["hlo_op"] == "fusion.5", "step"].tolist() == [0, 1]


def test_on_tpu_the_xla_modules_line_cuts_the_steps():
    """Steps of program 7 are its XLA Modules events. Step 1 opens with a conditional's op
    (fusion.8, its only run) before the op every step starts with: by the ops' runs alone it
    would fall in step 0. Step 2's fusion.2 is stamped 1 ns before its module began (after
    the module before ended): it belongs to step 2. A run of another program between steps is
    that program's step 0."""
    rows = []
    for d in range(2):
        plane = f"/device:TPU:{d}"

        def op(name, start, dur, program="7", plane=plane):
            rows.append((plane, "XLA Ops", name, start, dur, *[None] * 4, name, program, None))

        for k in range(3):
            t0 = 10_000 * k
            rows.append((plane, "XLA Modules", "jit_step(7)", t0, 1000, *[None] * 7))
            op("fusion.2", t0 + 100 if k < 2 else t0 - 1, 20)
            for j in range(3):
                op("all-reduce.5", t0 + 200 + 300 * j, 100 + k + d)
        op("fusion.8", 10_010, 30)
        rows.append((plane, "XLA Modules", "jit_other(8)", 5000, 500, *[None] * 7))
        op("copy.1", 5100, 50, program="8")
    ops = device_ops(_table(rows))
    steps = ops[ops["device"] == 0].groupby(["hlo_module", "hlo_op"])["step"].apply(list).to_dict()
    assert steps == {
        ("jit_other", "copy.1"): [0],
        ("jit_step", "all-reduce.5"): [0, 0, 0, 1, 1, 1, 2, 2, 2],
        ("jit_step", "fusion.2"): [0, 1, 2],
        ("jit_step", "fusion.8"): [1],
    }
    # per device 3 x (100 + k + d): the median over the two devices 301.5 + 3k
    assert device_samples(ops, {"all-reduce.5"}) == pytest.approx([301.5e-9, 304.5e-9, 307.5e-9])
    assert device_samples(ops, {"fusion.8"}) == pytest.approx([30e-9])  # step 1's only


# --- item 9: a SparseCore's plane is not its TPU's ----------------------------------------------


def _stat_uint(stat_id: int, value: int) -> bytes:
    return varint_field(1, stat_id) + varint_field(3, value)  # XStat{metadata_id, uint64_value}


def test_a_sparsecores_plane_holds_none_of_its_tpus_ops(tmp_path):
    """``/device:TPU:0 SparseCore 0`` (as a v5p/v6e trace names a SparseCore's plane) has XLA
    Ops and XLA Modules lines of its own: they are not TPU 0's, and a ``/device:TPU:1 ...``
    plane is no TPU 1."""
    events = {
        1: ("%fusion.1 = f32[8]{0} fusion(f32[8]{0} %p), kind=kLoop, calls=%f", "fusion.1"),
        2: "jit_step(7)",
        3: ("%fusion.9 = f32[8]{0} fusion(f32[8]{0} %p), kind=kLoop, calls=%g", "fusion.9"),
    }
    stats = {1: "program_id"}
    pid = [_stat_uint(1, 7)]
    tensor_core = xplane(
        "/device:TPU:0",
        [("XLA Modules", 0, [xevent(2, 0, 1_000_000)]), ("XLA Ops", 0, [xevent(1, 100_000, 200_000, pid)])],
        events,
        stats,
    )
    sparse_core = [
        xplane(
            f"/device:TPU:{n} SparseCore 0",
            [("XLA Modules", 0, [xevent(2, 0, 1_000_000)]), ("XLA Ops", 0, [xevent(3, 50_000, 700_000, pid)])],
            events,
            stats,
            pid=2 + n,
        )
        for n in (0, 1)
    ]
    path = tmp_path / "sparsecore.xplane.pb"
    path.write_bytes(tensor_core + b"".join(sparse_core))
    table = read_xplane(path)
    assert sorted(set(table["plane"])) == ["/device:TPU:0", "/device:TPU:0 SparseCore 0", "/device:TPU:1 SparseCore 0"]
    ops = device_ops(table)
    assert ops[["device", "hlo_module", "hlo_op", "start_ns", "end_ns", "step"]].values.tolist() == [
        [0, "jit_step", "fusion.1", 100.0, 300.0, 0]
    ]
    assert device_samples(ops) == pytest.approx([200e-9])  # not the SparseCore's 700 ns


# --- item 10: arrival figures only on one clock, through the profile's readers -------------------


def _two_device_collective(clocks) -> pd.DataFrame:
    """c1 on device 0 from 0 to 100 ns and on device 1 from 50 to 120, as device_ops gives it."""
    ops = pd.DataFrame(
        {
            "device": [0, 1],
            "hlo_module": "m",
            "hlo_op": "c1",
            "start_ns": [0.0, 50.0],
            "end_ns": [100.0, 120.0],
            "duration_ns": [100.0, 70.0],
            "is_collective": True,
            "step": 0,
            "iteration": 0,
            "clock": clocks,
        }
    )
    return ops


def test_the_profiles_arrival_figures_need_one_clock_and_say_so_in_the_report():
    from analysis.hlo import Collective
    from analysis.profiling import profile as prof
    from analysis.report.profile_report import _human

    c1 = Collective(
        name="c1",
        kind="all-reduce",
        computation="main",
        is_async=False,
        dtype="f32",
        operand_bytes=1000,
        result_bytes=1000,
        replica_groups=((0, 1),),
        group_size=2,
        num_groups=1,
        source_target_pairs=None,
        dimensions=None,
        channel_id=None,
        op_name=None,
    )
    hlo = prof.hlo_table({"m": [c1]})
    hlo["model_time_s"] = [50e-9]

    # the CPU devices of one host: after arrival 50-120 (70 ns), with waiting 0-120, skew 50
    host = _two_device_collective(["/host:CPU", "/host:CPU"])
    row = prof.collective_table(host, hlo, prof.step_table(host)).iloc[0]
    assert bool(row["arrival_comparable"])
    assert (row["time_after_arrival_s"], row["time_with_waiting_s"], row["arrival_skew_s"]) == pytest.approx(
        (70e-9, 120e-9, 50e-9)
    )
    assert row["measured_over_model"] == pytest.approx(70 / 50)
    # the same CPU devices in two hosts' traces: two clocks
    two_hosts = host.assign(host=["host0", "host1"])
    assert not prof.collective_table(two_hosts, hlo, prof.step_table(two_hosts)).iloc[0]["arrival_comparable"]

    # two TPU chips: no figure across them; measured/model from the median device time (85 ns)
    chips = _two_device_collective(["/device:TPU:0", "/device:TPU:1"])
    table = prof.collective_table(chips, hlo, prof.step_table(chips))
    row = table.iloc[0]
    assert not row["arrival_comparable"]
    assert row[["time_after_arrival_s", "time_with_waiting_s", "arrival_skew_s"]].isna().all()
    assert row["time_median_s"] == pytest.approx(85e-9) and row["measured_over_model"] == pytest.approx(85 / 50)
    shown = _human(table, full=True).iloc[0]
    assert shown["measured/model"] == "1.7x (device time)"
    assert [shown[c] for c in ("arrival skew", "after arrival", "with waiting")] == ["n/a (chips' clocks differ)"] * 3


TARGET = Path(__file__).resolve().parents[2] / "helpers" / "scan_step.py"
FAST = ["timing.rounds=1", "timing.budget_s=0.3", "timing.min_iters=5", "trace.iters=6"]


def test_a_step_that_scans_a_psum_four_times_is_timed_whole_by_the_device_estimator(compose_cfg, tmp_path):
    point = tmp_path / "scan"
    overrides = ["op=program", f"op.target={TARGET}:scan_psum", "op.inputs=['x[B_X, D]']", "op.dims={B: 512, D: 1024}"]
    r = run(compose_cfg([*overrides, "mesh=x8", *FAST]), point)
    assert r["status"] == "ok", r.get("error")
    steps = r["trace"]["iters"]
    walls = r["trace"]["wall_samples_s"]
    samples = r["timing"]["device"]["samples_s"]
    assert len(samples) == steps == len(walls)  # one sample per traced step, not one per psum run

    # in the trace: the compiled step's one all-reduce ran RUNS times in every step on every device
    opcodes = instruction_opcodes((point / "hlo" / "compiled.hlo.txt").read_text())
    psum = {name for name, opcode in opcodes.items() if opcode == "all-reduce"}
    assert len(psum) == 1
    ops = device_ops(read_xplane(point / r["files"]["xplane"]), steps=steps)
    runs = ops[ops["hlo_op"].isin(psum)].groupby(["step", "device"]).size()
    assert runs.to_dict() == {(k, d): RUNS for k in range(steps) for d in range(8)}

    # Each step's device time holds every run of the psum, not one: per device it is at least the
    # sum of the step's RUNS psum durations (they run one after another) and at most the span from
    # the step's first op to its last; so is the median over devices the estimator takes. Both
    # bounds come from the same trace as the samples: no two timings are compared (the device/wall
    # ratio, 0.5-1.1 here depending on how busy the machine is, is a measurement, not a test).
    in_steps = ops[ops["step"] >= 0]
    psum_ns = in_steps[in_steps["hlo_op"].isin(psum)].groupby(["step", "device"])["duration_ns"].sum()
    span_ns = in_steps.groupby(["step", "device"]).apply(
        lambda g: g["end_ns"].max() - g["start_ns"].min(), include_groups=False
    )
    low = psum_ns.groupby(level="step").median().sort_index().to_numpy() * 1e-9
    high = span_ns.groupby(level="step").median().sort_index().to_numpy() * 1e-9
    assert len(low) == len(high) == steps
    assert all(lo <= s <= hi for lo, s, hi in zip(low, samples, high)), (list(low), samples, list(high))
