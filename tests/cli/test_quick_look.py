"""``timing=quick``, the named quick-look policy (issue 38): one round, the backend's own
estimator only (step on CPU), no loop estimator, no ceiling measured, on CPU one traced step
kept for inspection; and everything a user reads says its interval was not checked for
run-to-run drift. ``timing`` is a config group (conf/timing/): default and quick."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from hydra.errors import MissingConfigException
from omegaconf import OmegaConf
from shardlab_cli import runner

from analysis.runs.record import ONE_ROUND
from runner.config.schema import TimingConf, TraceConf

REPO = Path(__file__).resolve().parents[2]
SWEEPS = sorted(p.stem for p in (REPO / "sweeps").glob("*.yaml"))


def test_quick_composes_as_the_default_with_its_differences_and_keys_still_override(compose_cfg):
    default, quick = compose_cfg([]), compose_cfg(["timing=quick"])
    # typed by the schema either way: a bad value is refused while composing
    assert OmegaConf.get_type(quick.timing) is TimingConf and OmegaConf.get_type(quick.trace) is TraceConf
    assert (default.timing.rounds, default.timing.loop, default.timing.ceiling, default.trace.inspect_iters) == (
        5,
        True,
        True,
        None,
    )
    assert (quick.timing.rounds, quick.timing.loop, quick.timing.ceiling, quick.trace.inspect_iters) == (
        1,
        False,
        False,
        1,
    )
    # quick states only its differences: every other key is the default's
    differ = {"rounds", "loop", "ceiling"}
    assert {k: v for k, v in quick.timing.items() if k not in differ} == {
        k: v for k, v in default.timing.items() if k not in differ
    }
    assert {k: v for k, v in quick.trace.items() if k != "inspect_iters"} == {
        k: v for k, v in default.trace.items() if k != "inspect_iters"
    }
    assert compose_cfg(["timing=default"]) == default
    # a key on the command line still wins, after the group and without it
    assert compose_cfg(["timing=quick", "timing.rounds=2"]).timing.rounds == 2
    assert compose_cfg(["timing.rounds=2"]).timing.rounds == 2
    assert compose_cfg(["timing=quick", "trace.inspect_iters=3"]).trace.inspect_iters == 3
    with pytest.raises(Exception, match="timing.ceiling"):
        compose_cfg(["timing.ceiling=maybe"])


@pytest.mark.parametrize("sweep", SWEEPS)
def test_every_sweep_composes_with_quick(compose_cfg, sweep):
    cfg = compose_cfg([f"+sweep={sweep}", "timing=quick"], return_hydra_config=True)
    assert (cfg.timing.rounds, cfg.timing.loop, cfg.timing.ceiling, cfg.trace.inspect_iters) == (1, False, False, 1)
    assert cfg.hydra.mode is not None and cfg.hydra.sweeper.params


def test_an_unknown_policy_is_hydras_error_naming_the_two(compose_cfg):
    with pytest.raises(MissingConfigException) as err:
        compose_cfg(["timing=nonsense"])
    assert "Could not find 'timing/nonsense'" in str(err.value) and "\tdefault\n\tquick" in str(err.value)
    proc = runner("timing=nonsense", expect=2)
    assert proc.stderr.strip() == (
        "error: In 'config': Could not find 'timing/nonsense'; Available options in 'timing': default, quick"
    )
    assert "timing: default, quick" in runner("--help", expect=0).stdout  # listed with the other groups


def _points(sweep: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(sweep.glob("*/result.json"))]


def test_a_quick_sweep_times_one_round_with_the_step_estimator_alone_and_says_so(tmp_path):
    out = tmp_path / "quick"
    proc = runner("+sweep=allgather_sizes", "timing=quick", "sizes.max=4KiB", f"hydra.sweep.dir={out}", expect=0)
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == f"shardlab: 3 points x 1 round(s) ({ONE_ROUND}) -> {out}"
    assert not any(line.startswith("round 2") for line in lines)  # no later rounds
    family = next(line for line in lines if line.startswith("  AllGather over X"))
    assert family.endswith(f"; {ONE_ROUND}"), family
    results = _points(out)
    assert len(results) == 3 and all(r["status"] == "ok" for r in results)
    for r in results:
        t = r["timing"]
        assert len(t["rounds"]) == 1 and t["estimator"] == "step"
        assert list(t["estimators"]) == ["step"], list(t["estimators"])  # no loop, no device from the trace
        assert "loop" not in t["rounds"][0] and "device" not in t
        assert r["ceiling"] is None  # no copy curve measured
        assert r["check"]["passed"] is True  # the result is still checked
        # one traced step, kept for inspection, that XProf reads
        assert r["trace"]["iters"] == 1 and len(r["trace"]["wall_samples_s"]) == 1
        assert "kept for inspection" in r["trace"]["inspect_only"]
        assert (out / r["point"] / r["files"]["xplane"]).stat().st_size > 0
        assert r["trace"]["op_events"] > 0
    with open(out / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [row["rounds_why"] for row in rows] == [ONE_ROUND] * 3
    assert all(row["time_rounds"] == "1" and row["loop_time_s"] == row["device_time_s"] == "" for row in rows)
    assert all(row["ceiling_busbw_Bps"] == "" and row["flags"] == "" for row in rows)
    report = (out / "report" / "report.md").read_text()
    assert f"1: {ONE_ROUND}" in report  # each point's rounds
    assert "Each point was timed in one round" in report and "interleaved across the sweep" not in report
    assert "No point has a ceiling" in report
    head = json.loads((out / "headline.json").read_text())
    assert head["families"][0]["text"].endswith(ONE_ROUND) and head["families"][0]["one_round"] == 3


def test_a_quick_single_run_says_one_round_on_its_line(tmp_path):
    proc = runner("timing=quick", "op.size_bytes=64KiB", f"hydra.run.dir={tmp_path / 'run'}", expect=0)
    line = proc.stdout.strip().splitlines()[-1]
    assert "step estimator, " in line and f"samples in {ONE_ROUND})" in line, line
    r = json.loads((tmp_path / "run" / "result.json").read_text())
    assert list(r["timing"]["estimators"]) == ["step"] and r["trace"]["iters"] == 1


def test_where_the_trace_is_the_estimator_quick_keeps_the_whole_trace(compose_cfg, tmp_path):
    # as on a TPU or GPU under auto: the device estimator needs its traced steps, so
    # trace.inspect_iters does not cut them, and the device estimator is the point's time
    from runner import run

    cfg = compose_cfg(["timing=quick", "timing.estimator=device", "op.size_bytes=64KiB", "trace.max_s=5"])
    r = run(cfg, tmp_path / "point")
    assert r["status"] == "ok"
    t = r["timing"]
    assert t["estimator"] == "device" and t["summary"]["n"] == r["trace"]["iters"] == cfg.trace.iters == 10
    assert "inspect_only" not in r["trace"] and len(t["rounds"]) == 1 and "loop" not in t["rounds"][0]
