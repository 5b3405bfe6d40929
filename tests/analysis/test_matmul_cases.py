"""The matmul report's pure pieces: the book-vs-HLO verdict and the Question 4 crossover."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.book.hardware import load_hardware
from analysis.matmul_cases import explain
from analysis.strategy_crossover import measured_crossover, model_crossover, q4_table


def test_explain_marks_and_says_why():
    assert explain(["all-gather over X"], ["all-gather over X"], "auto", 2) == ("same", "")
    mark, why = explain(["reduce-scatter over X"], ["all-reduce over X"], "auto", 3)
    assert mark == "DIFFERS" and "all-reduce + dynamic-slice" in why
    mark, why = explain(["all-gather over X"], ["collective-permute over X"] * 7, "collective_matmul", 4)
    assert mark == "DIFFERS" and "ring" in why


def _points(times1, times2, Ds):
    rows = []
    for s, times in (("allgather_then_matmul", times1), ("matmul_then_allreduce", times2)):
        rows += [
            {
                "status": "ok",
                "strategy": s,
                "expr": "X[B, D] * Y[D_X, F] -> Z[B, F]",
                "dims": f"B=256 D={d} F=512",
                "time_s": t,
            }
            for d, t in zip(Ds, times)
        ]
    return pd.DataFrame(rows)


def test_crossover_is_interpolated_where_the_winner_changes():
    q4 = q4_table(_points([1.0, 1.0, 1.0, 1.0], [2.0, 1.5, 0.5, 0.25], [16, 32, 64, 128]))
    assert list(q4["value"]) == [16, 32, 64, 128]  # numeric order, not the dims string's
    assert q4["dim"].iloc[0] == "D"
    cross = measured_crossover(q4)
    assert 32 < cross < 64
    # ratio 1.5 at 32 and 0.5 at 64: log-linear interpolation puts 1.0 at 32 * 2**(ln1.5/ln3)
    assert cross == pytest.approx(32 * 2 ** (0.4054651 / 1.0986123), rel=1e-6)
    assert measured_crossover(q4_table(_points([1, 1], [0.5, 0.4], [16, 32]))) is None


def test_model_crossover_on_tpu_v5e_is_d_equals_2b():
    # Book: with compute hidden, strategy 2 moves fewer bytes once D > 2B (B = 256 -> 512).
    hw = load_hardware("tpu_v5e")
    mc = model_crossover(
        "X[B, D] * Y[D_X, F] -> Z[B, F]", {"B": 256, "D": 1024, "F": 512}, "D", {"X": 8}, "bfloat16", hw
    )
    assert mc == 512


def test_matmul_headline_states_the_answer_of_a_question4_sweep():
    from analysis.matmul_cases import matmul_headline

    # strategy 2 loses at D=16 (2x) and wins at D=64 (0.5x): the log-space crossover is D = 32
    points = _points([1e-3, 2e-3], [2e-3, 1e-3], [16, 64])
    table = pd.DataFrame(
        {
            "point": ["a", "b", "c", "d", "e"],
            "status": ["ok", "ok", "ok", "ok", "failed"],
            "strategy": ["allgather_then_matmul"] * 2 + ["matmul_then_allreduce"] * 2 + [None],
            "match": ["same", "same", "DIFFERS", "DIFFERS", ""],
            "FLOP/s": [4e9, 8e9, 2e9, 9e9, None],
            "time (s)": [1e-3, 2e-3, 2e-3, 1e-3, None],
            "T_math (s)": [0.5e-3, 1e-3, 1e-3, 0.5e-3, None],
            "max (s)": [0.5e-3, 1e-3, 2e-3, 2e-3, None],
        }
    )
    assert matmul_headline(points, table) == [
        "5 matmul points: 4 ok, 1 failed; the compiled HLO has the collectives the book prescribes in 2 of 4 "
        "(the other 2: by design or XLA's choice, see the case table).",
        "Fastest: `d` (matmul_then_allreduce) at 9 GFLOP/s in 1 ms.",
        # time / max(T_math, T_comms): 2, 2, 1, 0.5
        "Measured / the book's max(T_math, T_comms): median 1.5 over 4 points.",
        "Question 4 (`X[B, D] * Y[D_X, F] -> Z[B, F]`): multiply-then-AllReduce starts to win at D ≈ 32.",
    ]


def test_T_math_names_the_point_C_came_from_and_leaves_it_out_of_the_median():
    from analysis.matmul_cases import C_source_point, matmul_headline, measured_C

    # C per working device: a 8e9 / (1 ms x 8) = 1e12 and b 5e11 without communication; c is
    # faster (2e12) but communicates, so C comes from a
    points = pd.DataFrame(
        {
            "point": ["a", "b", "c"],
            "status": "ok",
            "strategy": "matmul_then_allreduce",
            "device_count": 8,
            "flops": [8e9, 4e9, 16e9],
            "time_s": [1e-3, 1e-3, 1e-3],
            "emitted": [[], [], ["all-reduce over X"]],
            "expr": "X[B, D] * Y[D_X, F] -> Z[B, F]",
            "dims": ["B=256 D=64 F=512", "B=256 D=32 F=512", "B=256 D=128 F=512"],
        }
    )
    assert measured_C(points) == (1e12, "the fastest matmul without communication in this sweep")
    assert C_source_point(points) == "a"
    table = pd.DataFrame(
        {
            "point": ["a", "b", "c"],
            "status": "ok",
            "strategy": "matmul_then_allreduce",
            "match": "same",
            "FLOP/s": [8e9, 4e9, 16e9],
            "time (s)": [1e-3, 1e-3, 1e-3],
            # a's T_math is its own time (C came from it); b and c read 2x and 3x the model
            "T_math (s)": [1e-3, 0.5e-3, 1e-3 / 3],
            "max (s)": [None, None, None],
        }
    )
    said = matmul_headline(points, table, c_point="a")
    assert said[2] == (
        "Measured / the book's T_math (no link constants for T_comms): median 2.5 over 2 points "
        "(leaving out `a`, whose time gave C)."
    )
    assert matmul_headline(points, table)[2].endswith("median 2 over 3 points.")  # with a: pulled to 1 by construction
