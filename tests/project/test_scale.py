"""A sweep of thousands of points: its points' traces read on every core with the same rows as
one by one, and a report that summarises long tables instead of printing every row."""

from __future__ import annotations

import pandas as pd
from small_sweep import small_sweep


def test_points_read_in_worker_processes_give_the_same_rows(tmp_path, compose_cfg, monkeypatch):
    import analysis.runs.summary as summary
    from analysis.runs.rundir import read_results

    root = small_sweep(tmp_path / "s", compose_cfg, sizes=("1KiB", "2KiB", "4KiB"), extra=["trace.iters=2"])
    results = read_results(root)
    one_by_one = summary.summary_table(results)
    for table in root.glob("*/ops_table.json"):  # as a sweep measured before the worker wrote them
        table.unlink()
    monkeypatch.setattr(summary, "PARALLEL_FROM", 1)
    monkeypatch.setattr(summary.os, "cpu_count", lambda: 2)
    spread = summary.summary_table(results)
    pd.testing.assert_frame_equal(spread, one_by_one)
    assert one_by_one["trace_op_time_s"].notna().sum() == 3  # the traces were really read
    assert len(list(root.glob("*/ops_table.json"))) == 3  # built in the worker processes, written back


def test_a_long_table_shows_its_ends_and_says_how_many_rows_it_left_out(tmp_path):
    from analysis.report.document import MAX_ROWS, Report

    rep = Report("t")
    rep.table(pd.DataFrame({"n": range(1000), "x": [f"row{i}" for i in range(1000)]}))
    md = rep.to_markdown(tmp_path)
    rows = [line for line in md.splitlines() if line.startswith("| ") and line != "| n | x |"]
    assert len(rows) == MAX_ROWS + 1  # the first and last MAX_ROWS/2, and the gap
    assert rows[0] == "| 0 | row0 |" and rows[-1] == "| 999 | row999 |" and rows[MAX_ROWS // 2] == "| ... | ... |"
    assert f"*1000 rows: the first and last {MAX_ROWS // 2} shown" in md
    short = Report("t")
    short.table(pd.DataFrame({"n": range(MAX_ROWS)}))
    assert short.to_markdown(tmp_path).count("\n| ") == MAX_ROWS + 1  # header + every row: nothing left out
