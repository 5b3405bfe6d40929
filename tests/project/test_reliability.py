"""A hostile but realistic user: kill the sweep, run two at once, feed it junk. Nothing
measured may be lost, nothing may be left running, every error is one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from shardlab_cli import analysis, gone_within, runner, start, wait_for_workers

from runner.sweep.workers import STARTUP_LOG_DIR_ENV, reap_startup_logs
from runner.worker.serve import TEST_HANG_ENV

FAST = ["timing.rounds=1", "timing.budget_s=0.2", "timing.min_iters=5", "trace.iters=2"]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
@pytest.mark.parametrize("mode", ["none", "local"])
def test_killing_the_sweep_mid_point_leaves_no_process(tmp_path, how, mode):
    # the 4 KiB point hangs: killed mid-point. The start-up logs go to this test's own folder, so
    # another shardlab running on the machine cannot add to what is counted
    logs = tmp_path / "worker-logs"
    main = start(
        "runner",
        "+sweep=allgather_sizes",
        "op.size_bytes=4KiB",
        f"distributed={mode}",
        *FAST,
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        env={TEST_HANG_ENV: str(4 << 10), STARTUP_LOG_DIR_ENV: str(logs)},
        new_session=True,
    )
    try:
        workers = wait_for_workers(main, 1 if mode == "none" else 2)
        # into the point: a worker deletes its start-up log once JAX is up (3-4 s on a slow day,
        # which a fixed sleep did not always cover: the kill then fell into the start-up)
        deadline = time.time() + 120
        while logs.exists() and any(logs.glob("*.log")) and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(2 if mode == "none" else 4)
        main.send_signal(how)
        main.wait(timeout=30)
        assert gone_within(workers, 10) == set(), "a worker outlived the sweep"
    finally:
        if main.poll() is None:
            main.kill()
    left = set(logs.glob("*.log")) if logs.exists() else set()
    if how == signal.SIGKILL:  # a worker still starting JAX (the next point's) may leave its log: the next sweep's
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(STARTUP_LOG_DIR_ENV, str(logs))
            assert set(reap_startup_logs()) == left
    else:
        assert left == set()  # a stopped sweep removes its workers' start-up logs
    assert not logs.exists() or not any(logs.iterdir())


def test_a_second_sweep_into_the_same_folder_stops_at_once(tmp_path):
    out = tmp_path / "sweep"
    sweep = ["+sweep=allgather_sizes", *FAST, f"hydra.sweep.dir={out}"]
    first = start("runner", *sweep, "op.size_bytes=4KiB", env={TEST_HANG_ENV: str(4 << 10)}, new_session=True)
    try:
        wait_for_workers(first, 1)
        second = runner(*sweep, "op.size_bytes=1KiB", "resume=true", timeout=60, expect=2)
        errors = [line for line in second.stderr.splitlines() if line.strip()]
        assert len(errors) == 1 and "is in use by another shardlab run" in errors[0] and f"pid {first.pid}" in errors[0]
        assert not list(out.glob("*/result.json"))  # the second wrote nothing
    finally:
        first.kill()
        first.wait()


def test_a_profiler_failure_is_followed_by_a_fresh_worker(compose_cfg, tmp_path):
    from runner import run
    from runner.sweep import pool

    pool.discard_worker()
    bad = tmp_path / "0_bad"
    bad.mkdir()
    (bad / "trace").write_text("a file where the trace folder should be")  # the trace cannot be written
    r1 = run(compose_cfg(["op.size_bytes=4KiB", *FAST]), bad)
    assert r1["status"] == "ok" and "error" in r1["trace"] and "xplane" not in r1["files"]
    r2 = run(compose_cfg(["op.size_bytes=8KiB", *FAST]), tmp_path / "1_next")
    r3 = run(compose_cfg(["op.size_bytes=16KiB", *FAST]), tmp_path / "2_next")
    assert r2["status"] == "ok" and r3["status"] == "ok" and "xplane" in r2["files"]
    assert r2["worker"]["pid"] != r1["worker"]["pid"] and r3["worker"]["pid"] == r2["worker"]["pid"]
    pool.discard_worker()


def test_junk_result_files_never_pass_for_measurements(tmp_path):
    from analysis.runs.rundir import read_results
    from analysis.runs.summary import summary_table

    for i, text in enumerate(
        [
            "[]",
            "null",
            '{"status": "ok"}',
            "{not json",
            json.dumps(
                {
                    "status": "ok",
                    "spec": {"op": "all_gather"},
                    "timing": {"summary": {"median_s": 1e-3}},
                    "files": {"hlo_compiled": "/dev/zero", "xplane": "../../etc/passwd"},
                }
            ),
        ]
    ):
        (tmp_path / f"{i}_junk").mkdir()
        (tmp_path / f"{i}_junk" / "result.json").write_text(text)
    results = read_results(tmp_path)
    assert [r.status for r in results] == ["failed", "failed", "failed", "failed", "ok"]
    assert "not an object" in results[0].error and "IncompleteResult" == results[2].error_type
    s = summary_table(results)  # no crash, no /dev/zero read
    row = s[s["point"] == "4_junk"].iloc[0]
    assert "absolute path" in row["skipped"] and "leaves the point folder" in row["skipped"]


def test_a_sweep_with_a_failed_point_exits_nonzero_after_its_report(tmp_path):
    out = tmp_path / "sweep"
    proc = runner("+sweep=allgather_sizes", "op.size_bytes=7,9", *FAST, f"hydra.sweep.dir={out}", timeout=120, expect=1)
    assert (out / "report" / "index.html").is_file() and "resume:" in proc.stdout


def test_points_that_were_not_measured_alike_are_not_mixed(tmp_path, compose_cfg):
    from small_sweep import small_sweep

    from analysis.report import write_report
    from analysis.sweep import MixedSweepError

    root = small_sweep(tmp_path / "s", compose_cfg, sizes=("1KiB", "2KiB", "4KiB"))
    odd = root / "2_op.size_bytes=4KiB" / "result.json"
    r = json.loads(odd.read_text())
    ours = r["environment"]["jax_version"]
    r["environment"]["jax_version"] = "0.9.0"  # as if copied in from another machine's sweep
    odd.write_text(json.dumps(r))
    with pytest.raises(MixedSweepError, match=f"environment.jax_version: {ours}, 0.9.0"):
        write_report(root)
    proc = analysis("report", root, expect=2)
    assert len(proc.stderr.strip().splitlines()) == 1 and "--allow-mixed" in proc.stderr
    assert write_report(root, allow_mixed=True).is_file()
    # calibrate and compare refuse the same folder alike, and take --allow-mixed as report does
    entry, cmp = tmp_path / "mixed_cpu.yaml", tmp_path / "cmp"
    calibrate = ["calibrate", root, "--name", "mixed_cpu", "--out", entry]
    for cmd in (calibrate, ["compare", root, root, "--out", cmp]):
        refused = analysis(*cmd, expect=2)
        assert len(refused.stderr.strip().splitlines()) == 1 and "--allow-mixed" in refused.stderr
    # past the mixture: three tiny points may fit or not (a noisy point is left out), never refused as mixed
    past = analysis(*calibrate, "--allow-mixed")
    assert "--allow-mixed" not in past.stderr
    assert (past.returncode, entry.exists()) == (0, True) or (
        past.returncode == 2 and "no collective has 3 or more usable points" in past.stderr and not entry.exists()
    )
    analysis("compare", root, root, "--out", cmp, "--allow-mixed", expect=0)
    assert (cmp / "index.html").is_file()


def test_a_sweep_of_global_groups_is_not_a_mixture_but_another_machine_still_is():
    from analysis.runs.record import Result
    from analysis.sweep import mixture

    # +sweep=book_claims varies +claim=..., whose files set op and mesh at the top level: the
    # points' configs differ in keys the sweep's overrides do not name (its report was refused)
    def result(op, mesh, jax="0.10.2"):
        return Result.from_json(
            {
                "status": "ok",
                "config": {"op": {"name": op}, "mesh": {"name": mesh}, "dtype": "float32"},
                "environment": {"jax_version": jax, "host": "vm"},
            }
        )

    claims = [{"num": 0, "overrides": ["+claim=ag_x8"]}, {"num": 1, "overrides": ["+claim=ar_x8"]}]
    assert mixture([result("all_gather", "x8"), result("all_reduce", "xy_4x2")], claims) == {}
    assert mixture([result("all_gather", "x8"), result("all_reduce", "x8", jax="0.9.0")], claims) == {
        "environment.jax_version": ["0.10.2", "0.9.0"]
    }
    # a sweep that varies only the size: another op in one of its folders is a mixture
    sizes = [{"num": 0, "overrides": ["op.size_bytes=1KiB"]}, {"num": 1, "overrides": ["op.size_bytes=2KiB"]}]
    assert mixture([result("all_gather", "x8"), result("all_reduce", "x8")], sizes) == {
        "config.op.name": ['"all_gather"', '"all_reduce"']
    }


def test_container_memory_limits_are_honoured(tmp_path, monkeypatch):
    from runner.config.memory import host_available_bytes

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("MemTotal: 100000000 kB\nMemAvailable: 50000000 kB\n")
    assert host_available_bytes(str(tmp_path)) == 50_000_000 * 1024
    cg = tmp_path / "sys" / "fs" / "cgroup"
    cg.mkdir(parents=True)
    (cg / "memory.max").write_text(f"{8 << 30}\n")
    (cg / "memory.current").write_text(f"{3 << 30}\n")
    assert host_available_bytes(str(tmp_path)) == 5 << 30  # the container's 8 GiB less 3 in use
    (cg / "memory.max").write_text("max\n")
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "4096")
    assert host_available_bytes(str(tmp_path)) == 4 << 30


def test_the_memory_estimate_bounds_what_each_collective_holds(compose_cfg, tmp_path):
    """At 64 MiB over 8 CPU devices: the worker's resident high-water mark never exceeds the
    estimate the point was admitted with, and the estimate is not far above it. (The growth
    itself varies up to 1.8x between runs and JAX versions, and AllGather's came out at 1.8 GiB
    once on jax 0.10 against its usual 2.1-3.1 GiB: runner/config/memory.py. Hence 3x, not 2.5x.)"""
    from runner import run
    from runner.sweep.pool import discard_worker

    for op in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all"):
        # A fresh worker each: the allocator keeps freed memory resident (DESIGN: no trim
        # below 4 GiB), so a reused worker's high-water mark starts at the last point's.
        discard_worker()
        # the loop cross-check kept (a 64 MiB step may pass timing.loop_check_below_s): the
        # estimate counts its carry, so the worker must hold all the estimate accounts for
        over = [f"op={op}", "op.size_bytes=64MiB", *FAST, "trace.enabled=false", "timing.loop_check_below_s=null"]
        r = run(compose_cfg(over), tmp_path / op)
        assert r["status"] == "ok", r.get("error")
        grew, est = r["memory_peak"]["growth_bytes"], r["memory_estimate"]["host_total_bytes"]
        assert grew <= est <= 3 * grew, (op, grew / 2**20, est / 2**20)


def test_a_launcher_that_runs_points_side_by_side_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "sweep"
    joblib = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    proc = runner("-m", "op.size_bytes=1KiB", f"hydra.sweep.dir={out}", f"hydra.launcher._target_={joblib}", timeout=60)
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.strip().splitlines() == [
        "error: hydra/launcher: JoblibLauncher runs points side by side on one machine, where they would be timed "
        "against each other; allowed: basic (the default), submitit_local, submitit_slurm"
    ]


def test_analysis_hlo_on_a_file_that_is_not_hlo_exits_2(tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("this is a shopping list\n" * 10)
    proc = analysis("hlo", junk, timeout=60, expect=2)
    assert len(proc.stderr.strip().splitlines()) == 1 and "HLO" in proc.stderr
    proc = analysis("hlo", "/dev/urandom", timeout=60, expect=2)  # used to read forever
    assert "not a regular file" in proc.stderr


def test_a_point_keeps_its_timing_without_its_hlo_files_and_is_readable_by_all(tmp_path, compose_cfg):
    import shutil
    import stat

    import pandas as pd
    from small_sweep import small_sweep

    from analysis.report import write_report

    root = small_sweep(tmp_path / "s", compose_cfg, sizes=("1KiB", "2KiB", "4KiB"))
    for point in sorted(p for p in root.iterdir() if p.is_dir()):
        assert stat.S_IMODE((point / "result.json").stat().st_mode) == 0o644  # like every other file
    shutil.rmtree(root / "1_op.size_bytes=2KiB" / "hlo")
    write_report(root)
    summary = pd.read_csv(root / "summary.csv")
    target = summary[summary["is_target"]].set_index("point")
    assert sorted(target.index) == ["0_op.size_bytes=1KiB", "1_op.size_bytes=2KiB", "2_op.size_bytes=4KiB"]
    assert target.loc["1_op.size_bytes=2KiB", "time_s"] > 0


def test_a_multi_line_error_stays_in_its_table_row(tmp_path, compose_cfg):
    from small_sweep import small_sweep

    from analysis.report import write_report

    root = small_sweep(tmp_path / "s", compose_cfg, sizes=("1KiB", "2KiB", "4KiB"))
    bad = root / "3_op.size_bytes=8KiB"
    bad.mkdir()
    (bad / "result.json").write_text(
        json.dumps(
            {
                "status": "failed",
                "error_type": "XlaRuntimeError",
                "error": "first line\nsecond line | with a pipe\nthird",
            }
        )
    )
    write_report(root)
    md = (root / "report" / "report.md").read_text()
    lines = md.splitlines()
    rows = [n for n, line in enumerate(lines) if "XlaRuntimeError" in line]
    assert len(rows) == 1 and "first line second line" in lines[rows[0]] and "third" in lines[rows[0]]
    cells = lambda line: line.replace("\\|", "").count("|")  # noqa: E731 - an escaped pipe is text
    assert cells(lines[rows[0]]) == cells(lines[rows[0] - 1])  # as many cells as the row above


def test_every_mesh_override_the_docs_show_composes(compose_cfg, repo_root):
    import re

    from runner.config.spec import build_spec

    docs = [repo_root / "README.md", *sorted((repo_root / "docs").glob("*.md"))]
    text = "\n".join(page.read_text() for page in docs)
    shown = re.findall(r"mesh\.(?:axes|shape)=(?:'[^']*'|\{[^}]*\}|[\w-]+)", text)
    assert len(shown) >= 3
    for override in shown:
        build_spec(compose_cfg([override.replace("'", "")]))  # composes and validates
    spec = build_spec(compose_cfg(["mesh.shape=2x4", "op.axes=[Y]"]))
    assert spec["mesh"]["axes"] == {"X": 2, "Y": 4}


def test_a_rerun_point_does_not_keep_the_interrupted_attempts_trace(tmp_path, compose_cfg):
    from runner import run

    point = tmp_path / "0_p"
    (point / "trace" / "plugins" / "profile" / "old").mkdir(parents=True)
    (point / "trace" / "plugins" / "profile" / "old" / "host.xplane.pb").write_bytes(b"an interrupted attempt")
    r = run(compose_cfg(["op.size_bytes=1KiB", *FAST]), point)
    assert r["status"] == "ok"
    traces = list((point / "trace").rglob("*.xplane.pb"))
    assert len(traces) == 1 and traces[0].read_bytes() != b"an interrupted attempt"


def test_a_start_up_log_left_by_a_killed_sweep_is_removed_by_the_next(tmp_path, monkeypatch):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs: a sweep killed while its worker started JAX
    tmp = tmp_path / "worker-logs"  # this test's own folder: never another shardlab's logs
    tmp.mkdir()
    monkeypatch.setenv(STARTUP_LOG_DIR_ENV, str(tmp))
    stale = tmp / f"shardlab-worker-{dead.pid}-abc123.log"
    live = tmp / f"shardlab-worker-{os.getpid()}-abc123.log"
    stale.write_text("")
    live.write_text("")
    try:
        assert reap_startup_logs() == [stale]
        assert not stale.exists() and live.exists()  # a running sweep's log stays
    finally:
        stale.unlink(missing_ok=True)
        live.unlink(missing_ok=True)


def test_a_point_folder_the_sweep_did_not_ask_for_is_not_mixed_in(tmp_path, compose_cfg):
    from small_sweep import small_sweep

    from analysis.report import write_report
    from analysis.sweep import MixedSweepError

    # a sweep that asked for two points (sweep.json), and a third folder copied in beside them
    root = small_sweep(tmp_path / "s", compose_cfg, sizes=("1KiB", "2KiB", "4KiB"))
    asked = [{"num": i, "overrides": [f"op.size_bytes={s}"]} for i, s in enumerate(("1KiB", "2KiB"))]
    (root / "sweep.json").write_text(json.dumps({"expected_points": asked}))
    with pytest.raises(MixedSweepError, match=r"point folders the sweep did not ask for: 2_op.size_bytes=4KiB"):
        write_report(root)
    assert write_report(root, allow_mixed=True).is_file()


def test_out_of_range_or_nested_result_files_are_failed_points_and_the_report_is_written(tmp_path):
    """A hand-edited result.json: a negative or absurd median, Infinity, a V of "NaN", 200k
    nested brackets. Each is a failed point saying why; ``analysis report`` writes its report
    (it died with a traceback on each)."""
    from analysis.runs.rundir import read_results

    def ok(median, V=1024):
        return {
            "status": "ok",
            "spec": {"op": "all_gather", "V_bytes": V, "size_bytes": 1024},
            "timing": {"summary": {"median_s": median}},
        }

    texts = [
        json.dumps(ok(-0.001)),
        json.dumps(ok(1e308)),
        json.dumps(ok(1e-3)).replace("0.001", "Infinity"),
        json.dumps(ok(1e-3, V="NaN")),
        "[" * 200_000 + "]" * 200_000,
        json.dumps(ok(1e-3)).replace("0.001", "1e999"),
        json.dumps(dict(ok(1e-3), timing=[1e-3])),
        json.dumps({"status": "failed", "error": "x", "spec": {"op": "all_gather", "V_bytes": "NaN"}}),
    ]
    for i, text in enumerate(texts):
        (tmp_path / f"{i}_junk").mkdir()
        (tmp_path / f"{i}_junk" / "result.json").write_text(text)
    results = read_results(tmp_path)
    assert [r.status for r in results] == ["failed"] * 8
    errors = [r.error.split(": ", 1)[-1] for r in results]
    assert errors == [
        "says ok but has no timing.summary.median_s in range (-0.001)",
        "says ok but has no timing.summary.median_s in range (1e+308)",
        "holds Infinity, which shardlab never writes (it writes null)",
        "says ok but has no spec.V_bytes as a byte count ('NaN')",
        "nested too deeply",
        "says ok but has no timing.summary.median_s in range (inf)",
        "says ok but has no timing as an object or timing.summary.median_s",
        "x",  # its own error; its V nulled, so the report's size column holds numbers only
    ]
    assert results[7].spec.V_bytes is None and results[7].spec.op == "all_gather"
    r = analysis("report", tmp_path, "--allow-mixed")
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
