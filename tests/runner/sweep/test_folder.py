"""A sweep folder holds one sweep: its lock (shared by the hosts of a distributed=auto sweep,
one line where the file system cannot lock), point folders told apart by their overrides, and
the line that names how another sweep differs. The command-line cases are in tests/cli/test_resume.py
and tests/runner/sweep/test_distributed.py.

An output folder Hydra cannot write into is one line naming the key, before anything runs:
a symlink loop or a link to nothing on the way, a file where the folder should be, a folder
that cannot be created (each was a Hydra traceback: ``FileExistsError``, ``OSError: Too many
levels of symbolic links``, ``FileNotFoundError``).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import open_dict
from shardlab_cli import analysis, runner

from analysis.runs.sweep_match import match_points, sweep_difference
from runner.sweep import lock
from runner.sweep.folder import unwritable

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


@pytest.fixture
def odd_paths(tmp_path):
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "x")
    (tmp_path / "a_file").write_text("not a folder")
    return tmp_path


def test_unwritable_says_why_for_each_kind_of_bad_folder(odd_paths):
    t = odd_paths
    assert unwritable(t / "loop1" / "run", "hydra.run.dir") == (
        f"hydra.run.dir={t / 'loop1' / 'run'}: {t / 'loop1'} is a symlink loop; choose another hydra.run.dir"
    )
    assert unwritable(t / "dangling" / "s", "hydra.sweep.dir") == (
        f"hydra.sweep.dir={t / 'dangling' / 's'}: {t / 'dangling'} is a symlink to nothing "
        f"({t / 'nowhere' / 'x'}); choose another hydra.sweep.dir"
    )
    assert unwritable(t / "a_file", "hydra.run.dir") == (
        f"hydra.run.dir={t / 'a_file'}: is a file, not a folder; choose another hydra.run.dir"
    )
    # below a file: the folder cannot be created
    assert unwritable(t / "a_file" / "run", "hydra.run.dir") == (
        f"hydra.run.dir={t / 'a_file' / 'run'}: cannot write there: Not a directory; choose another hydra.run.dir"
    )
    # a name longer than the file system allows (it was a traceback from Path.is_symlink)
    assert unwritable(t / ("a" * 300), "hydra.run.dir") == (
        f"hydra.run.dir={t / ('a' * 300)}: cannot write there: File name too long; choose another hydra.run.dir"
    )
    # a good folder is created (Hydra would) and nothing is left in it
    assert unwritable(t / "new" / "run", "hydra.run.dir") is None
    assert os.listdir(t / "new" / "run") == []


@pytest.mark.parametrize("mode", ["run", "sweep"])
def test_a_run_or_sweep_into_a_symlink_loop_is_one_line_and_exit_2(odd_paths, mode):
    where = odd_paths / "loop1" / "out"
    args = ["op.size_bytes=4KiB", "timing.rounds=1", f"hydra.{mode}.dir={where}"]
    proc = runner(*(["+sweep=allgather_sizes"] if mode == "sweep" else []), *args, expect=2)
    said = [line for line in proc.stderr.splitlines() if line.strip()]
    loop = odd_paths / "loop1"
    assert said == [f"error: hydra.{mode}.dir={where}: {loop} is a symlink loop; choose another hydra.{mode}.dir"]
    assert proc.stdout == ""


def test_a_full_disk_at_the_record_is_one_line_saying_what_was_kept(compose_cfg, tmp_path, monkeypatch):
    """The disk fills while a single run measures: the run stops with OutputError, naming the file
    and what follows (a single run has no earlier points to keep, and no resume)."""
    import errno

    from runner.errors import OutputError
    from runner.sweep import point

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(point, "write_json_atomic", full)
    cfg = compose_cfg(["op.size_bytes=4KiB", "timing.rounds=1", "timing.loop=false", "trace.enabled=false"])
    with pytest.raises(OutputError) as err:
        point.run(cfg, tmp_path / "run")
    assert str(err.value) == (
        f"cannot write {tmp_path / 'run' / 'result.json'}: No space left on device; its measurement "
        "is lost; free some space (or choose another hydra.run.dir) and run it again"
    )


FULL_AT_SECOND_POINT = """
import errno, sys
import hydra.core.utils as hu

orig, calls = hu._save_config, []


def save(cfg, filename, output_dir):
    calls.append(filename)
    if len(calls) > 3:  # the second point's .hydra/config.yaml: the disk is full
        raise OSError(errno.ENOSPC, "No space left on device", str(output_dir / filename))
    return orig(cfg, filename, output_dir)


hu._save_config = save
if __name__ == "__main__":
    from runner.__main__ import main

    sys.argv = ["shardlab", *sys.argv[1:]]
    main()
"""


def test_a_full_disk_when_hydra_saves_a_points_config_is_one_line_and_keeps_the_points_before(tmp_path):
    """Hydra writes each point's composed config before the point runs (it was Hydra's traceback)."""
    import subprocess
    import sys

    from shardlab_cli import REPO_ROOT

    script = tmp_path / "full_disk.py"
    script.write_text(FULL_AT_SECOND_POINT)
    out = tmp_path / "sweep"
    args = ["+sweep=allgather_sizes", "sizes.max=2KiB", "timing=quick", f"hydra.sweep.dir={out}"]
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    point = out / "001_op.size_bytes=2KiB,timing=quick"
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        f"error: cannot write {point / '.hydra' / 'config.yaml'}: No space left on device; nothing of this point was "
        "measured (a sweep's earlier points are on disk: resume=true finishes it once there is room)"
    ]
    assert len(list(out.glob("*/result.json"))) == 1  # the first point, kept
