"""The book's cost model for collectives, checked against values derived by hand from its formulas.

Constants used below (conf/hardware): v4p W_bidi = 9e10 B/s, T_min = 1e-6 s, C(bf16) =
2.75e14; v5e W_bidi = 9e10, W_unidir = 4.5e10; H100 W (NVLink egress) = 4.5e11.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from analysis.book.collective_cost import predict_collective
from analysis.book.errors import BookError
from analysis.book.hardware import load_hardware, wraparound_for
from analysis.book.predict import predict_expr

V4P, V5E, H100 = load_hardware("tpu_v4p"), load_hardware("tpu_v5e"), load_hardware("h100")
CUBE = {"X": 4, "Y": 4, "Z": 4}
rel = dict(rel=1e-9)


def test_question2_allgather_x_is_bandwidth_bound():
    # AllGather_X([B_X, D_Y]) on v4p 4x4x4, B=1024, D=4096, bf16. Each device ends with the
    # array gathered over X within its Y shard: bf16[1024, 4096/4] = 2 * 1024 * 1024 =
    # 2,097,152 B (seed 000: "2 MB per Y-shard"). X=4 wraps around (multiple of 4):
    # T = max(1e-6 * 4/2, 2097152 / 9e10) = max(2 us, 23.30 us) = 23.30 us.
    c = predict_expr("AllGather_X([B_X, D_Y])", CUBE, {"B": 1024, "D": 4096}, "bfloat16", V4P, "4x4x4")
    p = c.prediction
    assert p.V_bytes == 2 * 1024 * 1024
    assert p.time_s == pytest.approx(2097152 / 9e10, **rel)
    assert p.latency_time_s == pytest.approx(2e-6, **rel)
    assert (p.regime, p.topology, p.hops) == ("bandwidth", "ring", 2)
    assert c.result == "[B, D_Y]"


def test_question3_tiny_allgather_is_latency_bound():
    # AllGather_X([B_X]), B=128 bf16: V = 256 B; bandwidth 256/9e10 = 2.8 ns; a ring of 4
    # needs 4/2 = 2 hops of 1 us -> 2 us, latency-bound.
    p = predict_expr("AllGather_X([B_X])", CUBE, {"B": 128}, "bfloat16", V4P, "4x4x4").prediction
    assert p.V_bytes == 256
    assert p.time_s == pytest.approx(2e-6, **rel)
    assert p.regime == "latency"


def test_question2_two_axis_gather_doubles_bandwidth():
    # AllGather_XY([B_X, D_Y]): V = bf16[1024, 4096] = 8,388,608 B over k=2 rings:
    # max(1e-6 * (4+4)/2, 8388608 / (9e10 * 2)) = max(4 us, 46.60 us).
    p = predict_expr("AllGather_XY([B_X, D_Y])", CUBE, {"B": 1024, "D": 4096}, "bfloat16", V4P, "4x4x4").prediction
    assert p.V_bytes == 8 * 2**20
    assert p.time_s == pytest.approx(8388608 / 1.8e11, **rel)
    assert p.latency_time_s == pytest.approx(4e-6, **rel)


def test_question2_allreduce_z_and_allreduce_is_twice_allgather():
    # AllReduce_Z([B_X, D_Y]{U_Z}): V = the per-device input bf16[256, 1024] = 524,288 B;
    # AllReduce = ReduceScatter + AllGather = 2 * 524288 / 9e10 = 11.65 us.
    p = predict_expr("AllReduce_Z([B_X, D_Y]{U_Z})", CUBE, {"B": 1024, "D": 4096}, "bfloat16", V4P, "4x4x4").prediction
    assert p.V_bytes == 524288
    assert p.time_s == pytest.approx(2 * 524288 / 9e10, **rel)
    for sizes in ([4], [4, 4], [2]):
        for V in (1e3, 1e8):  # both regimes: latency and bandwidth each double
            ag = predict_collective("all_gather", V, sizes, V4P)
            ar = predict_collective("AllReduce", V, sizes, V4P)
            assert ar.time_s == pytest.approx(2 * ag.time_s, **rel)


def test_pop_quiz2_line_without_wraparound_vs_ring():
    # v5e mesh {X: 8, Y: 4}, AllGather_Y([E_Y, F]), E=2048, F=8192 bf16: V = 33,554,432 B.
    # v5e wraps only an axis of 16, so Y=4 is a line: (N-1) * (V/N) / W_unidir
    # = 3 * 8388608 / 4.5e10 = 559.24 us; the book's ring formula gives V / 9e10 = 372.83 us.
    expr, mesh = "AllGather_Y([E_Y, F])", {"X": 8, "Y": 4}
    p = predict_expr(expr, mesh, {"E": 2048, "F": 8192}, "bfloat16", V5E).prediction
    assert p.topology == "line" and p.regime == "bandwidth"
    assert p.time_s == pytest.approx(3 * 33554432 / 4 / 4.5e10, **rel)
    assert p.book_time_s == pytest.approx(33554432 / 9e10, **rel)
    assert p.time_s / p.book_time_s == pytest.approx(2 * 3 / 4)  # "about 2x": 2(N-1)/N
    assert "wraparound" in p.note
    # E=F=256: V = 131,072 B; bandwidth 3 * 32768 / 4.5e10 = 2.18 us; the line's 3 hops
    # of 1 us dominate -> 3 us, latency-bound (a ring would need 2 hops).
    p = predict_expr(expr, mesh, {"E": 256, "F": 256}, "bfloat16", V5E).prediction
    assert (p.time_s, p.regime) == (pytest.approx(3e-6), "latency")
    # The same gather over an axis of 16 on v5e is a ring: V / W_bidi.
    p16 = predict_collective("all_gather", 33554432, [16], V5E)
    assert p16.topology == "ring" and p16.time_s == pytest.approx(33554432 / 9e10, **rel)


def test_alltoall_is_a_quarter_of_allgather_on_a_ring():
    # 1-D ring: V / (4 W); N-D: V * max(N_i) / (4 * N * W) -> on 4x4, V * 4 / (4 * 16 * W) = V / (16 W).
    V = 1e9
    ag = predict_collective("all_gather", V, [16], V5E)
    a2a = predict_collective("all_to_all", V, [16], V5E)
    assert a2a.time_s == pytest.approx(ag.time_s / 4, **rel) == pytest.approx(V / (4 * 9e10), **rel)
    assert predict_collective("all_to_all", V, [4, 4], V4P).time_s == pytest.approx(V / (16 * 9e10), **rel)


def test_allreduce_prediction_every_field_on_a_ring_and_a_line():
    # v4p X=4 ring, V = 1e8 B: ReduceScatter = max(1 us * 2 hops, V / 9e10); AllReduce twice it.
    V = 1e8
    p = predict_collective("all_reduce", V, [4], V4P)
    assert (p.kind, p.topology, p.hops, p.regime, p.wraparound) == ("all_reduce", "ring", 4, "bandwidth", (True,))
    assert p.latency_time_s == pytest.approx(4e-6, **rel)
    assert p.bandwidth_time_s == pytest.approx(2 * V / 9e10, **rel) == pytest.approx(p.time_s, **rel)
    assert p.formula.startswith("2 * (ReduceScatter: max(") and p.formula.endswith(
        "[AllReduce = ReduceScatter + AllGather]"
    )
    assert (p.book_time_s, p.book_formula, p.note) == (None, None, "")
    # v5e Y=4 has no wraparound: a line of 3 hops one way, (N-1)(V/N)/W_unidir, twice; the
    # book's ring formula beside it, and a note that says why they differ.
    q = predict_collective("all_reduce", V, [4], V5E)
    assert (q.topology, q.hops, q.wraparound) == ("line", 6, (False,))
    assert q.latency_time_s == pytest.approx(6e-6, **rel)
    assert q.bandwidth_time_s == pytest.approx(2 * 3 * V / 4 / 4.5e10, **rel) == pytest.approx(q.time_s, **rel)
    assert q.book_time_s == pytest.approx(2 * V / 9e10, **rel)
    assert q.book_formula.startswith("2 * max(")
    assert q.note.startswith("axis of 4 has no wraparound on tpu_v5e: a line")
    # latency-bound: 1 KB over the line is its 6 hops of 1 us
    r = predict_collective("all_reduce", 1e3, [4], V5E)
    assert (r.regime, r.time_s) == ("latency", pytest.approx(6e-6, **rel))


def test_gpu_switch_formulas():
    # 8 GPUs, W = 4.5e11: AllGather V*7/(8W); AllToAll V*7/(64W); AllReduce 2x AllGather.
    V = 1e9
    ag = predict_collective("all_gather", V, [8], H100)
    assert ag.topology == "switch" and ag.time_s == pytest.approx(V * 7 / (8 * 4.5e11), **rel)
    assert predict_collective("reduce_scatter", V, [8], H100).time_s == pytest.approx(ag.time_s, **rel)
    assert predict_collective("all_to_all", V, [8], H100).time_s == pytest.approx(V * 7 / (64 * 4.5e11), **rel)
    assert predict_collective("all_reduce", V, [8], H100).time_s == pytest.approx(2 * ag.time_s, **rel)


def test_host_uses_the_ring_formula_with_caller_constants():
    cpu = load_hardware("cpu")
    with pytest.raises(BookError, match="hop_latency_s"):
        predict_collective("all_gather", 1e6, [8], cpu)
    fitted = dataclasses.replace(cpu, link_bw_bidir_Bps=2e9, hop_latency_s=2e-5)
    # max(2e-5 * 8/2, 1e6 / 2e9) = max(80 us, 500 us)
    p = predict_collective("all_gather", 1e6, [8], fitted)
    assert p.time_s == pytest.approx(5e-4, **rel) and p.topology == "ring"


def test_wraparound_rules_and_topology():
    assert wraparound_for(V4P, [4, 4, 4], "4x4x4") == [True, True, True]
    # v4p wraps only a slice of full 4x4x4 cubes: the mesh stands in for the slice without a topology
    assert wraparound_for(V4P, [2, 4]) == [False, False]
    assert wraparound_for(V4P, [4, 8]) == [True, True]
    assert wraparound_for(V5E, [8, 16], "8x16") == [False, True]
    assert wraparound_for(load_hardware("tpu_v3"), [4, 8]) == [True, True]
    with pytest.raises(BookError, match="4x8"):
        wraparound_for(V4P, [4, 4], "4x8")


def test_load_hardware_by_path_reads_unsigned_exponents(tmp_path):
    # PyYAML would read 4.5e10 as a string; the loader must make it a float.
    f = tmp_path / "chip.yaml"
    f.write_text(
        "name: chip\nkind: tpu\ninterconnect: torus\nwraparound: always\n"
        "link_bw_bidir_Bps: 4.5e10\nhop_latency_s: 1.0e-6\nflops_per_s: {bfloat16: 1e14}\n"
    )
    hw = load_hardware(str(f))
    assert hw.link_bw_bidir_Bps == 4.5e10 and hw.flops("bfloat16") == 1e14
    with pytest.raises(BookError, match="unknown hardware"):
        load_hardware("no_such_chip")


def test_errors_are_notation_errors():
    with pytest.raises(BookError, match="AllGather_Y"):
        predict_expr("AllGather_Y(A[I_X, J])", {"X": 4, "Y": 4}, {"I": 1024, "J": 2048}, "bfloat16", V4P)
    with pytest.raises(BookError, match="unknown collective"):
        predict_collective("broadcast", 1.0, [4], V4P)
    with pytest.raises(BookError, match="auto"):
        predict_collective("all_gather", 1.0, [4], load_hardware("auto"))
    assert math.isclose(predict_collective("all_gather", 1e6, [1], V4P).time_s, 0.0)
