"""Trace tables -> per-device op intervals, for the shapes CPU, TPU and GPU profiles have.

The reader itself is exercised on real CPU traces in test_runner.py; here the tables are
built by hand, because no TPU or GPU trace can be produced on the CI machine.
"""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.trace import EVENT_COLUMNS, TraceError, device_ops, op_steps, op_summary, read_xplane


def _events(rows) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=EVENT_COLUMNS)
    return df.astype({"start_ns": float, "duration_ns": float})


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
    # last start 30 ns, last end 130 ns: 100 ns from the last arrival; skew 30 ns
    assert s["op_time_s"] == pytest.approx(100e-9)
    assert s["arrival_skew_s"] == pytest.approx(30e-9)
    assert s["devices"] == 4


def test_gpu_stream_kernels_are_attributed_by_hlo_op_stat():
    rows = []
    for dev in range(2):
        for it in range(2):
            t0 = 5000.0 * it
            rows.append(
                (
                    f"/device:GPU:{dev}",
                    "Stream #13(Compute)",
                    "ncclDevKernel_AllGather_RING_LL(...)",
                    t0,
                    400.0,
                    "all-gather-start.1",
                    "jit_f",
                    None,
                    None,
                )
            )
            rows.append((f"/device:GPU:{dev}", "Stream #7(MemcpyH2D)", "MemcpyH2D", t0, 10.0, None, None, None, None))
            rows.append(
                (
                    f"/device:GPU:{dev}",
                    "Stream #13(Compute)",
                    "loop_fusion",
                    t0 + 500,
                    40.0,
                    "fusion.3",
                    "jit_f",
                    None,
                    None,
                )
            )
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
        rows.append(
            (
                "/device:GPU:0",
                "Stream #14(Compute,Memset)",
                "Memset 3",
                t0,
                800.0,
                "custom-call.1",
                "jit_f",
                None,
                scope,
            )
        )
        rows.append(
            (
                "/device:GPU:0",
                "Stream #14(Compute,Memset)",
                "nvjet_sm90_tst_256x128",
                t0 + 244_000,
                1_193_000.0,
                "custom-call.1",
                "jit_f",
                None,
                scope,
            )
        )
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
    from analysis.processes import global_device_ids

    # host 1 of a two-host TPU slice: its planes /device:TPU:0..3 are the chips with global ids 4, 5, 12, 13
    local = pd.Series([0, 1, 2, 3, 0])
    assert global_device_ids(local, [4, 5, 12, 13]).tolist() == [4, 5, 12, 13, 4]
    # numbers that are already global (not local ordinals) stay as they are
    assert global_device_ids(pd.Series([4, 7]), [4, 5, 6, 7]).tolist() == [4, 7]
    assert global_device_ids(local, None).tolist() == [0, 1, 2, 3, 0]
