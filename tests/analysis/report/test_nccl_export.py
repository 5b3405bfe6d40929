"""A sweep's nccl-tests files (analysis/report/nccl_export.py): per family, nccl-tests' ``-J``
JSON and its printed table, read back by shardlab's own nccl-tests importers; summary.csv's
sweep id and start time.

A sweep's nccl-tests files (analysis.report.nccl_export) by exact expectations (issue 30,
round two's mutation check): an AllToAll family given out of order, with an unchecked point, a
point without a bandwidth and a time past 10^5 us, and an AllReduce family without S, written
as nccl-tests' ``-J`` JSON and its printed table, worked out by hand field by field; the files
of several families, the host, command and start they name, and when nothing is written.
"""

from __future__ import annotations

import json
import math
import shutil

import pandas as pd
import pytest

from analysis.importers.nccl_tests import parse_nccl_tests
from analysis.importers.nccl_tests_json import parse_nccl_tests_json
from analysis.report.nccl_export import family_slug, nccl_json, nccl_text, write_nccl_exports
from analysis.runs.record import Result
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
    (path,) = write_nccl_exports(tmp_path, g, [Result.from_json({"process": {"host": "nodeA"}})])
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
    results = [Result.from_json({"started_at": "2026-01-02"}), Result.from_json({"started_at": "2026-01-01"})]
    assert sweep_identity(c, results)[1] == "2026-01-01"


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


A2A = "all_to_all over X=4 bfloat16"
AR = "all_reduce over X=2 int8"
NAN = math.nan


def _a2a() -> pd.DataFrame:
    """AllToAll over 4 devices, bfloat16, given largest V first (the files sort by V):
    S = 512 B in 1 us (algbw 0.512 GB/s, busbw 3/4 of it 0.384), checked; S = 1024 B in 0.2 s
    (5120 B/s, busbw 3840 B/s), unchecked; S = 2048 B in 4 us without a bandwidth or a check."""
    return pd.DataFrame(
        {
            "family": [A2A] * 3,
            "op": ["all_to_all"] * 3,
            "V_bytes": [8192.0, 2048.0, 4096.0],
            "S_bytes": [2048.0, 512.0, 1024.0],
            "group_size": [4, 4, 4],
            "dtype": ["bfloat16"] * 3,
            "time_s": [4e-6, 1e-6, 0.2],
            "algbw_Bps": [NAN, 512e6, 5120.0],
            "busbw_Bps": [NAN, 384e6, 3840.0],
            "checked": [NAN, True, False],
            "device_kind": ["TPU v6 lite", "", "TPU v6 lite"],  # the first by V has none: the entry's name
            "hardware": ["tpu_v6e"] * 3,
        }
    )


def _ar() -> pd.DataFrame:
    """AllReduce over 2 devices, int8, 3 B (no S: V is the size) in 2.5 us, on the CPU."""
    return pd.DataFrame(
        {
            "family": [AR],
            "op": ["all_reduce"],
            "V_bytes": [3.0],
            "S_bytes": [NAN],
            "group_size": [2],
            "dtype": ["int8"],
            "time_s": [2.5e-6],
            "algbw_Bps": [1.2e6],
            "busbw_Bps": [1.2e6],
            "checked": [True],
            "device_kind": ["cpu"],
            "hardware": ["cpu"],
        }
    )


def test_a_family_is_nccl_tests_json_field_by_field():
    doc = nccl_json(_a2a(), "S0", "python -m runner +sweep=a2a", host="nodeA")
    results = doc.pop("results")
    average = doc.pop("average_bus_bandwidth")
    assert doc == {
        "version": 1,
        "start_time": "S0",
        "args": ["shardlab:alltoall_perf", "python", "-m", "runner", "+sweep=a2a"],
        "env": [],
        "nccl_version": None,
        "config": {
            "nthreads": 1,
            "ngpus": 4,
            "minimum_bytes": 512,
            "maximum_bytes": 2048,
            "devices": [{"rank": 0, "group": 0, "hostname": "nodeA", "device_info": "tpu_v6e"}],
        },
    }
    # the mean of the two bandwidths there are: (0.384 + 0.00000384) / 2 GB/s
    assert average == pytest.approx(0.19200192, rel=1e-12)
    # count: S / 2 B / 4 ranks
    assert [(r["size"], r["count"], r["type"], r["redop"], r["root"], r["in_place"]) for r in results] == [
        (512, 64, "bfloat16", "none", -1, None),
        (1024, 128, "bfloat16", "none", -1, None),
        (2048, 256, "bfloat16", "none", -1, None),
    ]
    assert {r["experiment_name"] for r in results} == {"all_to_all"}
    oop = [r["out_of_place"] for r in results]
    assert [o["nwrong"] for o in oop] == [0, None, None]  # only a checked point has a count to give
    assert [o["time"] for o in oop] == pytest.approx([1.0, 200000.0, 4.0], rel=1e-12)
    assert [o["alg_bw"] for o in oop[:2]] == pytest.approx([0.512, 5.12e-6], rel=1e-12)
    assert [o["bus_bw"] for o in oop[:2]] == pytest.approx([0.384, 3.84e-6], rel=1e-12)
    assert (oop[2]["alg_bw"], oop[2]["bus_bw"]) == (None, None)


def test_a_reduction_without_s_has_v_as_its_size_and_no_command_no_arguments():
    doc = nccl_json(_ar(), None, None)
    (r,) = doc["results"]
    assert doc["args"] == ["shardlab:all_reduce_perf"] and doc["start_time"] is None
    assert doc["config"]["devices"] == [{"rank": 0, "group": 0, "hostname": "localhost", "device_info": "cpu"}]
    assert (r["size"], r["count"], r["type"], r["redop"], doc["config"]["ngpus"]) == (3, 3, "int8", "sum", 2)
    assert doc["average_bus_bandwidth"] == pytest.approx(1.2e-3, rel=1e-12)
    g = _ar().assign(busbw_Bps=[NAN], op=["reduce_scatter"], device_kind=[NAN])
    doc = nccl_json(g, None, "")
    assert (doc["average_bus_bandwidth"], doc["results"][0]["redop"], doc["args"]) == (
        None,
        "sum",
        ["shardlab:reduce_scatter_perf"],
    )
    assert doc["config"]["devices"][0]["device_info"] == "cpu"  # no kind: the hardware's name


HEADER = [
    "#",
    "#" + " " * 62 + "out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
    "busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
    "(GB/s)       ",
]
A2A_TEXT = "\n".join(
    [
        "# Collective test starting: alltoall_perf",
        "# shardlab sweep started S0",
        "#",
        "# Using devices",
        "#  Rank  0 Group  0 Pid      0 on nodeA device  0 [0000:00:00] tpu_v6e",
        "#  Rank  1 Group  0 Pid      0 on nodeA device  1 [0000:00:00] tpu_v6e",
        "#  Rank  2 Group  0 Pid      0 on nodeA device  2 [0000:00:00] tpu_v6e",
        "#  Rank  3 Group  0 Pid      0 on nodeA device  3 [0000:00:00] tpu_v6e",
        *HEADER,
        "         512            64  bfloat16    none      -1     1.00    0.51    0.38      0",
        "        1024           128  bfloat16    none      -1   200000    0.00    0.00    N/A",
        "        2048           256  bfloat16    none      -1     4.00     N/A     N/A    N/A",
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 0.192002 ",
        "#",
    ]
)


def test_the_table_is_printed_as_nccl_tests_prints_it():
    g = _a2a().sort_values("V_bytes")
    assert nccl_text(nccl_json(g, "S0", None, host="nodeA"), g) == A2A_TEXT + "\n"


def test_each_family_is_written_in_the_order_it_comes_with_the_sweeps_host_command_and_start(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"started_at": "S0", "command": "python -m runner +sweep=a2a"}))
    timeless = _ar().assign(family=["all_gather X"], time_s=["n/a"])  # no time: no file
    points = pd.concat([_a2a(), timeless, _ar()], ignore_index=True)  # not in the families' name order
    results = [
        Result.from_json(r) for r in ({"process": "?"}, {"process": {"host": "nodeA"}}, {"process": {"host": "nodeB"}})
    ]
    written = write_nccl_exports(tmp_path, points, results)
    out = tmp_path / "nccl-tests"
    assert written == [out / "all_to_all_over_X_4_bfloat16.json", out / "all_reduce_over_X_2_int8.json"]
    assert sorted(p.name for p in out.iterdir()) == [
        "all_reduce_over_X_2_int8.json",
        "all_reduce_over_X_2_int8.txt",
        "all_to_all_over_X_4_bfloat16.json",
        "all_to_all_over_X_4_bfloat16.txt",
    ]
    doc = json.loads(written[0].read_text())
    assert doc["args"] == ["shardlab:alltoall_perf", "python", "-m", "runner", "+sweep=a2a"]
    assert (doc["start_time"], doc["config"]["devices"][0]["hostname"]) == ("S0", "nodeA")
    assert [r["size"] for r in doc["results"]] == [512, 1024, 2048]
    assert written[0].with_suffix(".txt").read_text() == A2A_TEXT + "\n"
    assert json.loads(written[1].read_text())["results"][0]["count"] == 3


@pytest.mark.parametrize("sweep_json", [None, "[1]", "{"])
def test_without_a_readable_sweep_json_there_is_no_command_and_the_host_is_localhost(tmp_path, sweep_json):
    if sweep_json is not None:
        (tmp_path / "sweep.json").write_text(sweep_json)
    results = [
        Result.from_json({"started_at": "S2", "process": {"host": None}}),
        Result.from_json({"started_at": "S1"}),
    ]
    (path,) = write_nccl_exports(tmp_path, _ar(), results)
    doc = json.loads(path.read_text())
    assert (doc["args"], doc["start_time"]) == (["shardlab:all_reduce_perf"], "S1")
    assert doc["config"]["devices"][0]["hostname"] == "localhost"


def test_nothing_is_written_without_a_timed_point(tmp_path):
    assert write_nccl_exports(tmp_path, _ar().iloc[:0]) == []
    assert write_nccl_exports(tmp_path, _ar().assign(time_s=[NAN])) == []
    assert not (tmp_path / "nccl-tests").exists()
    (path,) = write_nccl_exports(tmp_path, _ar())  # no results, no sweep.json
    assert json.loads(path.read_text())["config"]["devices"][0]["hostname"] == "localhost"


def test_a_familys_file_name():
    assert family_slug("all_gather X float32") == "all_gather_X_float32"
    assert family_slug("all_gather over X") == "all_gather_over_X"
    assert family_slug(" /grads (x.y-z)/ ") == "grads_x.y-z"
    assert family_slug("///") == "family"
    assert family_slug(12) == "12"


def test_a_time_from_10_to_the_5_us_is_printed_without_decimals_and_a_type_without_a_name_passes():
    # int16 has no nccl-tests type name: shardlab's is written; 0.1 s is 100000 us exactly
    g = _ar().assign(dtype=["int16"], V_bytes=[8.0], time_s=[0.1], device_kind=["TFRT_CPU_0"])
    g = pd.concat([g, g.assign(V_bytes=[16.0], time_s=[0.10000025])], ignore_index=True)
    doc = nccl_json(g, None, None)
    assert [r["type"] for r in doc["results"]] == ["int16", "int16"]
    assert doc["config"]["devices"][0]["device_info"] == "TFRT_CPU_0"  # the kind, before the hardware's name
    rows = [ln.split() for ln in nccl_text(doc, g).splitlines() if ln.split()[0].isdigit()]
    assert [r[:6] for r in rows] == [
        ["8", "4", "int16", "sum", "-1", "100000"],
        ["16", "8", "int16", "sum", "-1", "100000"],
    ]


def test_a_missing_time_and_a_bandwidth_that_is_no_number_are_left_out():
    g = pd.concat([_ar(), _ar().assign(V_bytes=[6.0], time_s=[NAN], busbw_Bps=["?"])], ignore_index=True)
    doc = nccl_json(g, None, None)
    assert [r["out_of_place"]["time"] for r in doc["results"]] == [pytest.approx(2.5, rel=1e-12), None]
    assert [r["out_of_place"]["bus_bw"] for r in doc["results"]] == [pytest.approx(1.2e-3, rel=1e-12), None]
    assert doc["average_bus_bandwidth"] == pytest.approx(1.2e-3, rel=1e-12)  # the one number there is


def test_a_second_export_rewrites_the_files_and_a_frame_without_columns_writes_none(tmp_path):
    assert write_nccl_exports(tmp_path, pd.DataFrame()) == []
    first = write_nccl_exports(tmp_path, _a2a())
    text = first[0].with_suffix(".txt").read_text()
    assert write_nccl_exports(tmp_path, _a2a()) == first  # a report written again
    assert first[0].with_suffix(".txt").read_text() == text
