"""A sweep's nccl-tests files (analysis.report.nccl_export) by exact expectations (issue 30,
round two's mutation check): an AllToAll family given out of order, with an unchecked point, a
point without a bandwidth and a time past 10^5 us, and an AllReduce family without S, written
as nccl-tests' ``-J`` JSON and its printed table, worked out by hand field by field; the files
of several families, the host, command and start they name, and when nothing is written."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from analysis.report.nccl_export import family_slug, nccl_json, nccl_text, write_nccl_exports

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
    results = [{"process": "?"}, {"process": {"host": "nodeA"}}, {"process": {"host": "nodeB"}}]
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
    results = [{"started_at": "S2", "process": {"host": None}}, {"started_at": "S1"}]
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
