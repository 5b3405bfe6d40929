"""A sweep point that kills its process, or runs past its timeout, fails alone."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from shardlab_cli import runner

from runner import run
from runner.sweep import pool
from runner.worker.serve import TEST_ABORT_ENV, TEST_HANG_ENV


def test_aborting_point_is_recorded_and_the_sweep_goes_on(tmp_path):
    out = tmp_path / "sweep"
    runner(
        "+sweep=allgather_sizes",
        "op.size_bytes=1KiB,4KiB,16KiB",
        f"hydra.sweep.dir={out}",
        "timing.rounds=1",  # the crash is in round 1; later rounds would only re-time the two ok points
        "timing.budget_s=0.2",
        "trace.iters=2",
        env={TEST_ABORT_ENV: str(4096)},  # the 4KiB point calls os.abort()
        expect=1,  # the sweep went on, and says a point failed
    )
    results = {
        p.name: json.loads((p / "result.json").read_text()) for p in out.iterdir() if (p / "result.json").exists()
    }
    status = {r["config"]["op"]["size_bytes"]: r["status"] for r in results.values()}
    assert status == {"1KiB": "ok", "4KiB": "failed", "16KiB": "ok"}
    dead = next(r for r in results.values() if r["status"] == "failed")
    assert dead["error_type"] == "WorkerDied" and "SIGABRT" in dead["error"]
    # the points after the crash ran in a fresh worker
    pids = {r["worker"]["pid"] for r in results.values() if r["status"] == "ok"}
    assert len(pids) == 2
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(summary["status"]) == ["failed", "ok", "ok"]
    report = (out / "report" / "report.md").read_text()
    assert "Failed and skipped" in report and "SIGABRT" in report


@pytest.fixture
def fresh_workers():
    """Workers started inside the test inherit its test hooks: none may outlive it."""
    pool.discard_worker()
    yield
    pool.discard_worker()


def test_point_past_its_timeout_is_killed_and_recorded(compose_cfg, tmp_path, monkeypatch, fresh_workers):
    monkeypatch.setenv(TEST_HANG_ENV, str(64 << 10))  # the worker hangs on the 64 KiB point
    short = ["timing.warmup_max_s=0.5", "timing.budget_s=0.2", "trace.max_s=0.5", "timeout_s=7"]
    result = run(compose_cfg(["op.size_bytes=64KiB", *short]), tmp_path)
    assert result["status"] == "failed" and result["error_type"] == "WorkerDied"
    assert "timed out after 7 s" in result["error"]
    on_disk = json.loads((tmp_path / "result.json").read_text())
    assert on_disk["status"] == "failed"
    # and the next point gets a fresh, working worker
    fast = ["timing.rounds=1", "timing.budget_s=0.2", "trace.enabled=false"]
    ok = run(compose_cfg(["op.size_bytes=4KiB", *fast]), tmp_path / "next")
    assert ok["status"] == "ok" and ok["worker"]["points_served"] == 1
    # its JAX start: the whole of it, and the part this point waited for (no more than the whole)
    assert 0 < ok["worker"]["start_wait_s"] <= ok["worker"]["start_s"]


def test_a_new_worker_says_it_is_starting_until_jax_is_ready():
    """What lets a sweep use the wait for JAX (runner.sweep.point imports the later rounds'
    modules then): asked at once, without waiting, a new worker is starting; once it has said
    it is ready, it is not."""
    from runner.sweep.workers import Worker

    worker = Worker({})
    try:
        assert worker.starting()  # importing JAX alone takes a second here
        assert worker.started()["backend"] == "cpu"
        assert not worker.starting()
    finally:
        worker.kill()
