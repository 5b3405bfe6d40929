"""The three estimators, rounds, the ceiling, the page-fault and check fixes, on real runs of
8 CPU devices. (The device estimator on hand-built TPU and GPU trace tables: tests/analysis/trace/test_ops.py; the
fits on one regime: tests/analysis/statistics/test_fit.py.)"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis.book.collectives import busbw_factor, nccl_S_bytes
from analysis.statistics.stats import combine_rounds
from runner import run

QUICK = ["timing.min_iters=5", "timing.budget_s=0.3", "trace.iters=3", "timing.rounds=1"]


# ---------------------------------------------------------------- rounds
def test_combined_interval_covers_the_spread_between_rounds():
    rng = np.random.default_rng(3)
    rounds = [rng.lognormal(np.log(m), 0.02, 100) for m in (1.0, 1.2, 1.4)]
    s = combine_rounds(rounds, seed=0)
    med = [float(np.median(r)) for r in rounds]
    assert s["median_s"] == pytest.approx(np.median(med))  # the median of the rounds' medians
    assert s["rounds"] == 3 and s["n"] == 300 and s["rounds_disagree"] is True
    # each round alone is known to about +-0.5%; the combined interval spans the rounds
    assert s["ci_low_s"] <= min(med) * 1.01 and s["ci_high_s"] >= max(med) * 0.99
    one = combine_rounds([rounds[0]])
    assert one["rel_ci_halfwidth"] < 0.01 and one["rounds_disagree"] is False


def test_rounds_that_agree_keep_a_tight_interval():
    rng = np.random.default_rng(4)
    s = combine_rounds([rng.lognormal(0, 0.02, 200) for _ in range(3)], seed=1)
    assert s["rounds_disagree"] is False and s["rel_ci_halfwidth"] < 0.01


# ---------------------------------------------------------------- real runs
def _run(compose_cfg, tmp_path, *overrides):
    return run(compose_cfg([*QUICK, *overrides]), tmp_path)


def test_the_loop_estimator_times_two_trip_counts_with_the_same_programs_every_round(compose_cfg, tmp_path):
    # (no comparison of the two estimators' times: on a shared machine two wall-clock timings
    # order either way; the slope's arithmetic is tested with a fake clock above, and the README
    # gives loop / step per size measured on a sweep)
    small = _run(compose_cfg, tmp_path / "small", "op.size_bytes=1KiB", "timing.rounds=2")
    # the cross-check kept however long a busy machine makes the 16 MiB step (timing.loop_check_below_s)
    large = _run(
        compose_cfg, tmp_path / "large", "op.size_bytes=16MiB", "timing.rounds=2", "timing.loop_check_below_s=null"
    )
    for r in (small, large):
        assert r["status"] == "ok", r.get("error")
        check = r["timing"]["loop_check"]
        K1, K2 = check["Ks"]
        assert check["ok"] and check["executions"] == {"all-gather": K2}, check
        assert K2 >= 4 and K1 == max(2, K2 // 4)
        # round 2 times the loop again only where round 1's disagreed with the step (tests/runner/worker/test_timing.py)
        loops = [rd["loop"] for rd in r["timing"]["rounds"] if "loop" in rd]
        assert len(loops) == (2 if r["timing"]["loop_rule"]["rerun"] else 1)
        assert all(lp["Ks"] == [K1, K2] for lp in loops)  # round 2 reused round 1's
        for lp in loops:
            assert len(lp["samples_s"]) == len(lp["call_s"]) >= 3
            want = [(t2 - t1) / (K2 - K1) for t1, t2 in lp["call_s"]]
            assert lp["samples_s"] == pytest.approx(want, rel=1e-12)
        assert r["timing"]["estimators"]["loop"]["K"] == K2
    # a 16 MiB step takes milliseconds here: K2 is the floor of 4, so the slope spans 2 repetitions
    assert large["timing"]["loop_check"]["Ks"] == [2, 4]


def test_a_run_records_three_estimators_faults_and_its_ceiling(compose_cfg, tmp_path):
    r = _run(compose_cfg, tmp_path, "op=all_reduce", "op.size_bytes=256KiB", "trace.iters=4")
    assert r["status"] == "ok", r.get("error")
    t = r["timing"]
    assert set(t["estimators"]) == {"step", "loop", "device"}
    assert t["estimator"] == "step" and "cpu" in t["estimator_reason"]
    assert t["summary"] == t["estimators"]["step"]
    assert len(t["device"]["samples_s"]) == 4 and t["device"]["instructions"]  # the psum, found by opcode
    assert t["page_faults_per_step"] is not None and t["rounds"][0]["page_faults_per_step"] >= 0
    assert t["rounds"][0]["cpu_count"] >= 1
    c = r["ceiling"]
    assert c["kind"] == "device_copy" and c["busbw_Bps"] > 0 and c["devices"] == 8
    # the copy per device is the collective's bus bytes (AllReduce: 2 V (n-1)/n)
    assert c["bytes_per_device"] == int(2 * (256 << 10) * 7 / 8)
    assert r["trace"]["profiler_slowdown"] > 0
    assert r["environment"]["malloc_env"]["MALLOC_ARENA_MAX"] == "1"
    json.loads((tmp_path / "result.json").read_text(), parse_constant=pytest.fail)  # strict JSON


def test_the_estimator_can_be_chosen_and_device_never_falls_back(compose_cfg, tmp_path):
    loop = _run(compose_cfg, tmp_path / "loop", "op.size_bytes=64KiB", "timing.estimator=loop")
    assert loop["timing"]["estimator"] == "loop" and loop["timing"]["summary"] == loop["timing"]["estimators"]["loop"]
    # without a trace there is no device time, and the step's wall time does not stand in for it
    # (tests/runner/worker/test_timing_no_fallback.py follows such a point to the console, summary.csv and report)
    dev = _run(compose_cfg, tmp_path / "dev", "op.size_bytes=64KiB", "timing.estimator=device", "trace.enabled=false")
    assert dev["timing"]["estimator"] == "device" and dev["timing"]["summary"] == {"n": 0}
    assert "not traced" in dev["timing"]["missing_reason"] and "step" in dev["timing"]["estimators"]


def test_device_times_get_rounds_where_device_is_the_estimator(compose_cfg, tmp_path):
    # on TPU/GPU (timing.estimator=auto) or when asked: every round traces again, so the device
    # estimator's interval spans the rounds as the step estimator's does; here on CPU, by asking
    dev = _run(compose_cfg, tmp_path / "dev", "op.size_bytes=64KiB", "timing.estimator=device", "timing.rounds=3")
    t = dev["timing"]
    assert t["estimator"] == "device" and t["summary"] == t["estimators"]["device"]
    assert t["estimators"]["device"]["rounds"] == 3
    assert [bool(r.get("device", {}).get("samples_s")) for r in t["rounds"]] == [False, True, True]
    # one trace in the point's folder (for XProf): the later rounds' went to temporary folders
    assert len(list((tmp_path / "dev" / "trace").rglob("*.xplane.pb"))) == 1
    # where step is the estimator (CPU's default) the later rounds do not trace
    step = _run(compose_cfg, tmp_path / "step", "op.size_bytes=64KiB", "timing.rounds=2")
    assert step["timing"]["estimators"]["device"]["rounds"] == 1
    assert "device" not in step["timing"]["rounds"][1]


# ---------------------------------------------------------------- bus bandwidth as nccl-tests
def nccl_tests_alltoall_busbw(count_per_peer: int, nranks: int, typesize: int, sec: float) -> float:
    """nccl-tests src/alltoall.cu AlltoAllGetBw, written out: baseBw = count*nranks*typesize/sec,
    busBw = baseBw * (nranks-1)/nranks (count is the per-peer element count)."""
    base = count_per_peer * nranks * typesize / sec
    return base * (nranks - 1) / nranks


@pytest.mark.parametrize("n", [2, 8])
def test_alltoall_bus_bandwidth_is_what_nccl_tests_prints(n):
    V, t, itemsize = 8 << 20, 1e-3, 4  # the whole array across the group, 1 ms
    per_rank_elems = V // n // itemsize
    count = per_rank_elems // n  # nccl-tests' per-peer chunk
    ours = nccl_S_bytes("all_to_all", V, n) / t * busbw_factor("all_to_all", n)
    assert ours == pytest.approx(nccl_tests_alltoall_busbw(count, n, itemsize, t))


def test_summary_divides_alltoall_by_the_per_rank_buffer(compose_cfg, tmp_path):
    from analysis.runs.rundir import read_results
    from analysis.runs.summary import summary_table

    r = _run(compose_cfg, tmp_path / "0_a2a", "op=all_to_all", "op.size_bytes=1MiB", "trace.enabled=false")
    assert r["status"] == "ok", r.get("error")
    row = summary_table(read_results(tmp_path)).iloc[0]
    n, t = 8, row["time_s"]
    assert row["S_bytes"] == (1 << 20) / n
    assert row["busbw_Bps"] == pytest.approx(nccl_tests_alltoall_busbw((1 << 20) // 4 // n // n, n, 4, t))


# ---------------------------------------------------------------- the check
def test_check_compares_every_device_copy_of_a_replicated_result():
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from runner.worker.result_check import check

    mesh = jax.make_mesh((8,), ("X",))
    want = np.arange(16, dtype=np.float32)
    # a replicated array whose copies on devices 1..7 are wrong (JAX does not verify replicas)
    copies = [jax.device_put(want if i == 0 else want + 1, d) for i, d in enumerate(mesh.devices.flat)]
    got = jax.make_array_from_single_device_arrays(want.shape, NamedSharding(mesh, P()), copies)
    res = check(got, want, "float32")
    assert res["passed"] is False and res["shards_checked"] == 8
    assert sorted(res["wrong_devices"]) == [d.id for d in list(mesh.devices.flat)[1:]]
    good = jax.device_put(want, NamedSharding(mesh, P()))
    assert check(good, want, "float32")["passed"] is True


def test_int8_sums_that_would_wrap_are_refused_before_compile(compose_cfg, tmp_path):
    from runner.config.op_spec import sum_inputs

    # 8 devices: 0..6 plus a per-device offset sums to at most 6*8 + 28 = 76 <= 127
    assert sum_inputs("int8", 8) == (7, True)
    assert sum_inputs("int8", 32) == (2, False)  # 0s and 1s: at most 32
    cfg = compose_cfg(
        [
            *QUICK,
            "op=all_reduce",
            "dtype=int8",
            "hardware.device_count=256",
            "mesh=x8",
            "mesh.axes.X=256",
            "op.size_bytes=4KiB",
        ]
    )
    from runner.config.spec import build_spec
    from runner.errors import ConfigError

    with pytest.raises(ConfigError, match="dtype=int8: a sum over 256 devices can exceed 127"):
        build_spec(cfg)
    r = _run(compose_cfg, tmp_path, "op=all_reduce", "dtype=int8", "op.size_bytes=4KiB", "trace.enabled=false")
    assert r["status"] == "ok" and r["check"]["passed"] is True


def test_unchecked_points_say_so_in_the_summary(compose_cfg, tmp_path):
    from analysis.runs.rundir import read_results
    from analysis.runs.summary import summary_table

    r = _run(compose_cfg, tmp_path / "0_x", "op.size_bytes=4KiB", "check_result=false", "trace.enabled=false")
    assert r["check"]["unchecked"] is True and r["check"]["passed"] is None
    row = summary_table(read_results(tmp_path)).iloc[0]
    assert row["checked"] is False or row["checked"] == False  # noqa: E712 (numpy bool)
    assert "unchecked" in row["caveats"]


# ---------------------------------------------------------------- collectives by opcode
def test_a_psum_named_all_reduce_counts_as_collective_time():
    import jax
    from jax.sharding import PartitionSpec as P

    from analysis.hlo import instruction_opcodes
    from analysis.trace.overlap import overlap_by_device

    mesh = jax.make_mesh((8,), ("X",))
    f = jax.jit(
        jax.shard_map(lambda x: jax.lax.psum(x * 2.0, "X"), mesh=mesh, in_specs=P("X"), out_specs=P(), check_vma=False)
    )
    x = jax.device_put(np.ones(64, np.float32), jax.sharding.NamedSharding(mesh, P("X")))
    text = f.lower(x).compile().as_text()
    opcodes = instruction_opcodes(text)
    psum = [n for n, c in opcodes.items() if c == "all-reduce"]
    assert psum and all(n.startswith("psum") for n in psum)  # JAX's name, not the opcode
    compute = next(n for n, c in opcodes.items() if c == "fusion")
    ops = pd.DataFrame(
        {
            "device": [0, 0],
            "hlo_op": [compute, psum[0]],
            "start_ns": [0.0, 100.0],
            "end_ns": [100.0, 160.0],
            "iteration": [0, 0],
        }
    )
    per = overlap_by_device(ops, opcodes)
    assert per["collective_s"].iloc[0] == pytest.approx(60e-9) and per["compute_s"].iloc[0] == pytest.approx(100e-9)
    # by name alone the psum would be compute and there would be no collective time at all
    assert per["collective_s"].iloc[0] > overlap_by_device(ops)["collective_s"].iloc[0] == 0


# ---------------------------------------------------------------- T_math as printed
def test_matmul_t_math_is_flops_over_d_times_c_as_the_report_prints():
    from analysis.book.hardware import load_hardware
    from analysis.matmul_cases import book_recipe

    hw = load_hardware("tpu_v5e")  # C = 1.97e14 FLOP/s in bfloat16
    # Question 4's strategy 1 as the book writes it: gather Y, then every device multiplies
    # the whole product (d = 1), not an eighth of it
    row = {
        "expr": "X[B, D] * Y[D_X, F] -> Z[B, F]",
        "mesh_axes": "X=8",
        "dims": "B=256 D=1024 F=512",
        "dtype": "bfloat16",
    }
    book = book_recipe(row, hw)
    flops = 2 * 256 * 1024 * 512
    assert book["flops"] == flops and book["work_devices"] == 1
    assert book["T_math_s"] == pytest.approx(flops / (1 * 1.97e14))
    row = dict(row, expr="X[B_X, D] * Y[D, F] -> Z[B_X, F]")  # case 1: the product split 8 ways
    book = book_recipe(row, hw)
    assert book["work_devices"] == 8 and book["T_math_s"] == pytest.approx(flops / (8 * 1.97e14))


def test_c_measured_on_cpu_gives_its_own_point_t_math_equal_to_its_time():
    import dataclasses

    from analysis.book.hardware import load_hardware
    from analysis.matmul_cases import book_recipe, measured_C

    # a case-2 point on 8 devices: the book's recipe gathers Y, so 4 devices split the product
    # (d = 4) and each pair repeats it; the fastest point of a sweep with no local matmul
    point = {
        "status": "ok",
        "emitted": ["all-gather over Y"],
        "expr": "A[I_X, J_Y] * B[J, K] -> C[I_X, K]",
        "mesh_axes": "X=4,Y=2",
        "dims": "I=128 J=128 K=128",
        "dtype": "float32",
        "flops": 2 * 128**3,
        "time_s": 340e-6,
        "device_count": 8,
        "flops_per_s_per_device": 2 * 128**3 / 340e-6 / 8,  # the roofline figure's rate: per mesh device
    }
    C, how = measured_C(pd.DataFrame([point]))
    assert C == pytest.approx(2 * 128**3 / (340e-6 * 4)) and "lower bound" in how
    hw = dataclasses.replace(load_hardware("cpu"), flops_per_s={"float32": C})
    book = book_recipe(point, hw)
    assert book["work_devices"] == 4 and book["T_math_s"] == pytest.approx(340e-6)


def test_the_ceiling_doubles_its_iterations_when_a_stall_makes_the_difference_negative():
    import itertools

    import jax

    from runner.worker.ceiling import device_copy

    # at 3.5 MiB a device K = 4: one stall in the shorter call made t(2K) - t(K) negative and
    # left a 4 MiB AllGather without a ceiling. Fake clock: the first 3 repeats read t(2K) = 1 s,
    # t(K) = 2 s; from then on t(2K) = 3 s, t(K) = 1 s
    calls = itertools.chain([0, 1, 0, 2] * 3, itertools.cycle([0, 3, 0, 1]))
    c = device_copy(jax.make_mesh((8,), ("X",)), 3670016, clock=lambda: float(next(calls)))
    assert c["iterations"] == 8  # doubled once
    assert c["busbw_Bps"] == 3670016 / ((3 - 1) / 8)


def test_unchecked_points_are_ringed_in_the_figures():
    import matplotlib.pyplot as plt

    from analysis.report.sweep_figures import _mark_unchecked

    p = pd.DataFrame({"V_bytes": [1024.0, 2048.0], "time_s": [1e-3, 2e-3], "caveats": ["", "unchecked; noisy"]})
    fig, ax = plt.subplots()
    _mark_unchecked(ax, p, "time_s")
    (ring,) = ax.collections
    assert ring.get_label() == "unchecked (check_result=false)"
    assert ring.get_offsets().tolist() == [[2048.0, 2e-3]]
    plt.close(fig)


def test_c_from_a_point_that_split_the_product_every_way_is_per_device():
    import pandas as pd

    from analysis.matmul_cases import measured_C

    # Question 4's strategy 2 on 8 devices: each multiplies its block of D (d = 8), although
    # the book's recipe for the expression (gather Y, then multiply) repeats the whole product
    point = {
        "status": "ok",
        "emitted": ["all-reduce over X"],
        "strategy": "matmul_then_allreduce",
        "expr": "X[B, D] * Y[D_X, F] -> Z[B, F]",
        "mesh_axes": "X=8",
        "dims": "B=256 D=1024 F=512",
        "dtype": "float32",
        "flops": 2 * 256 * 1024 * 512,
        "time_s": 1e-3,
        "device_count": 8,
    }
    C, _ = measured_C(pd.DataFrame([point]))
    assert C == pytest.approx(2 * 256 * 1024 * 512 / (1e-3 * 8))


# ---------------------------------------------------------------- the loop estimator's programs
def test_loop_Ks_span_at_least_two_repetitions_and_stop_at_512():
    from runner.worker.timing import loop_Ks

    # K2 calls take about loop_target_s, K2 the nearest power of two (the same from sweep to
    # sweep: the next finds the programs compiled); K1 = K2 / 4
    assert loop_Ks(1e-3, 0.02) == [4, 16]  # 20 repetitions' worth: 16 (a factor 1.25 off), not 32 (1.6)
    assert loop_Ks(0.85e-3, 0.02) == [8, 32]  # 23.5: 32 is 1.36 off, 16 is 1.47: the nearest in ratio
    assert loop_Ks(1.1e-3, 0.02) == loop_Ks(1.3e-3, 0.02) == [4, 16]  # a step a little slower: the same K
    assert loop_Ks(6e-3, 0.02) == [2, 4]  # a 16 MiB ReduceScatter: 4 and 2, not K = 3
    assert loop_Ks(2e-3, 0.02) == [2, 8]
    assert loop_Ks(1.0, 0.02) == [2, 4]
    assert loop_Ks(1e-6, 0.02) == [128, 512]


def test_the_loop_estimate_is_the_slope_so_a_per_call_cost_cancels():
    from runner.worker.timing import time_loop

    # every call pays 30 ms once (dispatch, the inputs' copy before the while loop) and 5 ms
    # a repetition: t(K) / K would read 8.75 ms at K = 8, 20 ms at K = 2
    now, order = [0.0], []

    def call(K):
        order.append(K)
        now[0] += 0.030 + 0.005 * K

    timing = {"loop_max_samples": 30, "target_rel_ci": 0.05, "budget_s": 100.0}
    out = time_loop([lambda: call(2), lambda: call(8)], [2, 8], timing, clock=lambda: now[0])
    assert out["samples_s"] == pytest.approx([0.005] * 3, rel=1e-9)  # (0.07 - 0.04) / 6, stopped at 3
    assert out["K"] == 8 and out["Ks"] == [2, 8] and out["stop_reason"] == "ci_tight"
    assert out["call_s"][0] == pytest.approx([0.040, 0.070], rel=1e-9)
    # one warm-up call of each, then the pairs alternate which call goes first
    assert order == [2, 8, 2, 8, 8, 2, 2, 8]


def test_a_later_round_reuses_round_ones_trip_counts():
    from runner.worker.timing import given_Ks

    assert given_Ks([2, 8]) == [2, 8] and given_Ks(None) is None
    assert given_Ks(20) == [5, 20] and given_Ks(2) == [2, 3]  # a result written with one K


def test_the_loop_program_knows_its_trip_count_and_runs_the_collective_K_times():
    import jax
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from runner.worker.programs.loop import LoopPrograms

    mesh = jax.make_mesh((8,), ("X",), axis_types=(AxisType.Explicit,))
    step = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x, "X"), mesh=mesh, in_specs=P("X"), out_specs=P()))
    x = jax.device_put(np.arange(32, dtype=np.float32), NamedSharding(mesh, P("X")))
    progs = LoopPrograms(step, mesh, (x,), step.lower(x).compile().as_text())
    calls = progs.calls([2, 5])
    assert calls is not None and progs.check["ok"], progs.check
    assert progs.check["executions"] == {"all-reduce": 5} and progs.check["Ks"] == [2, 5]
    # K is a compile-time constant: XLA annotates the trip count (a GPU while loop then never
    # copies its condition to the host), one compiled program per K
    whiles = [line for line in progs.compiled[5].as_text().splitlines() if " while(" in line]
    assert len(whiles) == 1 and '"known_trip_count":{"n":"5"}' in whiles[0]
    out = calls[1]()  # runs, taking only the inputs (K is not an argument of the compiled call)
    assert out[0].shape == (32,)


_ADD = (
    "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
    "  ROOT %s = f32[] add(%a, %b)\n}\n"
)
_AR = "all-reduce({x}), replica_groups={{{{0,1,2,3,4,5,6,7}}}}, to_apply=%add"
_STEP_HLO = (
    "HloModule step, num_partitions=8\n\n"
    + _ADD
    + "\nENTRY %main (p: f32[8]) -> f32[8] {\n  %p = f32[8] parameter(0)\n  ROOT %c = f32[8] "
    + _AR.format(x="%p")
    + "\n}\n"
)


def _loop_hlo(in_body: int, trip: int | None, peeled: int = 0) -> str:
    """A loop program whose while body holds ``in_body`` all-reduces, with ``trip`` as XLA's
    known trip count (None: not annotated) and ``peeled`` all-reduces left before the loop."""
    body = ["  %t = (s32[], f32[8]) parameter(0)", "  %i = s32[] get-tuple-element(%t), index=0"]
    body.append("  %x0 = f32[8] get-tuple-element(%t), index=1")
    for j in range(in_body):
        body.append(f"  %x{j + 1} = f32[8] {_AR.format(x=f'%x{j}')}")
    body += ["  %one = s32[] constant(1)", "  %j = s32[] add(%i, %one)"]
    body.append(f"  ROOT %r = (s32[], f32[8]) tuple(%j, %x{in_body})")
    cond = [
        "  %t = (s32[], f32[8]) parameter(0)",
        "  %i = s32[] get-tuple-element(%t), index=0",
        f"  %n = s32[] constant({trip or 4})",
        "  ROOT %lt = pred[] compare(%i, %n), direction=LT",
    ]
    entry = ["  %y0 = f32[8] parameter(0)"]
    for j in range(peeled):
        entry.append(f"  %y{j + 1} = f32[8] {_AR.format(x=f'%y{j}')}")
    config = f', backend_config={{"known_trip_count":{{"n":"{trip}"}}}}' if trip is not None else ""
    entry += [
        "  %z = s32[] constant(0)",
        f"  %t0 = (s32[], f32[8]) tuple(%z, %y{peeled})",
        f"  ROOT %w = (s32[], f32[8]) while(%t0), condition=%cond, body=%body{config}",
    ]
    return (
        "HloModule loop, num_partitions=8\n\n"
        + _ADD
        + "\n%body (t: (s32[], f32[8])) -> (s32[], f32[8]) {\n"
        + "\n".join(body)
        + "\n}\n\n%cond (t: (s32[], f32[8])) -> pred[] {\n"
        + "\n".join(cond)
        + "\n}\n\nENTRY %main (p: f32[8]) -> (s32[], f32[8]) {\n"
        + "\n".join(entry)
        + "\n}\n"
    )


@pytest.mark.parametrize(
    "in_body, trip, peeled, K, ok, unroll, runs",
    [
        (1, 8, 0, 8, True, 1, 8),  # as written: one repetition per iteration
        (2, 4, 0, 8, True, 2, 8),  # XLA unrolled the body twice and halved the trip count
        (2, 4, 1, 9, True, 2, 9),  # ... and peeled the odd iteration off before the loop
        (2, 5, 0, 8, False, 2, 10),  # a repetition too many for K = 8
        (0, 8, 1, 8, False, None, 1),  # hoisted out of the loop: runs once
        (3, 8, 0, 8, False, 3, 24),
        (2, None, 0, 8, True, 2, None),  # no trip count in the HLO: a whole multiple in the body passes
        (0, None, 1, 8, False, None, 1),  # (a loop without collectives needs no trip count)
    ],
)
def test_loop_check_counts_executions_and_accepts_an_unrolled_body(in_body, trip, peeled, K, ok, unroll, runs):
    from runner.worker.programs.loop import loop_check

    got = loop_check(_STEP_HLO, _loop_hlo(in_body, trip, peeled), K)
    assert got["ok"] is ok, got
    assert got["unroll"] == unroll
    assert got["executions"] == (None if runs is None else {"all-reduce": runs})
    assert (got["why"] == "") is ok


def test_loop_check_wants_every_kind_in_the_steps_proportion():
    from collections import Counter

    from runner.worker.programs.loop import _multiple

    step = Counter({"all-reduce": 1, "all-gather": 2})
    assert _multiple(Counter({"all-reduce": 2, "all-gather": 4}), step) == 2
    assert _multiple(Counter({"all-reduce": 2, "all-gather": 2}), step) is None
    assert _multiple(Counter({"all-reduce": 1}), step) is None
    assert _multiple(Counter(), Counter()) is None
