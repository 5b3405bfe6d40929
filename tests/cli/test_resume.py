"""Resuming a sweep into its own folder, and the sweep's progress lines."""

from __future__ import annotations

import json
import re

import pandas as pd
from omegaconf import OmegaConf, open_dict
from shardlab_cli import runner

from runner import run
from runner.sweep.progress import count_points

FAST = ["timing.rounds=1", "timing.budget_s=0.2", "timing.min_iters=5", "trace.enabled=false"]


def _sweep(out, *extra):
    proc = runner(
        "+sweep=allgather_sizes", "op.size_bytes=1KiB,4KiB,16KiB", f"hydra.sweep.dir={out}", *FAST, *extra, expect=0
    )
    return proc.stdout + proc.stderr


def test_resume_keeps_ok_points_reruns_failed_and_missing_and_logs_progress(tmp_path):
    out = tmp_path / "sweep"
    log = _sweep(out)
    # one line per point as it ends: k of N, what varies, the result, elapsed and the time left
    lines = [ln for ln in log.splitlines() if re.search(r"\[\d/3\] op\.size_bytes=", ln)]
    assert len(lines) == 3, log[-3000:]
    assert lines[0].startswith("[1/3] op.size_bytes=1KiB") and " ok " in lines[0]
    assert lines[1].startswith("[2/3] op.size_bytes=4KiB") and re.search(r"\d+:\d\d, about \d+:\d\d left", lines[1])

    points = {
        json.loads((p / "result.json").read_text())["config"]["op"]["size_bytes"]: p
        for p in out.iterdir()
        if (p / "result.json").is_file()
    }
    assert set(points) == {"1KiB", "4KiB", "16KiB"}
    kept = (points["1KiB"] / "result.json").read_bytes()
    failed = json.loads((points["4KiB"] / "result.json").read_text())
    failed.update(status="failed", error_type="Test", error="marked failed by the test")
    (points["4KiB"] / "result.json").write_text(json.dumps(failed))
    (points["16KiB"] / "result.json").unlink()

    log = _sweep(out, "resume=true")
    assert "resume: 2 result(s) there; ok ones of the same config are kept" in log
    assert len(re.findall(r"\(kept from before\)", log)) == 1, log[-3000:]
    assert (points["1KiB"] / "result.json").read_bytes() == kept  # left exactly as it was
    for size in ("4KiB", "16KiB"):
        assert json.loads((points[size] / "result.json").read_text())["status"] == "ok"
    assert sorted(p.name for p in out.iterdir() if (p / "result.json").is_file()) == sorted(
        p.name for p in points.values()
    )
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(summary["size_bytes"]) == [1024, 4096, 16384] and (summary["status"] == "ok").all()
    assert (out / "report" / "index.html").is_file()


def test_resume_only_keeps_a_result_of_the_same_config(compose_cfg, tmp_path):
    first = run(compose_cfg(["op.size_bytes=4KiB", *FAST]), tmp_path)
    assert first["status"] == "ok"
    kept = run(compose_cfg(["op.size_bytes=4KiB", *FAST, "resume=true"]), tmp_path)
    assert kept["resumed"] and kept["started_at"] == first["started_at"]
    other = run(
        compose_cfg(["op.size_bytes=4KiB", *FAST[:-1], "timing.min_iters=6", "trace.enabled=false", "resume=true"]),
        tmp_path,
    )
    assert "resumed" not in other and other["started_at"] > first["started_at"]
    again = run(compose_cfg(["op.size_bytes=4KiB", *FAST[:-1], "timing.min_iters=6", "trace.enabled=false"]), tmp_path)
    assert "resumed" not in again and again["started_at"] > other["started_at"]  # resume=false runs anyway


def test_resume_keeps_a_result_that_named_its_estimator_timing_source(compose_cfg, tmp_path):
    """A result.json written before the estimator's key was renamed (``timing.source``, in its
    config and its timing) was run with the same config: resume keeps it."""
    first = run(compose_cfg(["op.size_bytes=4KiB", *FAST]), tmp_path)
    path = tmp_path / "result.json"
    old = json.loads(path.read_text())
    old["config"]["timing"]["source"] = old["config"]["timing"].pop("estimator")
    old["timing"]["source"] = old["timing"].pop("estimator")
    path.write_text(json.dumps(old))
    kept = run(compose_cfg(["op.size_bytes=4KiB", *FAST, "resume=true"]), tmp_path)
    assert kept["resumed"] and kept["started_at"] == first["started_at"]
    assert kept["timing"]["estimator"] == "step" and "source" not in kept["timing"]


def test_count_points_is_the_product_of_the_sweep_values(compose_cfg):
    cfg = compose_cfg(["+sweep=collectives_sizes"], return_hydra_config=True)
    assert count_points(cfg) == 4 * 17
    with open_dict(cfg):  # the command line's sweep replaces the file's values for that key
        cfg.hydra.overrides.task = [
            "+sweep=collectives_sizes",
            "op.size_bytes=1KiB,64KiB",
            "op=all_gather,all_reduce",
            "dtype=float32",
        ]
    assert count_points(cfg) == 4
    with open_dict(cfg):
        cfg.hydra.sweeper = OmegaConf.create({"_target_": "some.other.Sweeper"})
    assert count_points(cfg) is None


def test_the_printed_resume_command_keeps_multirun_and_drops_the_old_folder_and_resume(tmp_path):
    from runner.sweep.callbacks import resume_command

    argv = ["-m", "op.size_bytes=1KiB,2KiB", "hydra.sweep.dir=old", "resume=false", "op=all_reduce"]
    # without -m, Hydra would read "1KiB,2KiB" as one value of a single run, not two points
    assert resume_command(tmp_path / "s", argv).split() == [
        *"python -m runner".split(),
        "-m",
        "op.size_bytes=1KiB,2KiB",
        "op=all_reduce",
        f"hydra.sweep.dir={tmp_path / 's'}",
        "resume=true",
    ]


def _one_line(proc) -> str:
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
    return lines[0]


def test_a_sweep_folder_holds_one_sweep(tmp_path):
    out = tmp_path / "D"
    runner("+sweep=allgather_sizes", "op.size_bytes=1KiB,2KiB,4KiB", *FAST, f"hydra.sweep.dir={out}", expect=0)
    kept = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".shardlab.lock"}

    # the first example: the same sweep with another size list, resumed into its folder
    line = _one_line(
        runner("+sweep=allgather_sizes", "op.size_bytes=1KiB,4KiB,8KiB", *FAST, f"hydra.sweep.dir={out}", "resume=true")
    )
    assert line == (
        f"error: hydra.sweep.dir={out}: holds another sweep (op.size_bytes: 1KiB,2KiB,4KiB there, "
        "1KiB,4KiB,8KiB in this command); a folder holds one sweep: resume that one with the command in "
        f"sweep.json and resume=true, or give this one a new folder, e.g. hydra.sweep.dir={tmp_path / 'D_2'}"
    )
    # the second: +sweep=collectives_sizes resumed into the AllGather sweep's folder
    line = _one_line(
        runner(
            "+sweep=collectives_sizes", "op.size_bytes=1KiB,2KiB,4KiB", *FAST, f"hydra.sweep.dir={out}", "resume=true"
        )
    )
    assert (
        "(op: not set there, all_gather,reduce_scatter,all_reduce,all_to_all in this command; "
        "sweep: allgather_sizes there, collectives_sizes in this command)" in line
    )
    # not resumed either: its point folders would sit beside the old ones
    assert "holds another sweep (op.size_bytes: " in _one_line(
        runner("+sweep=allgather_sizes", "op.size_bytes=8KiB", *FAST, f"hydra.sweep.dir={out}")
    )
    # a single run into the sweep's folder
    assert _one_line(runner("op.size_bytes=1KiB", *FAST, f"hydra.run.dir={out}")) == (
        f"error: hydra.run.dir={out}: is a sweep's folder (sweep.json); a single run's result.json there would "
        "hide the sweep's points: choose another hydra.run.dir"
    )
    # none of them wrote anything: the folder is the first sweep's, byte for byte
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".shardlab.lock"} == kept

    # the sweep itself resumes, and its report counts its own three points
    again = runner(
        "+sweep=allgather_sizes",
        "op.size_bytes=1KiB,2KiB,4KiB",
        *FAST,
        f"hydra.sweep.dir={out}",
        "resume=true",
        expect=0,
    )
    assert len(re.findall(r"\(kept from before\)", again.stdout + again.stderr)) == 3
    assert sorted(pd.read_csv(out / "summary.csv")["size_bytes"]) == [1024, 2048, 4096]
