"""An output folder Hydra cannot write into is one line naming the key, before anything runs:
a symlink loop or a link to nothing on the way, a file where the folder should be, a folder
that cannot be created (each was a Hydra traceback: ``FileExistsError``, ``OSError: Too many
levels of symbolic links``, ``FileNotFoundError``)."""

from __future__ import annotations

import os

import pytest
from shardlab_cli import runner

from runner.sweep.folder import unwritable


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
