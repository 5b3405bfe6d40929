"""Each point's HLO and trace facts are read once, by the worker, and kept as ``ops_table.json``
beside them; the report reads that file instead of parsing the trace and HLO again (a
1000-point report spent 49 s there), and rebuilds it only where it no longer matches the files."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from small_sweep import small_sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, compose_cfg):
    root = tmp_path_factory.mktemp("tables") / "s"
    return small_sweep(root, compose_cfg, sizes=("1KiB", "4KiB"), extra=["trace.iters=3"])


def _summary(root):
    from analysis.runs.rundir import read_results
    from analysis.runs.summary import summary_table

    return summary_table(read_results(root))


def test_the_worker_writes_each_points_table_and_the_report_reads_the_same_rows_from_it(sweep):
    from analysis.runs.point_table import TABLE_NAME, saved_table
    from analysis.runs.rundir import read_results

    results = read_results(sweep)
    assert all(saved_table(r) is not None for r in results)  # written by the worker, current
    table = json.loads((sweep / results[0].point / TABLE_NAME).read_text())
    assert table["stamp"]["steps"] == 3 and table["stamp"]["mesh_axes"] == {"X": 8}
    assert [row["hlo_kind"] for row in table["hlo"]["rows"]] == ["all-gather"]
    assert table["trace"]["ops"][0]["iterations"] == 3
    from_tables = _summary(sweep)
    for r in results:
        (sweep / r.point / TABLE_NAME).unlink()
    rebuilt = _summary(sweep)  # from the trace and HLO, as before the tables existed
    pd.testing.assert_frame_equal(from_tables, rebuilt)
    assert rebuilt["trace_op_time_s"].notna().all() and rebuilt["hlo_axes"].eq("X").all()
    assert all(saved_table(r) is not None for r in results)  # and written back


def test_a_current_table_is_what_the_summary_shows_and_a_stale_one_is_rebuilt(sweep):
    from analysis.runs.point_table import TABLE_NAME
    from analysis.runs.rundir import read_results

    r = read_results(sweep)[0]
    path = sweep / r.point / TABLE_NAME
    table = json.loads(path.read_text())
    true_time = table["trace"]["ops"][0]["op_time_s"]
    table["trace"]["ops"][0]["op_time_s"] = 123.0  # planted: only a summary read from the table shows it
    path.write_text(json.dumps(table))
    assert _summary(sweep).set_index("point").loc[r.point, "trace_op_time_s"] == 123.0
    xplane = sweep / r.point / r.files["xplane"]
    st = xplane.stat()
    os.utime(xplane, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the trace replaced since
    assert _summary(sweep).set_index("point").loc[r.point, "trace_op_time_s"] == pytest.approx(true_time, rel=1e-12)
    assert json.loads(path.read_text())["trace"]["ops"][0]["op_time_s"] == pytest.approx(true_time, rel=1e-12)


def test_a_damaged_or_unwritable_table_costs_a_rebuild_and_nothing_else(sweep, monkeypatch):
    import analysis.runs.point_table as point_table
    from analysis.runs.rundir import read_results

    want = _summary(sweep)
    r = read_results(sweep)[1]
    (sweep / r.point / point_table.TABLE_NAME).write_bytes(b"\x00{junk")
    calls = []

    def refuse(point_dir, table):
        calls.append(point_dir)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(point_table, "save", refuse)
    pd.testing.assert_frame_equal(_summary(sweep), want)
    assert calls == [r.point_dir]  # rebuilt once, tried to write it back, went on without it
