"""A sweep folder holds one sweep: its lock (shared by the hosts of a distributed=auto sweep,
one line where the file system cannot lock), point folders told apart by their overrides, and
the line that names how another sweep differs. The command-line cases are in test_resume.py
and test_distributed.py."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import open_dict
from shardlab_cli import analysis

from analysis.runs.sweep_match import match_points, sweep_difference
from runner.sweep import lock

HOLDER = (
    "import sys, time\nfrom pathlib import Path\nfrom runner.sweep.lock import hold\n"
    "hold(Path(sys.argv[1]), shared=sys.argv[2] == 'shared')\nprint('held', flush=True)\ntime.sleep(120)\n"
)


@pytest.fixture
def holding(repo_root):
    """``holding(folder, "shared"|"alone")``: another process holding the folder's lock."""
    procs: list[subprocess.Popen] = []

    def start(folder: Path, how: str) -> subprocess.Popen:
        p = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(folder), how], cwd=repo_root, stdout=subprocess.PIPE, text=True
        )
        procs.append(p)
        assert p.stdout.readline() == "held\n"
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait(timeout=10)


@pytest.fixture
def fresh_locks(monkeypatch):
    """This test's own record of held folders (the lock files it opens close with it)."""
    monkeypatch.setattr(lock, "_held", {})


def test_the_processes_of_a_multi_host_sweep_share_the_lock_and_a_lone_sweep_is_refused(tmp_path, holding, fresh_locks):
    shared = tmp_path / "auto"
    other = holding(shared, "shared")  # one host of a distributed=auto sweep
    lock.hold(shared, shared=True)  # another host of the same sweep: no refusal
    alone = tmp_path / "alone"
    holding(alone, "alone")
    lock._held.clear()
    with pytest.raises(lock.FolderInUse, match="is in use by another shardlab run"):
        lock.hold(alone, shared=True)  # an auto process into a lone sweep's folder
    lock._held.clear()
    with pytest.raises(lock.FolderInUse, match=f"is in use by another shardlab run \\(pid ({other.pid}|\\d+) on "):
        lock.hold(shared)  # a lone sweep (or resume) into a folder the hosts share


def test_a_file_system_without_locks_is_one_line_naming_it(tmp_path, monkeypatch, fresh_locks):
    def no_locks(f, how):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(lock.fcntl, "flock", no_locks)
    fs = lock.file_system(tmp_path)
    assert fs is not None  # this machine has /proc/mounts
    with pytest.raises(lock.CannotLock) as err:
        lock.hold(tmp_path / "s", shared=True)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"cannot lock {tmp_path / 's' / lock.LOCK_NAME}: ")
    assert f"a {fs[0]} file system mounted at {fs[1]} does not give file locks (No locks available)" in line
    assert "SHARDLAB_NO_LOCK=1" in line
    monkeypatch.setenv(lock.NO_LOCK_ENV, "1")  # what the line offers: go on without the lock
    lock.hold(tmp_path / "s", shared=True)


def test_a_lock_the_file_system_refuses_stops_the_sweep_in_one_line(tmp_path, compose_cfg, monkeypatch, fresh_locks):
    from runner.sweep.folder import claim

    def no_locks(f, how):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(lock.fcntl, "flock", no_locks)
    cfg = compose_cfg(["+sweep=allgather_sizes"], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.sweep.dir = str(tmp_path / "s")
    line = claim(cfg, None)
    assert line.startswith(f"hydra.sweep.dir={tmp_path / 's'}: cannot lock ") and "(Function not implemented)" in line


def test_the_file_system_of_a_path_is_the_longest_mount_above_it(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/sda1 / ext4 rw 0 0\n"
        "server:/export /mnt/shared nfs4 rw,vers=4.2 0 0\n"
        "tmpfs /mnt/shared/scratch\\040space tmpfs rw 0 0\n"
    )
    assert lock.file_system(Path("/mnt/shared/ag/000"), mounts) == ("nfs4", "/mnt/shared")
    assert lock.file_system(Path("/mnt/sharedX/ag"), mounts) == ("ext4", "/")
    assert lock.file_system(Path("/mnt/shared/scratch space/a"), mounts) == ("tmpfs", "/mnt/shared/scratch space")
    assert lock.file_system(Path("/x"), tmp_path / "absent") is None


# --- point folders by their overrides --------------------------------------------------------

ASKED = ["+sweep=allgather_sizes", "timing.rounds=1", "trace.enabled=False"]


def _point(root: Path, name: str, overrides: list[str] | None) -> Path:
    d = root / name
    (d / ".hydra").mkdir(parents=True)
    (d / "result.json").write_text(json.dumps({"status": "failed", "error": "a stand-in"}))
    if overrides is not None:
        (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return d


def _issue_folder(root: Path) -> Path:
    """The issue's folder: 1,2,4 KiB, then a resume with 1,4,8 KiB (before the refusal)."""
    for name, size, resumed in (
        ("000_op.size_bytes=1KiB", "1KiB", False),
        ("001_op.size_bytes=2KiB", "2KiB", False),
        ("002_op.size_bytes=4KiB", "4KiB", False),
        ("001_op.size_bytes=4KiB", "4KiB", True),
        ("002_op.size_bytes=8KiB", "8KiB", True),
    ):
        _point(root, name, [f"op.size_bytes={size}", *ASKED, *(["resume=true"] if resumed else [])])
    asked = [
        {"num": i, "overrides": [f"op.size_bytes={s}", *ASKED, "resume=true"]}
        for i, s in enumerate(("1KiB", "4KiB", "8KiB"))
    ]
    (root / "sweep.json").write_text(json.dumps({"expected_points": asked}))
    return root


def test_point_folders_are_the_sweeps_points_by_their_overrides_not_their_numbers(tmp_path):
    from analysis.runs.rundir import expected_points, point_dirs

    root = _issue_folder(tmp_path / "D")
    matched, extra = match_points(point_dirs(root), expected_points(root))
    assert {n: d.name for n, d in matched.items()} == {
        0: "000_op.size_bytes=1KiB",
        1: "001_op.size_bytes=4KiB",
        2: "002_op.size_bytes=8KiB",
    }
    assert sorted(d.name for d in extra) == ["001_op.size_bytes=2KiB", "002_op.size_bytes=4KiB"]


def test_the_issues_mixed_folder_is_refused_by_the_report(tmp_path):
    from analysis.sweep import MixedSweepError, load_sweep

    root = _issue_folder(tmp_path / "D")
    with pytest.raises(
        MixedSweepError,
        match=r"point folders the sweep did not ask for: 001_op.size_bytes=2KiB, 002_op.size_bytes=4KiB",
    ):
        load_sweep(root)
    proc = analysis("report", root, expect=2)
    assert len(proc.stderr.strip().splitlines()) == 1 and "001_op.size_bytes=2KiB" in proc.stderr


def test_a_folder_copied_without_its_overrides_is_matched_by_its_name(tmp_path):
    root = tmp_path / "D"
    dirs = [
        _point(root, "0_op.size_bytes=1KiB,timing.rounds=1", None),  # an older shardlab's numbering, no .hydra
        _point(root, "001_op.size_bytes=2KiB,timing.rounds=1", None),
        _point(root, "002_op.size_bytes=2KiB,timing.rounds=2", None),  # another setting: not this sweep's
    ]
    asked = [
        {"num": i, "overrides": ["+sweep=x", f"op.size_bytes={s}", "timing.rounds=1"]}
        for i, s in enumerate(("1KiB", "2KiB"))
    ]
    matched, extra = match_points(dirs, asked)
    assert matched == {0: dirs[0], 1: dirs[1]} and extra == [dirs[2]]


def test_the_difference_between_two_sweeps_names_the_keys():
    def points(sizes, sweep="allgather_sizes", ops=None, extra=()):
        return [
            [*([f"op={op}"] if op else []), f"op.size_bytes={s}", f"+sweep={sweep}", *extra]
            for op in (ops or [None])
            for s in sizes
        ]

    ag = points(["1KiB", "2KiB", "4KiB"])
    assert sweep_difference(ag, points(["1KiB", "2KiB", "4KiB"], extra=["resume=true", "sizes.max=1GiB"])) is None
    assert sweep_difference(ag, points(["1KiB", "4KiB", "8KiB"])) == (
        "op.size_bytes: 1KiB,2KiB,4KiB there, 1KiB,4KiB,8KiB in this command"
    )
    coll = points(
        ["1KiB", "2KiB", "4KiB"], "collectives_sizes", ["all_gather", "reduce_scatter", "all_reduce", "all_to_all"]
    )
    assert sweep_difference(ag, coll) == (
        "op: not set there, all_gather,reduce_scatter,all_reduce,all_to_all in this command; "
        "sweep: allgather_sizes there, collectives_sizes in this command"
    )
    assert sweep_difference(ag, points(["4KiB", "2KiB", "1KiB"])) == (
        "op.size_bytes: 1KiB,2KiB,4KiB there, 4KiB,2KiB,1KiB in this command"  # another order: other folders
    )
    a1, a2, b1, b2 = ([f"op={op}", f"op.size_bytes={s}"] for op, s in (("a", 1), ("a", 2), ("b", 1), ("b", 2)))
    assert sweep_difference([a1, a2, b1], [a1, b1, b2]) == (
        "the same values in another order or combination (3 points there, 3 here)"
    )
    # the hosts of one multi-host sweep pass each its own process id: the same sweep
    host0, host1 = (points(["1KiB"], extra=[f"distributed.process_id={i}"]) for i in (0, 1))
    assert sweep_difference(host0, host1) is None


def test_a_single_run_is_refused_in_a_sweeps_folder_and_in_a_running_sweeps_point_folder(tmp_path, holding):
    from runner.sweep.folder import single_run_problem

    done = tmp_path / "done"
    done.mkdir()
    (done / "sweep.json").write_text("{}")
    assert single_run_problem(done) == (
        f"hydra.run.dir={done}: is a sweep's folder (sweep.json); a single run's result.json there would hide "
        "the sweep's points: choose another hydra.run.dir"
    )
    running = tmp_path / "running"
    p = holding(running, "alone")
    said = single_run_problem(running / "000_op.size_bytes=1KiB")
    assert f"{running} is in use by another shardlab run (pid {p.pid} on " in said
    assert single_run_problem(tmp_path / "elsewhere") is None
