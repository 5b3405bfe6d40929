"""Reports are written whole: every report file through a temporary name and a rename, and a
sweep whose report could not be written exits 4, saying what is on disk."""

from __future__ import annotations

import errno
import io
import os
import time
from pathlib import Path

import pytest
from shardlab_cli import runner

from analysis.runs.rundir import write_bytes_atomic

FAST = ["timing.rounds=1", "timing.budget_s=0.2", "timing.min_iters=5", "trace.enabled=false"]


class _HalfFull:
    """A file on a disk that fills up half-way through the first write (ENOSPC)."""

    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def __getattr__(self, name):
        return getattr(self.f, name)

    def write(self, data):
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")


def _disk_full_for(monkeypatch, name_part: str) -> None:
    """Every file opened for writing whose name holds ``name_part`` (its temp names too) hits a
    full disk half-way. Path.write_text and os.fdopen both open through io.open."""
    real_open = io.open

    def full_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        name = os.readlink(f"/proc/self/fd/{file}") if isinstance(file, int) else str(file)
        if any(m in mode for m in "wax") and name_part in Path(name).name:
            return _HalfFull(f)
        return f

    monkeypatch.setattr(io, "open", full_open)


def test_a_report_cut_off_by_a_full_disk_leaves_every_file_whole(tmp_path, compose_cfg, monkeypatch):
    from small_sweep import small_sweep

    from analysis.report import write_report

    root = small_sweep(tmp_path / "s", compose_cfg, sizes=("1KiB", "2KiB"), extra=["trace.enabled=false"])
    index = write_report(root)
    before = {p: p.read_bytes() for p in (index, root / "summary.csv")}
    for part in ("summary", "index"):  # the disk fills at the sweep's table, then at the page
        with monkeypatch.context() as m:
            _disk_full_for(m, part)
            with pytest.raises(OSError) as err:
                write_report(root)
        assert err.value.errno == errno.ENOSPC and part in Path(err.value.filename).name
        # each file is the earlier report's, whole; no stub and no temp file beside it
        assert {p: p.read_bytes() for p in before} == before
        assert [p.name for p in root.rglob("*") if ".tmp" in p.name] == []
    assert write_report(root) == index  # and with room again, a whole new one


def test_a_full_disk_is_one_line_and_leaves_no_temp_file(tmp_path, monkeypatch):
    import json

    from analysis.runs.rundir import write_json_atomic

    real_dumps = json.dumps
    _disk_full_for(monkeypatch, "result")
    with pytest.raises(OSError) as err:
        write_json_atomic(tmp_path / "result.json", {"a": 1})
    assert err.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temp
    assert real_dumps({"x": float("nan")}, allow_nan=True)  # (json itself untouched)


def test_the_atomic_writer_leaves_the_old_file_or_the_new_one(tmp_path, monkeypatch):
    path = tmp_path / "index.html"
    path.write_bytes(b"old")
    with monkeypatch.context() as m:
        _disk_full_for(m, "index")
        with pytest.raises(OSError, match="No space left"):
            write_bytes_atomic(path, b"new" * 1000)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["index.html"]
    write_bytes_atomic(path, b"new")
    assert path.read_bytes() == b"new" and oct(path.stat().st_mode & 0o777) == "0o644"


def test_a_sweep_whose_report_cannot_be_written_exits_4_and_says_what_is_on_disk(tmp_path):
    out = tmp_path / "s"
    out.mkdir()
    (out / "report").write_text("a file where the report folder goes\n")  # as an unwritable folder would
    proc = runner("+sweep=allgather_sizes", "op.size_bytes=1KiB", *FAST, f"hydra.sweep.dir={out}", expect=4)
    (line,) = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("no report")]
    assert line == (
        f"no report: cannot write {out / 'report'}: File exists; on disk: the 1 point(s)' result.json, each whole; "
        f"no report/index.html; no report file cut off; once there is room: python -m analysis report {out}"
    )
    assert len(list(out.glob("*/result.json"))) == 1


def test_what_is_on_disk_names_whose_page_is_there(tmp_path):
    from runner.sweep.callbacks import on_disk

    (tmp_path / "000_a").mkdir()
    (tmp_path / "000_a" / "result.json").write_text("{}")
    assert on_disk(tmp_path, time.time()) == (
        "the 1 point(s)' result.json, each whole; no report/index.html; no report file cut off"
    )
    page = tmp_path / "report" / "index.html"
    page.parent.mkdir()
    page.write_text("<html>")
    os.utime(page, (time.time() - 3600, time.time() - 3600))
    earlier = time.strftime("%H:%M", time.localtime(page.stat().st_mtime))
    assert f"report/index.html of an earlier report ({earlier})" in on_disk(tmp_path, time.time())
    assert "report/index.html of this report" in on_disk(tmp_path, time.time() - 7200)
