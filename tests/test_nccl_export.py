"""A sweep's nccl-tests files (analysis/report/nccl_export.py): per family, nccl-tests' ``-J``
JSON and its printed table, read back by shardlab's own nccl-tests importers; summary.csv's
sweep id and start time."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from analysis.importers.nccl_tests import parse_nccl_tests
from analysis.importers.nccl_tests_json import parse_nccl_tests_json
from analysis.report.nccl_export import nccl_json, write_nccl_exports
from analysis.runs.sweep_id import sweep_identity


def _family() -> pd.DataFrame:
    """AllGather of float32 over 8 devices at S = 8 KiB and 64 KiB, 100 and 200 us: algbw S/t =
    81.92 MB/s and 327.68 MB/s, busbw 7/8 of it = 71.68 and 286.72 MB/s (worked by hand)."""
    return pd.DataFrame(
        {
            "family": ["all_gather over X=8 float32", "all_gather over X=8 float32"],
            "op": ["all_gather", "all_gather"],
            "V_bytes": [8192, 65536],
            "S_bytes": [8192, 65536],
            "group_size": [8, 8],
            "dtype": ["float32", "float32"],
            "time_s": [100e-6, 200e-6],
            "algbw_Bps": [81.92e6, 327.68e6],
            "busbw_Bps": [71.68e6, 286.72e6],
            "checked": [True, False],
            "device_kind": ["cpu", "cpu"],
            "hardware": ["cpu", "cpu"],
        }
    )


def test_a_family_is_nccl_tests_json_in_its_units():
    doc = nccl_json(_family(), "2026-11-25T17:00:00+00:00", "python -m runner +sweep=x", host="nodeA")
    assert doc["start_time"] == "2026-11-25T17:00:00+00:00" and doc["args"][0] == "shardlab:all_gather_perf"
    assert doc["config"]["ngpus"] == 8 and doc["config"]["devices"][0]["hostname"] == "nodeA"
    assert (doc["config"]["minimum_bytes"], doc["config"]["maximum_bytes"]) == (8192, 65536)
    first, second = doc["results"]
    # count: the elements one rank sends, 8192 B / 4 B / 8 ranks = 256
    assert (first["size"], first["count"], first["type"], first["redop"], first["root"]) == (
        8192,
        256,
        "float",
        "none",
        -1,
    )
    assert first["out_of_place"] == pytest.approx({"time": 100.0, "alg_bw": 0.08192, "bus_bw": 0.07168, "nwrong": 0})
    assert second["count"] == 2048 and second["out_of_place"]["nwrong"] is None  # unchecked: no count to give
    assert first["in_place"] is None
    assert doc["average_bus_bandwidth"] == pytest.approx((0.07168 + 0.28672) / 2)


def test_the_files_read_back_through_shardlabs_nccl_tests_importers(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"started_at": "2026-11-25T17:00:00+00:00", "command": "c"}))
    g = _family()
    (path,) = write_nccl_exports(tmp_path, g, [{"process": {"host": "nodeA"}}])
    assert path == tmp_path / "nccl-tests" / "all_gather_over_X_8_float32.json"
    (run,) = parse_nccl_tests_json(path.read_text(), path)
    assert (run.op, run.op_from, run.ranks, run.hosts) == ("all_gather", "binary name", 8, ["nodeA"])
    assert [r.out_of_place.busbw_Bps for r in run.rows] == pytest.approx(list(g["busbw_Bps"]), rel=1e-12)
    assert [r.out_of_place.time_s for r in run.rows] == pytest.approx(list(g["time_s"]), rel=1e-12)
    text = path.with_suffix(".txt").read_text()
    (printed,) = parse_nccl_tests(text, path.with_suffix(".txt"))
    assert (printed.op, printed.ranks, printed.hosts) == ("all_gather", 8, ["nodeA"])
    # the table prints GB/s with 2 decimals, as nccl-tests: 0.07 and 0.29
    assert [r.out_of_place.busbw_Bps for r in printed.rows] == pytest.approx([0.07e9, 0.29e9])
    assert [r.out_of_place.wrong for r in printed.rows] == [0, None]
    assert "# Avg bus bandwidth    : 0.1792 \n" in text


def test_the_sweep_id_is_stable_per_sweep_and_differs_between_sweeps(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "sweep.json").write_text(json.dumps({"started_at": "2026-11-25T17:00:00+00:00", "command": "c"}))
    (b / "sweep.json").write_text(json.dumps({"started_at": "2026-11-25T17:00:01+00:00", "command": "c"}))
    ida, start = sweep_identity(a)
    assert start == "2026-11-25T17:00:00+00:00" and sweep_identity(a) == (ida, start) and len(ida) == 12
    assert sweep_identity(b)[0] != ida
    (b / "sweep.json").write_text(json.dumps({"started_at": "t", "sweep_id": "mine"}))
    assert sweep_identity(b) == ("mine", "t")
    # no sweep.json (a single run): the earliest point's start
    c = tmp_path / "c"
    c.mkdir()
    assert sweep_identity(c, [{"started_at": "2026-01-02"}, {"started_at": "2026-01-01"}])[1] == "2026-01-01"


def test_a_sweeps_report_writes_the_files_and_summary_names_the_sweep(tiny_sweeps, tmp_path):
    from analysis.report.sweep_report import write_report
    from analysis.sweep import load_sweep

    root = tmp_path / "s"
    shutil.copytree(tiny_sweeps["float32"], root)
    write_report(root)
    started = json.loads((root / "sweep.json").read_text())["started_at"]
    summary = pd.read_csv(root / "summary.csv")
    assert set(summary["sweep_start_time"]) == {started} and summary["sweep_id"].nunique() == 1
    sweep = load_sweep(root)
    pts = sweep.points
    # the samples table is the sweep's too, the same as samples.csv: every sample of the 8 points
    samples = sweep.samples
    assert list(samples.columns) == ["point", "round", "estimator", "sample", "time_s"]
    assert samples["point"].nunique() == 8 and samples["time_s"].notna().all()
    pd.testing.assert_frame_equal(samples, pd.read_csv(root / "samples.csv"), check_dtype=False)
    files = sorted((root / "nccl-tests").glob("*.json"))
    assert len(files) == pts["family"].nunique() == 2
    for f in files:
        doc = json.loads(f.read_text())
        (run,) = parse_nccl_tests_json(f.read_text(), f)
        mine = pts[pts["op"] == run.op].sort_values("V_bytes")
        assert [r.out_of_place.busbw_Bps for r in run.rows] == pytest.approx(list(mine["busbw_Bps"]), rel=1e-12)
        assert doc["average_bus_bandwidth"] == pytest.approx(mine["busbw_Bps"].mean() / 1e9, rel=1e-12)
        assert f.with_suffix(".txt").is_file()
