"""Trace tables -> per-device op intervals, for the shapes CPU, TPU and GPU profiles have.

The reader itself is exercised on real CPU traces in
tests/runner/worker/programs/test_collectives.py; here the tables are built by hand, because no
TPU or GPU trace can be produced on the CI machine.
"""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.trace import (
    EVENT_COLUMNS,
    TABLE_COLUMNS,
    TraceError,
    device_ops,
    device_samples,
    op_steps,
    op_summary,
    read_xplane,
)


def _events(rows) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=EVENT_COLUMNS)
    return df.astype({"start_ns": float, "duration_ns": float})


def _row(plane, line, name, start_ns, duration_ns, hlo_op=None, hlo_module=None, ordinal=None, scope=None) -> tuple:
    """One event, in EVENT_COLUMNS order."""
    return (plane, line, name, start_ns, duration_ns, hlo_op, hlo_module, ordinal, scope)


def test_tpu_xla_ops_line_gives_one_interval_per_device_and_iteration():
    rows = []
    for dev in range(4):
        for it in range(3):
            t0 = 1000 * it + 10 * dev  # devices start 0, 10, 20, 30 ns apart
            rows.append((f"/device:TPU:{dev}", "XLA Ops", "all-gather.1", t0, 100.0, None, None, None, None))
            rows.append((f"/device:TPU:{dev}", "XLA Ops", "fusion.2", t0 + 200, 50.0, None, None, None, None))
        rows.append((f"/device:TPU:{dev}", "XLA Modules", "jit_f(123)", 0.0, 3000.0, None, None, None, None))
        rows.append((f"/device:TPU:{dev}", "Steps", "0", 0.0, 3000.0, None, None, None, None))
    rows.append(("/host:CPU", "python", "PjitFunction(f)", 0.0, 10.0, None, None, None, None))
    ops = device_ops(_events(rows))
    assert set(ops["hlo_op"]) == {"all-gather.1", "fusion.2"}  # module and step lines are not ops
    ag = ops[ops["hlo_op"] == "all-gather.1"]
    assert sorted(ag["device"].unique()) == [0, 1, 2, 3]
    assert sorted(ag["iteration"].unique()) == [0, 1, 2]
    steps = op_steps(ops)
    s = steps[(steps["hlo_op"] == "all-gather.1")].iloc[0]
    # four chips, four clocks: no time from the last arrival, no skew (issue 37 item 10);
    # each chip's own time stands
    assert pd.isna(s["op_time_s"]) and pd.isna(s["arrival_skew_s"]) and not s["arrival_comparable"]
    assert s["device_time_s"] == pytest.approx(100e-9)
    assert s["devices"] == 4
    # no program id on these ops ties them to the XLA Modules line: each op runs once a step
    assert ops.groupby("hlo_op")["step"].apply(list).to_dict() == {
        "all-gather.1": [0, 1, 2] * 4,
        "fusion.2": [0, 1, 2] * 4,
    }


# --- the device estimator: per step, the median over devices ------------------------------


def test_device_samples_from_a_tpu_shaped_trace():
    rows = []
    for dev in range(4):
        for it in range(3):
            t0 = 10_000 * it
            # the collective takes 100 ns on devices 0-2 and 400 ns on device 3; a fusion beside it
            rows.append(_row(f"/device:TPU:{dev}", "XLA Ops", "all-gather.1", t0, 400.0 if dev == 3 else 100.0))
            rows.append(_row(f"/device:TPU:{dev}", "XLA Ops", "fusion.2", t0 + 500, 50.0))
    ops = device_ops(_events(rows))
    # per step: the median over devices of the collective's own time
    assert device_samples(ops, {"all-gather.1"}) == pytest.approx([100e-9] * 3)
    # the whole program: each device's busy time (its ops' union); median over devices
    assert device_samples(ops, None) == pytest.approx([150e-9] * 3)


def test_device_samples_sum_a_gpu_ops_kernels():
    rows = []
    for it in range(2):
        for dev in range(2):
            t0 = 1_000_000 * it
            # one NCCL all-reduce launched as two kernels (one scope), 30 + 70 us
            plane = f"/device:GPU:{dev}"
            for kernel, start, dur in (
                ("ncclKernel_AllReduce_a", t0, 30_000.0),
                ("ncclKernel_AllReduce_b", t0 + 40_000, 70_000.0),
            ):
                rows.append(_row(plane, "Stream #14", kernel, start, dur, "all-reduce.3", "jit_step", scope=7 + it))
    ops = device_ops(_events(rows))
    assert device_samples(ops, {"all-reduce.3"}) == pytest.approx([100e-6, 100e-6])


def test_gpu_stream_kernels_are_attributed_by_hlo_op_stat():
    rows = []
    for dev in range(2):
        for it in range(2):
            t0 = 5000.0 * it
            plane, compute = f"/device:GPU:{dev}", "Stream #13(Compute)"
            rows.append(
                _row(plane, compute, "ncclDevKernel_AllGather_RING_LL(...)", t0, 400.0, "all-gather-start.1", "jit_f")
            )
            rows.append(_row(plane, "Stream #7(MemcpyH2D)", "MemcpyH2D", t0, 10.0))
            rows.append(_row(plane, compute, "loop_fusion", t0 + 500, 40.0, "fusion.3", "jit_f"))
    ops = device_ops(_events(rows))
    assert set(ops["hlo_op"]) == {"all-gather-start.1", "fusion.3"}  # memcpy has no hlo_op: not an op
    assert set(ops["hlo_module"]) == {"jit_f"}
    summ = op_summary(op_steps(ops))
    ag = summ[summ["hlo_op"] == "all-gather-start.1"].iloc[0]
    assert ag["iterations"] == 2 and ag["devices"] == 2
    assert ag["device_time_s"] == pytest.approx(400e-9)


def test_cpu_events_take_their_device_from_device_ordinal_not_the_thread():
    rows = [
        ("/host:CPU", "tf_XLAPjRtCpuClient/1", "all_gather.3", 0.0, 50.0, "all_gather.3", "jit_f", 0, None),
        ("/host:CPU", "tf_XLAPjRtCpuClient/1", "all_gather.3", 100.0, 20.0, "all_gather.3", "jit_f", 1, None),
        ("/host:CPU", "tf_XLAPjRtCpuClient/2", "Rendezvous", 0.0, 40.0, None, None, None, None),
        ("/host:CPU", "tf_XLAPjRtCpuClient/2", "ThunkExecutor::Execute", 0.0, 40.0, None, None, 1, None),
    ]
    ops = device_ops(_events(rows))
    assert list(ops["device"]) == [0, 1] and list(ops["iteration"]) == [0, 0]
    s = op_steps(ops).iloc[0]
    # device 1 arrived last (100 ns) and ended last (120 ns)
    assert s["op_time_s"] == pytest.approx(20e-9) and s["arrival_skew_s"] == pytest.approx(100e-9)


def test_gpu_kernels_of_one_launch_are_one_execution():
    # As seen on an H100 (jax 0.11.2): a cuBLAS matmul `custom-call.1` runs a Memset then the
    # GEMM kernel; both carry the launch's scope_range_id. Two iterations, launches 658 and 660.
    rows = []
    for it, scope in enumerate((658, 660)):
        t0 = 2_000_000.0 * it
        stream = "Stream #14(Compute,Memset)"
        rows.append(_row("/device:GPU:0", stream, "Memset 3", t0, 800.0, "custom-call.1", "jit_f", scope=scope))
        gemm = ("nvjet_sm90_tst_256x128", t0 + 244_000, 1_193_000.0)
        rows.append(_row("/device:GPU:0", stream, *gemm, "custom-call.1", "jit_f", scope=scope))
    ops = device_ops(_events(rows))
    assert list(ops["iteration"]) == [0, 1] and list(ops["kernels"]) == [2, 2]
    steps = op_steps(ops)
    # device time = 800 + 1,193,000 ns; the 243 us host gap between the kernels is not counted
    assert steps["device_time_s"].to_numpy() == pytest.approx([1_193_800e-9] * 2)
    assert steps["op_time_s"].to_numpy() == pytest.approx([1_193_800e-9] * 2)


def test_unreadable_trace_is_a_clear_error(tmp_path):
    bad = tmp_path / "x.xplane.pb"
    bad.write_bytes(b"\x00not a protobuf at all" * 10)
    with pytest.raises(TraceError, match="x.xplane.pb"):
        read_xplane(bad)


def test_tpu_async_collective_is_timed_from_its_start_to_its_done():
    """An all-gather-start on `XLA Ops`, its in-flight op on `Async XLA Ops`, a fusion
    computing meanwhile, and the all-gather-done: one execution from 0 to 900 ns."""
    rows = []
    for dev in range(2):
        for it in range(2):
            t0 = 10_000 * it
            rows += [
                (f"/device:TPU:{dev}", "XLA Ops", "all-gather-start.1", t0, 20.0, None, None, None, None),
                (f"/device:TPU:{dev}", "Async XLA Ops", "all-gather.1", t0 + 20, 700.0, None, None, None, None),
                (f"/device:TPU:{dev}", "XLA Ops", "fusion.3", t0 + 50, 600.0, None, None, None, None),
                (f"/device:TPU:{dev}", "XLA Ops", "all-gather-done.1", t0 + 850, 50.0, None, None, None, None),
            ]
    pairs = {"all-gather-done.1": "all-gather-start.1"}
    for p in (pairs, None):  # joined by the HLO's pairs, or by kind when there is no HLO
        ops = device_ops(_events(rows), p)
        ag = ops[ops["hlo_op"] == "all-gather-start.1"]
        assert len(ag) == 4 and ag["is_async"].all()
        assert ag["duration_ns"].tolist() == [900.0] * 4  # start's start to done's end
        assert set(ops["hlo_op"]) == {"all-gather-start.1", "fusion.3"}  # the halves and the in-flight op are one
        steps = op_steps(ops)
        assert steps.loc[steps["hlo_op"] == "all-gather-start.1", "device_time_s"].tolist() == pytest.approx(
            [900e-9] * 2
        )


def test_offloaded_collective_ending_in_call_done_is_one_execution():
    rows = [
        ("/device:TPU:0", "XLA Ops", "all-reduce-start.4", 0.0, 10.0, None, None, None, None),
        ("/device:TPU:0", "XLA Ops", "fusion.1", 20.0, 100.0, None, None, None, None),
        ("/device:TPU:0", "XLA Ops", "call-done.7", 400.0, 30.0, None, None, None, None),
    ]
    # joined by the HLO's pairs, or without HLO: a call-done ends the earliest open start
    for pairs in ({"call-done.7": "all-reduce-start.4"}, None):
        ops = device_ops(_events(rows), pairs)
        ar = ops[ops["hlo_op"] == "all-reduce-start.4"].iloc[0]
        assert (ar["start_ns"], ar["end_ns"], ar["is_async"], ar["kernels"]) == (0.0, 430.0, True, 2)
        assert list(ops["hlo_op"]) == ["all-reduce-start.4", "fusion.1"]


def test_a_joined_async_collective_counts_its_whole_span_as_collective_time():
    from analysis.trace.overlap import overlap_by_device

    rows = [
        ("/device:TPU:0", "XLA Ops", "all-gather-start.1", 0.0, 20.0, None, None, None, None),
        ("/device:TPU:0", "XLA Ops", "fusion.3", 50.0, 600.0, None, None, None, None),
        ("/device:TPU:0", "XLA Ops", "all-gather-done.1", 850.0, 50.0, None, None, None, None),
    ]
    per = overlap_by_device(device_ops(_events(rows)))
    assert per["collective_s"].iloc[0] == pytest.approx(900e-9)
    assert per["overlap_s"].iloc[0] == pytest.approx(600e-9)  # the fusion ran while it was in flight


def test_per_host_plane_numbers_become_global_device_ids():
    from analysis.runs.processes import global_device_ids

    # host 1 of a two-host TPU slice: its planes /device:TPU:0..3 are the chips with global ids 4, 5, 12, 13
    local = pd.Series([0, 1, 2, 3, 0])
    assert global_device_ids(local, [4, 5, 12, 13]).tolist() == [4, 5, 12, 13, 4]
    # numbers that are already global (not local ordinals) stay as they are
    assert global_device_ids(pd.Series([4, 7]), [4, 5, 6, 7]).tolist() == [4, 7]
    assert global_device_ids(local, None).tolist() == [0, 1, 2, 3, 0]


# --- collectives in the real TPU encoding (metadata name = the instruction text, display_name,
# --- program_id / hlo_category on the metadata, device timespans, no hlo_op) ---------------


def _tpu_events(ops, devices=4, steps=2, program="77"):
    """Event rows in TABLE_COLUMNS: per device and step (10 us apart), ``ops`` as
    ``(text, display_name, category, start_ns, duration_ns)``, a duration may be a function of
    the device; each step under one ``XLA Modules`` event ``jit_step(77)``."""
    rows = []
    for dev in range(devices):
        plane = f"/device:TPU:{dev}"
        for step in range(steps):
            t0 = 10_000.0 * step
            rows.append((plane, "XLA Modules", f"jit_step({program})", t0, 9_000.0, *[None] * 4, None, None, None))
            for text, display, category, start, dur in ops:
                d = dur(dev) if callable(dur) else dur
                rows.append((plane, "XLA Ops", text, t0 + start, float(d), *[None] * 4, display, program, category))
    return pd.DataFrame(rows, columns=TABLE_COLUMNS).astype({"start_ns": float, "duration_ns": float})


_AR = "%all-reduce.5 = f32[1024]{0} all-reduce(f32[1024]{0} %p.1), replica_groups={{0,1,2,3}}, to_apply=%add"
_FUSION = "%fusion.2 = f32[1024]{0} fusion(f32[1024]{0} %p.2), kind=kLoop, calls=%fused_computation"


def test_a_plain_all_reduce_is_named_by_its_display_name_and_its_module_by_program_id():
    # devices take 100, 110, 120, 130 ns: the median over devices is 115 ns
    ev = _tpu_events(
        [(_AR, "all-reduce.5", "all-reduce", 0, lambda d: 100 + 10 * d), (_FUSION, "fusion.2", "loop fusion", 500, 50)]
    )
    ops = device_ops(ev)
    assert set(ops["hlo_op"]) == {"all-reduce.5", "fusion.2"}
    assert set(ops["hlo_module"]) == {"jit_step"}
    assert device_samples(ops, {"all-reduce.5"}) == pytest.approx([115e-9] * 2)


def test_without_display_name_the_instruction_name_comes_from_the_text():
    ev = _tpu_events([(_AR, None, None, 0, 100)])
    assert set(device_ops(ev)["hlo_op"]) == {"all-reduce.5"}
    # a module the XLA Modules line does not name comes from the HLO protos' names, else ""
    no_line = ev[ev["line"] != "XLA Modules"]
    assert set(device_ops(no_line)["hlo_module"]) == {""}
    assert set(device_ops(no_line, modules={"77": "jit_step"})["hlo_module"]) == {"jit_step"}


def test_an_async_all_gather_is_one_execution_from_start_to_done_with_compute_between():
    start = "%all-gather-start.2 = (f32[256]{0}, f32[1024]{0}) all-gather-start(f32[256]{0} %p.3), dimensions={0}"
    done = "%all-gather-done.2 = f32[1024]{0} all-gather-done((f32[256]{0}, f32[1024]{0}) %all-gather-start.2)"
    ev = _tpu_events(
        [
            (start, "all-gather-start.2", "all-gather", 0, 20),
            (_FUSION, "fusion.2", "loop fusion", 30, 200),
            (done, "all-gather-done.2", "all-gather", 250, 50),
        ]
    )
    ops = device_ops(ev)
    ag = ops[ops["hlo_op"] == "all-gather-start.2"]
    assert ag["is_async"].all() and set(ag["done_op"]) == {"all-gather-done.2"}
    assert len(ag) == 8  # 4 devices x 2 steps, the done folded in
    # the set a point gives holds both names: one sample per execution, start to done: 300 ns
    assert device_samples(ops, {"all-gather-start.2", "all-gather-done.2"}) == pytest.approx([300e-9] * 2)
    assert device_samples(ops, {"all-gather-done.2"}) == pytest.approx([300e-9] * 2)  # named by its done alone


_RS_START = "%rs.1 = ((f32[8]{0}), f32[2]{0}) async-start(f32[8]{0} %p), calls=%wrapped_reduce_scatter"
_RS_DONE = "%rs.2 = f32[2]{0} async-done(((f32[8]{0}), f32[2]{0}) %rs.1)"
_CALL_START = "%call-start.2 = ((f32[8]{0}), f32[8]{0}, u32[]) call-start(f32[8]{0} %p), to_apply=%offloaded_all_reduce"
_CALL_DONE = "%call-done.2 = f32[8]{0} call-done(((f32[8]{0}), f32[8]{0}, u32[]) %call-start.2)"


@pytest.mark.parametrize(
    "ops, names, span_s",
    [
        pytest.param(  # names that do not say "start"/"done": the opcode in the text does
            [
                (_RS_START, "rs.1", "reduce-scatter", 0, 10),
                (_FUSION, "fusion.2", "loop fusion", 20, 100),
                (_RS_DONE, "rs.2", "reduce-scatter", 130, 40),
            ],
            {"rs.1", "rs.2"},
            170e-9,
            id="async-start wrapping a collective, paired by the done's operand",
        ),
        pytest.param(
            [
                (_CALL_START, "call-start.2", "all-reduce", 0, 5),
                (_FUSION, "fusion.2", "loop fusion", 10, 300),
                (_CALL_DONE, "call-done.2", "all-reduce", 400, 100),
            ],
            {"call-start.2", "call-done.2"},
            500e-9,
            id="a SparseCore offload's call-start to call-done",
        ),
    ],
)
def test_an_async_pair_is_one_execution_from_its_start_to_its_done(ops, names, span_s):
    assert device_samples(device_ops(_tpu_events(ops)), names) == pytest.approx([span_s] * 2)


def test_an_all_gather_fusion_is_timed_by_the_fusion_name():
    text = "%fusion.7 = bf16[4096]{0} fusion(bf16[1024]{0} %p.4), kind=kCustom, calls=%all-gather-fusion.1"
    ev = _tpu_events([(text, "fusion.7", "all-gather fusion", 0, 640), (_FUSION, "fusion.2", "loop fusion", 700, 5)])
    ops = device_ops(ev)
    assert device_samples(ops, {"fusion.7"}) == pytest.approx([640e-9] * 2)


def test_two_collectives_in_flight_each_get_their_own_span():
    """Two all-gathers overlap and finish in the other order: the done's operand pairs them
    (the earliest open start of the kind would pair them wrong), and an all-reduce runs
    asynchronously alongside."""

    def ag(i, what):
        shape = "(f32[8]{0}, f32[32]{0})"
        if what == "start":
            return f"%all-gather-start.{i} = {shape} all-gather-start(f32[8]{{0}} %p.{i})", f"all-gather-start.{i}"
        return (
            f"%all-gather-done.{i} = f32[32]{{0}} all-gather-done({shape} %all-gather-start.{i})",
            f"all-gather-done.{i}",
        )

    ar_start = "%all-reduce-start.4 = f32[8]{0} all-reduce-start(f32[8]{0} %q), to_apply=%add"
    ar_done = "%all-reduce-done.4 = f32[8]{0} all-reduce-done(f32[8]{0} %all-reduce-start.4)"
    ev = _tpu_events(
        [
            (*ag(1, "start"), "all-gather", 0, 10),
            (*ag(3, "start"), "all-gather", 10, 10),
            (ar_start, "all-reduce-start.4", "all-reduce", 20, 10),
            (*ag(3, "done"), "all-gather", 150, 50),  # all-gather 3: 10 .. 200
            (*ag(1, "done"), "all-gather", 350, 50),  # all-gather 1: 0 .. 400
            (ar_done, "all-reduce-done.4", "all-reduce", 400, 100),  # all-reduce: 20 .. 500
        ]
    )
    ops = device_ops(ev)
    assert device_samples(ops, {"all-gather-start.1", "all-gather-done.1"}) == pytest.approx([400e-9] * 2)
    assert device_samples(ops, {"all-gather-start.3", "all-gather-done.3"}) == pytest.approx([190e-9] * 2)
    assert device_samples(ops, {"all-reduce-start.4", "all-reduce-done.4"}) == pytest.approx([480e-9] * 2)


def test_gpu_nccl_and_rccl_kernels_are_joined_to_their_hlo_op():
    rows = []
    for dev in range(2):
        for step in range(2):
            t0 = 1e6 * step
            for kernel, op, dur in (
                (
                    "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                    "all-gather-start.1",
                    40_000,
                ),
                ("rccl_main_kernel_AllReduce_RING_SIMPLE_Sum_f32", "all-reduce.2", 25_000 + 1000 * dev),
                ("gemm_fusion_dot.kd", "gemm_fusion_dot", 5_000),
            ):
                rows.append(
                    (
                        f"/device:GPU:{dev}",
                        "Stream #14",
                        kernel,
                        t0,
                        float(dur),
                        op,
                        "jit_step",
                        None,
                        None,
                        None,
                        "5",
                        None,
                    )
                )
                t0 += 100_000
    ops = device_ops(pd.DataFrame(rows, columns=TABLE_COLUMNS))
    assert set(ops["hlo_module"]) == {"jit_step"}
    # the async all-gather's done runs no kernel: its sample is the kernel's time
    assert device_samples(ops, {"all-gather-start.1", "all-gather-done.1"}) == pytest.approx([40e-6] * 2)
    assert device_samples(ops, {"all-reduce.2"}) == pytest.approx([25.5e-6] * 2)


def test_op_steps_time_a_collective_after_arrival_and_with_waiting():
    # device 0: 0-1000 ns, device 1: 100-5000, device 2: 200-3000: the last arrives at 200 ns
    # (the CPU devices of one process, on the host's one clock)
    rows = [
        ("/host:CPU", "tf_XLAPjRtCpuClient/1", "all-gather.1", s, e - s, "all-gather.1", "jit_f", d, None)
        for d, s, e in ((0, 0, 1000), (1, 100, 5000), (2, 200, 3000))
    ]
    st = op_steps(device_ops(_events(rows))).iloc[0]
    assert st["after_arrival_s"] == pytest.approx(4800e-9) and st["op_time_s"] == st["after_arrival_s"]
    assert st["with_waiting_s"] == pytest.approx(5000e-9)
    assert op_summary(op_steps(device_ops(_events(rows)))).iloc[0]["with_waiting_s"] == pytest.approx(5000e-9)


def test_the_async_xla_ops_line_is_left_out_as_xprof_leaves_it_out():
    """The in-flight part of an async all-gather drawn on ``Async XLA Ops`` under the done's
    name must neither be taken for the done nor counted twice."""
    done = "%all-gather-done.1 = f32[32]{0} all-gather-done((f32[8]{0}, f32[32]{0}) %all-gather-start.1)"
    start = "%all-gather-start.1 = (f32[8]{0}, f32[32]{0}) all-gather-start(f32[8]{0} %p)"
    rows = []
    for dev in range(2):
        plane = f"/device:TPU:{dev}"
        rows += [
            (plane, "XLA Ops", start, 0.0, 20.0, *[None] * 4, "all-gather-start.1", "5", "all-gather"),
            (plane, "Async XLA Ops", done, 20.0, 700.0, *[None] * 4, "all-gather-done.1", "5", "all-gather"),
            (plane, "XLA Ops", done, 850.0, 50.0, *[None] * 4, "all-gather-done.1", "5", "all-gather"),
        ]
    ops = device_ops(pd.DataFrame(rows, columns=TABLE_COLUMNS))
    assert (
        ops[["hlo_op", "start_ns", "end_ns", "done_op"]].values.tolist()
        == [["all-gather-start.1", 0.0, 900.0, "all-gather-done.1"]] * 2
    )
    assert device_samples(ops, {"all-gather-start.1", "all-gather-done.1"}) == pytest.approx([900e-9])
