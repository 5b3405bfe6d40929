"""Real runs of every collective on 8 CPU devices, through ``runner.run``."""

from __future__ import annotations

import json

import pytest
from shardlab_cli import runner

from analysis import trace as trace_reader
from analysis.hlo import parse_collectives
from runner import run

HLO_KIND = {
    "all_gather": "all-gather",
    "reduce_scatter": "reduce-scatter",
    "all_reduce": "all-reduce",
    "all_to_all": "all-to-all",
}
QUICK = ["timing.rounds=1", "timing.min_iters=5", "timing.budget_s=0.3", "trace.iters=3"]


@pytest.mark.parametrize(
    "op,mesh,axes,group",
    [
        ("all_gather", "auto", "[X]", 8),
        ("reduce_scatter", "xy_4x2", "[X]", 4),
        ("all_reduce", "xyz_2x2x2", "[X,Y]", 4),
        ("all_to_all", "xy_4x2", "[Y]", 2),
    ],
)
def test_each_collective_runs_checks_traces_and_dumps_hlo(compose_cfg, tmp_path, op, mesh, axes, group):
    cfg = compose_cfg([f"op={op}", f"mesh={mesh}", f"op.axes={axes}", "op.size_bytes=64KiB", *QUICK])
    result = run(cfg, tmp_path)
    assert result["status"] == "ok", result.get("error")
    on_disk = json.loads((tmp_path / "result.json").read_text())
    assert on_disk["status"] == "ok"
    assert on_disk["check"]["passed"] is True
    assert on_disk["spec"]["group_size"] == group
    assert on_disk["spec"]["V_bytes"] == 64 * 1024
    assert on_disk["environment"]["device_count"] == 8
    summary = on_disk["timing"]["summary"]
    assert summary["n"] >= 5 and summary["ci_low_s"] <= summary["median_s"] <= summary["ci_high_s"]
    assert sum(len(r["step"]["samples_s"]) for r in on_disk["timing"]["rounds"]) == summary["n"]
    assert on_disk["timing"]["estimator"] == "step" and on_disk["timing"]["loop_check"]["ok"]

    colls = parse_collectives((tmp_path / on_disk["files"]["hlo_compiled"]).read_text(), num_devices=8)
    assert [c.kind for c in colls] == [HLO_KIND[op]]
    assert colls[0].group_size == group and colls[0].num_groups == 8 // group
    assert "stablehlo" in (tmp_path / on_disk["files"]["hlo_lowered"]).read_text()

    xplane = tmp_path / on_disk["files"]["xplane"]
    assert xplane.parent.parent.name == "profile" and xplane.name.endswith(".xplane.pb")
    ops = trace_reader.device_ops(trace_reader.read_xplane(xplane))
    mine = ops[ops["hlo_op"] == colls[0].name]
    # every device ran the collective once per traced iteration
    assert sorted(mine["device"].unique()) == list(range(8))
    assert len(mine) == 8 * 3
    assert on_disk["trace"]["profiler_slowdown"] > 0
    assert len(on_disk["timing"]["device"]["samples_s"]) == 3  # one per traced step


def test_bfloat16_all_reduce_is_exact_against_numpy(compose_cfg, tmp_path):
    cfg = compose_cfg(["op=all_reduce", "dtype=bfloat16", "op.size_bytes=4KiB", "trace.enabled=false", *QUICK])
    result = run(cfg, tmp_path)
    assert result["status"] == "ok" and result["check"]["passed"]
    assert "xplane" not in result["files"]


def test_mesh_that_does_not_match_the_devices_fails_before_compile(compose_cfg, tmp_path):
    cfg = compose_cfg(["mesh.axes={X: 4}", *QUICK])
    result = run(cfg, tmp_path)
    assert result["status"] == "failed" and result["error_type"] == "ConfigError"
    assert "mesh.axes" in result["error"] and "8 are available" in result["error"]
    assert "compile" not in result and not (tmp_path / "hlo").exists()


def test_an_accelerator_config_on_cpu_stops_before_any_point(compose_cfg, tmp_path):
    from runner.errors import PlatformError

    with pytest.raises(PlatformError, match=r"hardware=tpu_v5e asks for TPU devices but JAX came up on cpu"):
        run(compose_cfg(["hardware=tpu_v5e", *QUICK]), tmp_path / "one")
    assert not (tmp_path / "one" / "result.json").exists()
    # as a sweep: one line on stderr, exit 2, and no point measured
    sweep = f"hydra.sweep.dir={tmp_path}/sweep"
    proc = runner("+sweep=allgather_sizes", "hardware=tpu_v5e", "op.size_bytes=1KiB,2KiB", sweep, timeout=120, expect=2)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and 'pip install -e ".[tpu]"' in errors[0], proc.stderr[-2000:]
    assert not list((tmp_path / "sweep").glob("*/result.json"))


@pytest.mark.parametrize(
    "override,needles",
    [
        ("op.size_bytes=7", ["op.size_bytes=7", "float32"]),
        ("mesh=nosuch", ["mesh", "nosuch", "xy_4x2"]),
        ("dtype=float64", ["'float64'", "override dtype=float64", "bfloat16"]),  # Hydra: at composition
    ],
)
def test_cli_bad_input_exits_nonzero_naming_key_and_choices(tmp_path, override, needles):
    # exit 2: a bad config, whether shardlab or Hydra (at composition) finds it
    proc = runner(override, f"hydra.run.dir={tmp_path}/run", timeout=120, expect=2)
    out = proc.stdout + proc.stderr
    for needle in needles:
        assert needle in out, out
    assert not (tmp_path / "run" / "hlo").exists()
