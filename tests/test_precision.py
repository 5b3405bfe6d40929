"""The whole-step and matmul programs (and the block's reference) compute every product at
``precision=HIGHEST``, so on TPU (bfloat16 passes by default) and GPU (TF32) a float32 check
fails only for a wrong result. Checked on CPU in the lowered StableHLO and the compiled HLO:
the CPU computes float32 either way, but XLA carries the precision the program asked for."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from jax.sharding import AxisType

from runner.worker.programs import block, matmul

DIMS = {"B": 8, "S": 8, "D": 16, "F": 32, "H": 2}
HIGHEST_STABLEHLO = "precision = [HIGHEST, HIGHEST]"


def _mesh():
    return jax.make_mesh((4, 2), ("X", "Y"), axis_types=(AxisType.Explicit,) * 2)


def _dots(text: str, pattern: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(pattern, line)]


@pytest.mark.parametrize("sharding, axes", [("fsdp", ["X"]), ("tp", ["Y"]), ("fsdp_tp", ["X", "Y"])])
def test_every_matmul_of_the_block_step_forward_and_backward_is_highest(sharding, axes):
    prog = block.build({"dims": DIMS, "sharding": sharding, "axes": axes}, _mesh(), "float32")
    lowered = prog.fn.lower(*prog.make_input())
    dots = _dots(lowered.as_text(), r"stablehlo\.dot_general")
    # 8 einsums forward; backward, both cotangents of each but the input x's in q, k, v: 8 + 13
    assert len(dots) == 21
    assert all(HIGHEST_STABLEHLO in d for d in dots), [d for d in dots if HIGHEST_STABLEHLO not in d][:1]
    compiled = _dots(lowered.compile().as_text(), r"= \S+ dot\(")
    assert compiled and all("operand_precision={highest,highest}" in d for d in compiled)


def test_the_block_reference_runs_the_same_highest_matmuls():
    # the reference is `forward` unsharded (identity for the collectives): its products are the step's
    x, w = block.host_inputs(DIMS, np.float32)
    ident = lambda a, *_: a  # noqa: E731
    jaxpr = jax.make_jaxpr(lambda x, w: block.forward(x, w, ident, ident))(x, w)
    dots = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "dot_general"]
    assert len(dots) == 8
    assert all(e.params["precision"] == (jax.lax.Precision.HIGHEST,) * 2 for e in dots)


@pytest.mark.parametrize(
    "expr, strategy",
    [
        ("A[I, J_X] * B[J, K] -> C[I, K]", "auto"),
        ("A[I, J_X] * B[J_X, K] -> C[I, K]", "matmul_then_allreduce"),
        ("A[I_X, J] * B[J, K_X] -> C[I, K_X]", "allgather_then_matmul"),
        ("A[I_X, J] * B[J, K_X] -> C[I, K_X]", "collective_matmul"),
        ("A[I, J_X] * B[J_X, K] -> C[I, K_X]", "collective_matmul"),
    ],
)
def test_every_matmul_program_multiplies_at_highest(expr, strategy):
    op = {"expr": expr, "dims": {"I": 64, "J": 64, "K": 64}, "strategy": strategy}
    prog = matmul.build(op, _mesh(), "float32")
    lowered = prog.fn.lower(*prog.make_input())
    dots = _dots(lowered.as_text(), r"stablehlo\.dot_general")
    assert dots and all(HIGHEST_STABLEHLO in d for d in dots), dots
    # the ring multiplies one block per device of the axis (4 here); the others one product
    assert len(dots) == (4 if strategy == "collective_matmul" else 1)
