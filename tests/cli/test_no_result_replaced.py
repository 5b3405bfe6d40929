"""Nothing measured is replaced without a word: a folder that holds results is refused in one line
unless ``resume=true`` (keep them) or ``overwrite=true`` (measure again) says what to do; a single
run never writes into a sweep's point folder, nor into a folder another run is writing; an empty
``hydra.run.dir`` is not the current folder. (Each of these exited 0 and replaced results.)"""

from __future__ import annotations

import time

from shardlab_cli import REPO_ROOT, runner, start

QUICK = ["timing=quick", "timing.budget_s=0.2", "timing.min_iters=5"]
SWEEP = ["+sweep=allgather_sizes", "sizes.max=2KiB", *QUICK]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _stamps(folder):
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.glob("*/result.json"))}


def test_a_finished_sweep_is_not_measured_again_without_resume_or_overwrite(tmp_path):
    out = tmp_path / "sweep"
    runner(*SWEEP, f"hydra.sweep.dir={out}", expect=0)
    before = _stamps(out)
    assert len(before) == 2
    again = runner(*SWEEP, f"hydra.sweep.dir={out}", expect=2)
    assert _lines(again.stderr) == [
        f"error: hydra.sweep.dir={out}: holds 2 measured point(s) of this sweep; resume=true keeps the ok ones "
        "and runs the rest, overwrite=true measures every point again and replaces them, or choose another "
        "hydra.sweep.dir"
    ]
    assert _stamps(out) == before  # not a byte changed
    runner(*SWEEP, f"hydra.sweep.dir={out}", "resume=true", expect=0)
    assert _stamps(out) == before  # every point kept
    runner(*SWEEP, f"hydra.sweep.dir={out}", "overwrite=true", expect=0)
    after = _stamps(out)
    assert after.keys() == before.keys() and all(after[p][0] > before[p][0] for p in before)  # measured again


def test_a_single_run_never_replaces_a_result_or_a_sweeps_point(tmp_path):
    run_dir = tmp_path / "run"
    runner("op.size_bytes=1KiB", *QUICK, f"hydra.run.dir={run_dir}", expect=0)
    first = (run_dir / "result.json").read_bytes()
    again = runner("op.size_bytes=1KiB", *QUICK, f"hydra.run.dir={run_dir}", expect=2)
    assert _lines(again.stderr) == [
        f"error: hydra.run.dir={run_dir}: holds a run's result.json already; overwrite=true measures again and "
        "replaces it, or choose another hydra.run.dir"
    ]
    assert (run_dir / "result.json").read_bytes() == first
    runner("op.size_bytes=1KiB", *QUICK, f"hydra.run.dir={run_dir}", "overwrite=true", expect=0)
    assert (run_dir / "result.json").read_bytes() != first

    sweep = tmp_path / "sweep"
    runner(*SWEEP, f"hydra.sweep.dir={sweep}", expect=0)
    point = sorted(sweep.glob("000_*"))[0]
    kept = (point / "result.json").read_bytes()
    for extra in ([], ["overwrite=true"]):  # not even with overwrite: the sweep could no longer be reported
        refused = runner("op.size_bytes=1KiB", *QUICK, f"hydra.run.dir='{point}'", *extra, expect=2)
        assert _lines(refused.stderr) == [
            f"error: hydra.run.dir={point}: is a point folder of the sweep in {sweep}; a single run there would "
            "replace the point's result: resume that sweep (resume=true), or choose another hydra.run.dir"
        ]
    assert (point / "result.json").read_bytes() == kept


def test_an_empty_run_folder_is_refused_not_taken_for_the_current_one(tmp_path):
    # from another folder (where shardlab is found on PYTHONPATH): its contents are what is checked
    where = {"cwd": tmp_path, "env": {"PYTHONPATH": str(REPO_ROOT)}}
    proc = runner("op.size_bytes=1KiB", *QUICK, "hydra.run.dir=''", **where, expect=2)
    assert _lines(proc.stderr) == [
        "error: hydra.run.dir is empty; name a folder for the run (hydra.run.dir=. for this one)"
    ]
    assert list(tmp_path.iterdir()) == []


def test_two_runs_into_one_folder_at_once_the_second_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    first = start("runner", "op.size_bytes=1KiB", *QUICK, f"hydra.run.dir={run_dir}")
    try:
        lock = run_dir / ".shardlab.lock"
        deadline = time.time() + 60
        while not (lock.is_file() and str(first.pid) in lock.read_text()) and time.time() < deadline:
            time.sleep(0.05)
        second = runner("op.size_bytes=2KiB", *QUICK, f"hydra.run.dir={run_dir}", expect=2)
        said = _lines(second.stderr)
        assert len(said) == 1 and said[0].startswith(f"error: hydra.run.dir={run_dir}: ")
        assert f"in use by another shardlab run (pid {first.pid} on" in said[0]
        assert first.wait(timeout=300) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert '"size_bytes": 1024' in (run_dir / "result.json").read_text()  # the first run's, whole
