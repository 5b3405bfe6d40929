"""``precision`` (default, high, highest: ``jax.lax.Precision``'s names) reaches every matmul of
the matmul programs and of the transformer block's step, forward and backward, in the lowered
StableHLO and the compiled HLO; the block's reference stays at highest and its tolerance
follows the precision; the key is validated before anything runs and recorded in result.json
and summary.csv. Checked on CPU: the CPU computes float32 at every precision, but XLA carries
the precision the program asked for (``default`` has no ``operand_precision`` in the compiled
HLO)."""

from __future__ import annotations

import json
import re

import jax
import numpy as np
import pytest
from jax.sharding import AxisType
from shardlab_cli import runner as shardlab_runner

from analysis.runs.record import Result
from analysis.runs.summary import summary_table
from runner import run
from runner.config.op_spec import BlockOp, MatmulOp
from runner.config.spec import build_spec
from runner.worker import point_cache
from runner.worker.programs import block, matmul

DIMS = {"B": 8, "S": 8, "D": 16, "F": 32, "H": 2}
PRECISIONS = ["default", "high", "highest"]
QUICK = ["timing.min_iters=3", "timing.budget_s=0.1", "timing.warmup_min_iters=1", "timing.rounds=1"]
QUICK += ["timing.loop=false", "trace.enabled=false"]


def _mesh():
    return jax.make_mesh((4, 2), ("X", "Y"), axis_types=(AxisType.Explicit,) * 2)


def _dots(text: str, pattern: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(pattern, line)]


def _assert_at(lowered, precision: str) -> int:
    """Every dot of ``lowered`` at ``precision``, lowered and compiled; the number of dots."""
    dots = _dots(lowered.as_text(), r"stablehlo\.dot_general")
    want = f"precision = [{precision.upper()}, {precision.upper()}]"
    assert dots and all(want in d for d in dots), [d for d in dots if want not in d][:1]
    compiled = _dots(lowered.compile().as_text(), r"= \S+ dot\(")
    assert compiled
    if precision == "default":  # DEFAULT is XLA's absence of a precision config
        assert not [d for d in compiled if "operand_precision" in d], compiled[:1]
    else:
        assert all(f"operand_precision={{{precision},{precision}}}" in d for d in compiled), compiled[:1]
    return len(dots)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("sharding, axes", [("fsdp", ["X"]), ("tp", ["Y"]), ("fsdp_tp", ["X", "Y"])])
def test_every_matmul_of_the_block_step_forward_and_backward_runs_at_the_precision(sharding, axes, precision):
    prog = block.build(BlockOp(sharding, tuple(axes), DIMS), _mesh(), "float32", precision)
    # 8 einsums forward; backward, both cotangents of each but the input x's in q, k, v: 8 + 13
    assert _assert_at(prog.fn.lower(*prog.make_input()), precision) == 21


def test_the_block_reference_runs_at_highest_whatever_the_step_runs_at(monkeypatch):
    # the reference is `forward` unsharded (identity for the collectives), always at HIGHEST
    asked = []
    real = block.forward

    def recording(x, w, gather, reduce_tp, precision):
        asked.append(precision)
        return real(x, w, gather, reduce_tp, precision)

    monkeypatch.setattr(block, "forward", recording)
    prog = block.build(BlockOp("fsdp", ("X",), DIMS), _mesh(), "float32", "default")
    prog.fn.lower(*prog.make_input())
    prog.reference()
    assert asked == [jax.lax.Precision.DEFAULT, jax.lax.Precision.HIGHEST]


@pytest.mark.parametrize(
    "dtype, precision, platform, tolerance",
    [
        ("float32", "highest", "tpu", 1e-4),
        ("float32", "highest", "gpu", 1e-4),
        ("float32", "default", "cpu", 1e-4),  # a CPU computes float32 at every precision
        ("float32", "high", "cpu", 1e-4),
        ("float32", "default", "tpu", 2e-2),  # one bfloat16 pass
        ("float32", "high", "tpu", 2e-2),  # three
        ("float32", "default", "gpu", 2e-2),  # TF32
        ("float32", "high", "gpu", 2e-2),
        ("bfloat16", "highest", "cpu", 2e-2),
        ("bfloat16", "default", "tpu", 2e-2),
    ],
)
def test_the_block_checks_float32_at_1e4_only_where_it_is_float32_arithmetic(dtype, precision, platform, tolerance):
    assert block.tolerance(dtype, precision, platform) == tolerance


def test_the_block_program_takes_the_tolerance_of_its_devices():
    prog = block.build(BlockOp("tp", ("Y",), DIMS), _mesh(), "float32", "default")
    assert prog.tolerance == 1e-4  # on this CPU


@pytest.mark.parametrize("precision", PRECISIONS)
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
def test_every_matmul_program_multiplies_at_the_precision(expr, strategy, precision):
    op = MatmulOp(expr, {"I": 64, "J": 64, "K": 64}, strategy, ("X",))
    prog = matmul.build(op, _mesh(), "float32", precision)
    # the ring multiplies one block per device of the axis (4 here); the others one product
    assert _assert_at(prog.fn.lower(*prog.make_input()), precision) == (4 if strategy == "collective_matmul" else 1)


# ---------------------------------------------------------------- the config key
def test_precision_defaults_to_default_and_reaches_the_spec(compose_cfg):
    assert build_spec(compose_cfg(["op=matmul", "mesh=x8"]))["precision"] == "default"
    assert build_spec(compose_cfg(["op=matmul", "mesh=x8", "precision=highest"]))["precision"] == "highest"


def test_a_bad_precision_exits_2_naming_the_key_and_its_values(tmp_path):
    proc = shardlab_runner("precision=fast", f"hydra.run.dir={tmp_path}/run", timeout=120, expect=2)
    out = proc.stdout + proc.stderr
    for needle in ("'fast'", "precision", "default", "high", "highest"):
        assert needle in out, out
    assert not (tmp_path / "run" / "hlo").exists()


def test_build_spec_refuses_a_precision_the_schema_did_not_check(compose_cfg):
    # a config built without the schema (a plain dict node) meets spec.py's own check
    from omegaconf import OmegaConf

    from runner.errors import ConfigError

    cfg = OmegaConf.create(OmegaConf.to_container(compose_cfg(["op=matmul", "mesh=x8"]), enum_to_str=True))
    cfg.precision = "fast"
    with pytest.raises(ConfigError) as err:
        build_spec(cfg)
    assert str(err.value) == "precision='fast': allowed precisions are default, high, highest"


def test_two_precisions_of_one_point_are_two_prepared_points(compose_cfg):
    # a sweep over precision must not time one precision's compiled program for the other
    specs = [build_spec(compose_cfg(["op=matmul", "mesh=x8", f"precision={p}"])) for p in PRECISIONS]
    assert len({point_cache.key(s) for s in specs}) == 3


@pytest.mark.parametrize(
    "precision, attribute", [("highest", "operand_precision={highest,highest}"), ("default", None)]
)
def test_a_run_records_its_precision_and_compiles_at_it(compose_cfg, tmp_path, precision, attribute):
    dims = ["op.dims.I=64", "op.dims.J=64", "op.dims.K=64"]
    result = run(compose_cfg(["op=matmul", "mesh=x8", f"precision={precision}", *dims, *QUICK]), tmp_path)
    assert result["status"] == "ok", result.get("error")
    assert json.loads((tmp_path / "result.json").read_text())["spec"]["precision"] == precision
    dots = _dots((tmp_path / result["files"]["hlo_compiled"]).read_text(), r"= \S+ dot\(")
    assert dots and all((attribute in d) if attribute else ("operand_precision" not in d) for d in dots), dots
    # the check's device run is its own phase; the check itself the reference and the comparison
    assert {"check_run", "check"} <= set(result["phases_s"]) and result["check"]["max_rel_error"] == 0.0
    assert summary_table([Result.from_json(result)])["precision"].tolist() == [precision]


def test_the_summary_reads_the_precision_as_it_ran_else_as_asked_else_none():
    ran = {"point": "a", "status": "ok", "spec": {"op": "matmul", "precision": "highest"}, "config": {}}
    failed = {"point": "b", "status": "failed", "config": {"op": {"name": "matmul"}, "precision": "high"}}
    old = {"point": "c", "status": "ok", "spec": {"op": "matmul", "dtype": "float32"}, "config": {"dtype": "float32"}}
    got = summary_table([Result.from_json(r) for r in (ran, failed, old)]).set_index("point")["precision"]
    assert got[["a", "b"]].tolist() == ["highest", "high"] and got.isna()["c"]  # c: from before the key


def test_the_matmul_reference_is_exact_at_every_precision(compose_cfg):
    # the inputs are exact in bfloat16 and TF32, so is every product and every float32 sum:
    # the tolerance stays 0 for float32, whatever precision the product runs at
    for precision in PRECISIONS:
        op = MatmulOp("A[I, J_X] * B[J_X, K] -> C[I, K]", {"I": 16, "J": 64, "K": 16}, "auto", ("X",))
        prog = matmul.build(op, _mesh(), "float32", precision)
        assert prog.tolerance is None
        assert np.array_equal(np.asarray(prog.fn(*prog.make_input())), np.asarray(prog.reference()))


# ---------------------------------------------------------------- the rate the model uses
EXPR, MM_DIMS = "A[I, J_X] * B[J, K] -> C[I, K]", {"I": 8192, "J": 8192, "K": 8192}
H100_RATES = [("default", 4.947e14), ("high", 4.947e14), ("highest", 6.7e13), (None, 6.7e13)]


@pytest.mark.parametrize("precision, C", H100_RATES)
def test_a_float32_matmul_is_predicted_at_the_rate_of_its_precision(precision, C):
    from analysis.book.hardware import load_hardware
    from analysis.book.matmul_cost import predict_matmul
    from analysis.book.notation import parse

    p = predict_matmul(parse(EXPR), {"X": 8}, MM_DIMS, "float32", load_hardware("h100"), precision=precision)
    # case 2: J is gathered, then every device multiplies the whole product (d = 1)
    assert (p.C_flops_per_s, p.devices) == (C, 1) and p.T_math_s == pytest.approx(2 * 8192**3 / C)


@pytest.mark.parametrize("precision, C", H100_RATES)
def test_the_runner_and_the_report_predict_with_the_recorded_precision(precision, C):
    from analysis.book.hardware import load_hardware
    from analysis.matmul_cases import book_recipe
    from runner.sweep.point import predict

    spec = {
        "op": "matmul",
        "expr": EXPR,
        "axes": ["X"],
        "dims": MM_DIMS,
        "dtype": "float32",
        "mesh": {"axes": {"X": 8}},
    }
    if precision is not None:  # None: a run from before the key
        spec["precision"] = precision
    assert predict({"spec": spec, "hardware": {"name": "h100"}})["C_flops_per_s"] == C
    row = {"expr": EXPR, "mesh_axes": "X=8", "dims": "I=8192 J=8192 K=8192", "dtype": "float32", "precision": precision}
    assert book_recipe(row, load_hardware("h100"))["C_flops_per_s"] == C


@pytest.mark.parametrize("precision, C", H100_RATES)
def test_a_training_steps_T_math_takes_the_rate_of_its_precision(tmp_path, precision, C):
    from analysis.book.hardware import load_hardware
    from analysis.profiling.training_steps import step_table

    spec = {"op": "transformer_block", "dtype": "float32", "flops": 1e12, "mesh": {"axes": {"X": 8}}}
    if precision is not None:
        spec["precision"] = precision
    result = {"point": "p", "point_dir": str(tmp_path), "status": "ok", "spec": spec, "timing": {}}
    rows, _ = step_table([Result.from_json(result)], load_hardware("h100"))
    assert rows["T_math_s"].tolist() == [pytest.approx(1e12 / (8 * C))]
