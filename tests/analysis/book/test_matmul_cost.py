"""Sharded matmuls as the book plans them (analysis.matmul), checked against values derived
by hand from its formulas.

Constants used below (conf/hardware): v4p W_bidi = 9e10 B/s, T_min = 1e-6 s, C(bf16) = 2.75e14.
"""

from __future__ import annotations

import pytest

from analysis.book.hardware import load_hardware
from analysis.book.matmul_cost import compare_q4_strategies
from analysis.book.predict import predict_expr

V4P = load_hardware("tpu_v4p")
rel = dict(rel=1e-9)


# Matmuls on v4p, mesh {X: 4, Y: 4}, I=1024, J=2048, K=4096, bf16. FLOPs = 2*I*J*K = 1.718e10.
MESH, DIMS = {"X": 4, "Y": 4}, {"I": 1024, "J": 2048, "K": 4096}
FLOPS = 2 * 1024 * 2048 * 4096


def mm(expr: str):
    return predict_expr(expr, MESH, DIMS, "bfloat16", V4P)


def test_case1_no_communication():
    # All 16 devices do distinct work: T_math = FLOPS / (16 * 2.75e14) = 3.90 us.
    r = mm("A[I_X, J] * B[J, K_Y] -> C[I_X, K_Y]")
    assert (r.case, r.collectives, r.T_comms_s) == (1, (), 0)
    assert r.flops == FLOPS and r.devices == 16
    assert r.T_math_s == pytest.approx(FLOPS / (16 * 2.75e14), **rel)


def test_case2_gathers_the_sharded_input():
    # AllGather_X(A[I, J_X]): V = bf16[1024, 2048] = 4 MiB -> 4194304 / 9e10 = 46.60 us; every
    # device then does the whole matmul: T_math = FLOPS / 2.75e14 = 62.47 us (compute-bound).
    r = mm("A[I, J_X] * B[J, K] -> C[I, K]")
    assert r.case == 2 and [c.expression for c in r.collectives] == ["AllGather_X(A[I, J_X])"]
    assert r.T_comms_s == pytest.approx(4194304 / 9e10, **rel)
    assert r.T_math_s == pytest.approx(FLOPS / 2.75e14, **rel) and r.bound == "compute"
    assert r.serial_time_s == pytest.approx(r.T_math_s + r.T_comms_s, **rel)
    assert any("strategy 2" in a for a in r.alternatives)


def test_case3_allreduce_or_reducescatter():
    # Partial sums C[I, K]{U_X}: V = bf16[1024, 4096] = 8 MiB. AllReduce = 2 * V / W = 186.41 us;
    # a sharded output needs only the ReduceScatter: V / W = 93.21 us. 4 devices: T_math 15.62 us.
    r = mm("A[I, J_X] * B[J_X, K] -> C[I, K]")
    assert r.case == 3 and [c.expression for c in r.collectives] == ["AllReduce_X(C[I, K]{U_X})"]
    assert r.T_comms_s == pytest.approx(2 * 8388608 / 9e10, **rel) and r.devices == 4
    assert any("ReduceScatter_{X,K}" in a for a in r.alternatives)
    r = mm("A[I, J_X] * B[J_X, K] -> C[I, K_X]")
    assert [c.expression for c in r.collectives] == ["ReduceScatter_{X,K}(C[I, K]{U_X})"]
    assert r.T_comms_s == pytest.approx(8388608 / 9e10, **rel)
    assert mm("A[I, J_X] * B[J_X, K] -> C[I, K]{U_X}").collectives == ()


def test_case4_gathers_one_input():
    # Invalid as written: gathering A moves bf16[1024, 2048] = 4 MiB, B bf16[2048, 4096] = 16 MiB,
    # so gather A (the smaller): 46.60 us. If the output keeps I_X, B must be gathered instead.
    r = mm("A[I_X, J] * B[J, K_X] -> C[I_X, K_X]")
    assert r.case == 4 and [c.expression for c in r.collectives] == ["AllGather_X(A[I_X, J])"]
    assert r.T_comms_s == pytest.approx(4194304 / 9e10, **rel)
    assert any("AllGather_X(B[J, K_X])" in a for a in r.alternatives)
    assert any("twice" in n for n in r.notes)
    r = mm("A[I_X, J] * B[J, K_X] -> C[I_X, K]")
    assert r.case == 4 and [c.expression for c in r.collectives] == ["AllGather_X(B[J, K_X])"]


def test_replicated_output_gathers_the_smaller_side():
    # C[I, K] from A[I_X, J]: gather A (4 MiB) before, rather than C (8 MiB) after.
    r = mm("A[I_X, J] * B[J, K] -> C[I, K]")
    assert [c.expression for c in r.collectives] == ["AllGather_X(A[I_X, J])"]


def test_question4_strategies():
    # B=1024, D=4096, F=8192, X=4, bf16 (2 bytes) on v4p:
    # strategy 1: max(2BDF/C, 2DF/W) = max(249.89 us, 745.65 us) = 745.65 us
    # strategy 2: max(2BDF/(XC), 2*2*B*F/W) = max(62.47 us, 372.83 us) = 372.83 us -> 2 wins.
    # Comms-bound, so the crossover is D > 2B: B* = D/2 = 2048 (strategy 1 still flat there:
    # 2048 <= b*C/(2W) = 3055.6).
    q = compare_q4_strategies(1024, 4096, 8192, 4, V4P)
    assert q.strategy1_time_s == pytest.approx(2 * 4096 * 8192 / 9e10, **rel)
    assert q.strategy2_time_s == pytest.approx(4 * 1024 * 8192 / 9e10, **rel)
    assert q.winner == 2 and q.crossover_B == pytest.approx(2048)
    assert compare_q4_strategies(4096, 4096, 8192, 4, V4P).winner == 1
    # D=16384: B* = 8192 > 3055.6, so strategy 2 wins at every B.
    assert compare_q4_strategies(1024, 16384, 8192, 4, V4P).crossover_B is None
    assert compare_q4_strategies(100_000, 16384, 8192, 4, V4P).winner == 2
