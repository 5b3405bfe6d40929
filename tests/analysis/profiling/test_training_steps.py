"""Whole training steps: the built-in transformer block (FSDP, tensor parallel, both) and a
user's own function, measured like any point; their collectives found in the trace and
joined to the HLO, with the step section in the report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from shardlab_cli import analysis, runner

from runner import run

REPO = Path(__file__).resolve().parents[3]
FAST = ["timing.rounds=1", "timing.budget_s=0.3", "timing.min_iters=5", "trace.iters=3"]
SMALL = "op.dims={B: 8, S: 32, D: 64, F: 128, H: 8}"


def _kinds(point_dir: Path) -> list[str]:
    from analysis.hlo import parse_collectives

    return sorted(c.kind for c in parse_collectives((point_dir / "hlo" / "compiled.hlo.txt").read_text()))


@pytest.mark.parametrize(
    "sharding,mesh,kinds",
    [
        # FSDP: six weights gathered, their six gradients reduce-scattered, the loss summed
        ("fsdp", "x8", ["all-gather"] * 6 + ["all-reduce"] + ["reduce-scatter"] * 6),
        # tensor parallel: the two output projections' AllReduce, and the backward one of the
        # activations' gradient (Megatron's f and g)
        ("tp", "x8", ["all-reduce"] * 3),
        ("fsdp_tp", "xy_4x2", ["all-gather"] * 6 + ["all-reduce"] * 4 + ["reduce-scatter"] * 6),
    ],
)
def test_the_block_runs_the_books_recipes_and_matches_the_unsharded_step(compose_cfg, tmp_path, sharding, mesh, kinds):
    point = tmp_path / "block"
    r = run(compose_cfg(["op=transformer_block", f"op.sharding={sharding}", f"mesh={mesh}", SMALL, *FAST]), point)
    assert r["status"] == "ok", r.get("error")
    assert r["check"]["passed"] and r["check"]["outputs"] == 7  # the loss and six gradients
    assert r["check"]["max_rel_error"] <= 1e-4
    assert _kinds(point) == kinds
    assert r["timing"]["loop_check"]["ok"]  # every collective repeats in the loop estimator


def test_analysis_profile_finds_every_collective_the_hlo_lists_within_the_step(compose_cfg, tmp_path):
    point = tmp_path / "block"
    r = run(compose_cfg(["op=transformer_block", "op.sharding=fsdp_tp", "mesh=xy_4x2", SMALL, *FAST]), point)
    assert r["status"] == "ok", r.get("error")
    proc = analysis("profile", point, "--json", timeout=120, expect=0)
    table = pd.DataFrame(json.loads(proc.stdout)["collectives"])
    assert sorted(table["kind"]) == _kinds(point)
    assert (table["executions"] > 0).all()  # every collective of the HLO ran in the trace
    steps = pd.read_csv(point / "profile_report" / "steps.csv")
    per_step = table["time_per_step_s"].sum()
    assert per_step <= steps["step_s"].median() * 1.0001  # the collectives fit in the step
    assert set(table["mesh_axes"]) == {"X", "Y"}  # each group named by its mesh axis


def test_a_sweep_of_blocks_gets_the_step_section(compose_cfg, tmp_path):
    from analysis.report import write_report

    root = tmp_path / "sweep"
    for n, (sharding, b) in enumerate([("fsdp", 8), ("fsdp", 16)]):
        ov = ["op=transformer_block", f"op.sharding={sharding}", "mesh=x8", SMALL, f"op.dims.B={b}", *FAST]
        assert run(compose_cfg(ov), root / f"{n:03d}_b{b}")["status"] == "ok"
    write_report(root)
    md = (root / "report" / "report.md").read_text()
    section = md.split("## Training step", 1)[1].split("\n## ", 1)[0]
    assert "| point | sharding | mesh | B | step | T_math | model T_comms | comms | exposed |" in section
    steps = pd.read_csv(root / "report" / "steps.csv")
    assert list(steps["B"]) == [8, 16] and (steps["comms_s"] > 0).all()
    assert (steps["exposed_s"] <= steps["comms_s"]).all()
    assert steps["top_collective"].str.match(r"^(all-gather|reduce-scatter|all-reduce) over X").all()
    assert (root / "report" / "step_comms_share.png").is_file()


def test_a_users_function_runs_as_a_point_and_profiles(tmp_path):
    readme = (REPO / "README.md").read_text()
    example = re.search(r"```python\n(# my_step\.py\n.*?)```", readme, re.S)
    assert example, "the README shows a user's step under '# my_step.py'"
    code = example.group(1)
    assert code.split("\n", 1)[1].strip() in (REPO / "tests" / "helpers" / "user_step.py").read_text()
    (tmp_path / "my_step.py").write_text(code)
    point = tmp_path / "run"
    runner(
        "op=program",
        f"op.target={tmp_path / 'my_step.py'}:train_step",
        "op.inputs=['x[B_X, D]', 'w1[D, F_Y]', 'w2[F_Y, D]']",
        "op.dims={B: 32, D: 64, F: 128}",
        "mesh=xy_4x2",
        *FAST,
        f"hydra.run.dir={point}",
        expect=0,
    )
    r = json.loads((point / "result.json").read_text())
    assert r["check"] == {"passed": True, "kind": "finite", "outputs": 3, "max_rel_error": None, "tolerance": None}
    assert r["spec"]["target"].endswith("my_step.py:train_step")
    assert "all-reduce" in _kinds(point)  # XLA's collectives for the sharded step
    prof = analysis("profile", point, "--json", timeout=120, expect=0)
    assert sorted(pd.DataFrame(json.loads(prof.stdout)["collectives"])["kind"]) == _kinds(point)


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["op=transformer_block", "op.sharding=fsdp_tp", "mesh=x8"], "op.axes=['X']: op.sharding=fsdp_tp takes 2"),
        (["op=transformer_block", "op.dims.H=3"], "D=256 is not a multiple of H=3"),
        (["op=transformer_block", "mesh=x8", "op.dims.B=12"], "op.dims.B=12 does not split over X (8 devices)"),
        (["op=program"], "op.target=None: name the function as package.module:function"),
        (["op=program", "op.target=m:f", "op.inputs=['x[B_Q]']", "op.dims={B: 8}"], "'Q' is not an axis"),
        (["op=program", "op.target=m:f", "op.inputs=['x[B_X]']"], "op.dims: no size for B"),
    ],
)
def test_bad_step_configs_fail_before_device_work(compose_cfg, overrides, needle):
    from runner.config.spec import build_spec
    from runner.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        build_spec(compose_cfg(overrides))
    assert needle in str(err.value)
