"""nccl-tests' text and ``-J`` JSON readers (analysis.importers.nccl_tests, .nccl_tests_json) by
exact expectations (issue 30, round two's mutation check): tables written by hand in the layout
nccl-tests prints (src/common.cu; runs of spaces shortened, as the reader splits on whitespace),
with ranks printed out of order, two device kinds, in-place columns first, older versions'
``error`` column, log lines between rows, two runs in one file, every way the collective is
named, and every error with its file and line."""

from __future__ import annotations

import json

import pytest

from analysis.importers import ImportFormatError
from analysis.importers.nccl_tests import Measured, parse_nccl_tests, run_points
from analysis.importers.nccl_tests_json import parse_nccl_tests_json

HEAD = (
    "# nThread 1 nGpus 1 minBytes 0 maxBytes 2048 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
    "validation: 1 graph: 0"
)
RANKS = """#
# Using devices
#  Rank  2 Group  0 Pid   1002 on      hostB device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  0 Group  0 Pid   1000 on      hostA device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1001 on      hostA device  1 [0x2c] NVIDIA H100 80GB HBM3
#  Rank  3 Pid   1003 on      hostB device  1 [0x2c] NVIDIA H200"""
GROUPS = "#  out-of-place  in-place"
COLS = "#  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong"
UNITS = "#  (B)  (elements)  (us)  (GB/s)  (GB/s)  (us)  (GB/s)  (GB/s)"
END = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 75.00"
# a reduction without a name: its last row's busbw / algbw = 0.75 = (n-1)/n at n = 4, a
# ReduceScatter; the first moving row (0.6, rounded) would say neither
TABLE = "\n".join(
    [
        HEAD,
        RANKS,
        "# NCCL version 2.21.5+cuda12.4",
        "#",
        GROUPS,
        COLS,
        UNITS,
        "  0  0  half  sum  -1  5.00  0.00  0.00  0  5.10  0.00  0.00  0",
        "  1024  128  half  sum  -1  10.00  0.10  0.06  0  12.50  0.08  0.06  N/A",
        "hostA:1000:1000 [0] NCCL INFO Channel 00/02 : 0 1 2 3",
        "  1048576  131072  half  sum  -1  10.00  100.00  75.00  2  20.00  50.00  37.50  -",
        END,
    ]
)  # line 1: the header; 2-7: ranks; 8: the version; 13, 14, 16: the rows; 17-18: the end


def test_a_table_reads_every_field_with_ranks_in_rank_order_and_the_collective_from_its_columns(tmp_path):
    (run,) = parse_nccl_tests(TABLE, tmp_path / "run.txt")
    assert (run.tool, run.op, run.op_from) == (
        "nccl-tests",
        "reduce_scatter",
        "columns (busbw / algbw and the reduction)",
    )
    assert (run.ranks, run.nodes, run.hosts) == (4, 2, ["hostA", "hostB"])
    assert run.device_kinds == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    assert (
        run.library_version == "NCCL 2.21.5+cuda12.4"
        and run.dtype == "float16"
        and run.path == str(tmp_path / "run.txt")
    )
    assert run.header == {
        "nThread": "1",
        "nGpus": "1",
        "minBytes": "0",
        "maxBytes": "2048",
        "step": "2(factor)",
        "warmup iters": "5",
        "iters": "20",
        "agg iters": "1",
        "validation": "1",
        "graph": "0",
    }
    assert [(r.line, r.S_bytes, r.count, r.type, r.redop) for r in run.rows] == [
        (13, 0, 0, "half", "sum"),
        (14, 1024, 128, "half", "sum"),
        (16, 1048576, 131072, "half", "sum"),
    ]
    last = run.rows[-1]
    assert last.out_of_place == Measured(
        pytest.approx(10e-6, rel=1e-12), pytest.approx(100e9, rel=1e-12), pytest.approx(75e9, rel=1e-12), 2
    )
    assert last.in_place == Measured(
        pytest.approx(20e-6, rel=1e-12), pytest.approx(50e9, rel=1e-12), pytest.approx(37.5e9, rel=1e-12), None
    )
    assert run.rows[1].in_place.wrong is None and run.rows[0].in_place.wrong == 0


def test_run_points_skip_the_empty_launch_and_keep_both_measurements():
    (run,) = parse_nccl_tests(TABLE, "run.txt")
    points = run_points(run, index=3)
    assert [(p.S_bytes, p.V_bytes, p.time_s, p.wrong) for p in points] == [
        (1024, 1024.0, pytest.approx(10e-6, rel=1e-12), 0),
        (1048576, 1048576.0, pytest.approx(10e-6, rel=1e-12), 2),
    ]
    p = points[1]
    assert (p.op, p.dtype, p.ranks, p.nodes, p.hosts) == ("reduce_scatter", "float16", 4, 2, ["hostA", "hostB"])
    assert (p.device_kind, p.backend, p.tool) == ("NVIDIA H100 80GB HBM3", "gpu", "nccl-tests")
    o = p.origin
    assert (o["file"], o["run"], o["line"], o["op_from"]) == ("run.txt", 3, 16, run.op_from)
    assert (o["library_version"], o["header"], o["type"], o["redop"]) == (
        "NCCL 2.21.5+cuda12.4",
        run.header,
        "half",
        "sum",
    )
    assert o["out_of_place"] == pytest.approx(
        {"time_s": 10e-6, "algbw_Bps": 100e9, "busbw_Bps": 75e9, "wrong": 2}, rel=1e-12
    )
    # "wrong" apart: pytest >= 9.2 refuses None inside approx with a relative tolerance
    assert {k: v for k, v in o["in_place"].items() if k != "wrong"} == pytest.approx(
        {"time_s": 20e-6, "algbw_Bps": 50e9, "busbw_Bps": 37.5e9}, rel=1e-12
    )
    assert o["in_place"]["wrong"] is None
    assert o["size_convention"] == (
        "nccl-tests' size is S (the bytes algbw divides): V for all_gather, reduce_scatter and all_reduce, "
        "V / ranks for alltoall"
    )
    assert o["bandwidth_definition"] == "algbw = S / time; busbw = algbw * factor(ranks), nccl-tests' *GetBw"
    # alltoall: the printed size is the per-rank buffer, V = 4 ranks x S
    (a2a,) = parse_nccl_tests(TABLE, "run.txt", op="all-to-all")
    assert [p.V_bytes for p in run_points(a2a)] == [4096.0, 4194304.0] and a2a.op_from == "--op"


def test_in_place_columns_printed_first_and_a_row_with_one_group_only(tmp_path):
    swapped = "#  in-place  out-of-place"
    rows = [
        "  1024  256  float  sum  -1  30.00  0.03  0.05  0  40.00  0.03  0.04  1",
        "  2048  512  float  sum  -1  50.00  0.04  0.07  0",
    ]
    text = "\n".join([HEAD, RANKS, "#", swapped, COLS, UNITS, *rows, END])
    (run,) = parse_nccl_tests(text, tmp_path / "all_reduce.log")
    assert (run.op, run.op_from, run.library_version) == ("all_reduce", "file name", None)
    first, second = run.rows
    assert (first.out_of_place.time_s, first.out_of_place.wrong) == (pytest.approx(40e-6, rel=1e-12), 1)
    assert (first.in_place.time_s, first.in_place.wrong) == (pytest.approx(30e-6, rel=1e-12), 0)
    # only the first group printed: it is the point's time, whatever the group line says
    assert second.out_of_place.time_s == pytest.approx(50e-6, rel=1e-12) and second.in_place is None


def test_an_older_version_without_root_and_with_an_error_column():
    cols = "#  size  count  type  redop  time  algbw  busbw  error  time  algbw  busbw  error"
    row = "  1048576  262144  float  sum  100.00  10.49  15.73  0e+00  98.00  10.70  16.05  1e+00"
    text = "\n".join([HEAD.lstrip("# "), RANKS, "#", cols, row, END])
    (run,) = parse_nccl_tests(text, "nccl_allreduce_v2.txt")
    (r,) = run.rows
    assert (run.op, r.S_bytes, r.out_of_place.wrong, r.in_place.wrong) == ("all_reduce", 1048576, 0, 1)
    assert r.out_of_place.busbw_Bps == pytest.approx(15.73e9, rel=1e-12) and run.header["nThread"] == "1"


ALL_GATHER_RUN = "\n".join(
    [HEAD, RANKS, "#", GROUPS, COLS, "  64  4  float  none  -1  9.00  0.01  0.01  0  9.00  0.01  0.01  0", END]
)


def test_two_runs_in_one_file_each_named_by_its_own_binary(tmp_path):
    text = "\n".join(
        [
            "$ mpirun -np 4 ./build/all_reduce_perf -b 64 -e 64",
            ALL_GATHER_RUN,
            "# Collective test concluded: all_reduce_perf",
            "$ mpirun -np 4 ./build/alltoall_perf -b 64 -e 64",
            ALL_GATHER_RUN,
        ]
    )
    runs = parse_nccl_tests(text, tmp_path / "reduce_scatter.txt")  # the file's name is never read
    assert [(r.op, r.op_from, r.rows[0].line) for r in runs] == [
        ("all_reduce", "binary name", 12),
        ("all_to_all", "binary name", 27),
    ]
    assert [p.origin["run"] for i, r in enumerate(runs) for p in run_points(r, i)] == [0, 1]
    # nccl-tests >= 2.14 names the binary at the start, before any echoed command
    started = "# Collective test starting: all_gather_perf\n" + text
    assert parse_nccl_tests(started, "x.txt")[0].op == "all_gather"


@pytest.mark.parametrize(
    "name, op",
    [
        ("AllGather_8gpu.log", "all_gather"),
        ("nccl_allreduce.txt", "all_reduce"),
        ("ReduceScatter.out", "reduce_scatter"),
        ("all_to_all.txt", "all_to_all"),
        ("AllToAll-2node.txt", "all_to_all"),
    ],
)
def test_the_file_name_names_the_collective_in_any_spelling(name, op):
    (run,) = parse_nccl_tests(ALL_GATHER_RUN, name)
    assert (run.op, run.op_from) == (op, "file name")


def test_a_test_shardlab_does_not_model_and_an_unknown_op_are_refused():
    text = "./build/broadcast_perf -b 8\n" + ALL_GATHER_RUN
    with pytest.raises(ImportFormatError) as e:
        parse_nccl_tests(text, "b.txt")
    assert (
        str(e.value)
        == "b.txt:11: broadcast_perf: shardlab models all_gather, reduce_scatter, all_reduce and alltoall only"
    )
    assert (e.value.path, e.value.line) == ("b.txt", 11)
    with pytest.raises(ImportFormatError) as e:
        parse_nccl_tests(ALL_GATHER_RUN, "b.txt", op="bogus")
    assert str(e.value) == "b.txt: --op='bogus': one of all_reduce, all_gather, reduce_scatter, alltoall"
    assert (e.value.path, e.value.line) == ("b.txt", None)


def _error(text: str, path: str = "all_gather.txt") -> str:
    with pytest.raises(ImportFormatError) as e:
        parse_nccl_tests(text, path)
    return str(e.value)


def test_each_malformed_table_is_one_error_naming_file_and_line():
    row = "  64  4  float  none  -1  9.00  0.01  0.01  0  9.00  0.01  0.01  0"
    no_ranks = "\n".join([HEAD, "#", GROUPS, COLS, row, END])
    assert _error(no_ranks) == "all_gather.txt:4: no '# Rank ... on HOST device ...' lines before the table"
    bad_time = "\n".join([HEAD, RANKS, "#", GROUPS, COLS, row.replace("9.00", "fast", 1), END])
    assert _error(bad_time) == "all_gather.txt:11: time 'fast' is not a number"
    bad_count = "\n".join([HEAD, RANKS, "#", GROUPS, COLS, row.replace(" 4 ", " four ", 1), END])
    assert _error(bad_count) == "all_gather.txt:11: count 'four' is not a number"
    bad_busbw = "\n".join([HEAD, RANKS, "#", GROUPS, COLS, row.replace("0.01  0  9.00", "x  0  9.00", 1), END])
    assert _error(bad_busbw) == "all_gather.txt:11: busbw 'x' is not a number"
    # a second run starts before the first one's table was closed
    cut = "\n".join([HEAD, RANKS, "#", GROUPS, COLS, row, row, HEAD, RANKS])
    assert _error(cut) == "all_gather.txt:12: the table stops here, without its '# Avg bus bandwidth' line"
    # a table closed with no row in it is no table
    empty = "\n".join([HEAD, RANKS, "#", GROUPS, COLS, END])
    assert _error(empty) == (
        "all_gather.txt: no nccl-tests / rccl-tests results table (a '# size count type ...' header and rows)"
    )


def test_an_rccl_log_is_told_by_its_device_and_version():
    amd = ALL_GATHER_RUN.replace("NVIDIA H200", "AMD Instinct MI300X").replace("NVIDIA H100 80GB HBM3", "MI300X")
    (run,) = parse_nccl_tests("RCCL version : 2.20.5\n" + amd, "all_gather.txt")
    assert (run.tool, run.library_version, run.device_kinds) == (
        "rccl-tests",
        "RCCL 2.20.5",
        ["MI300X", "AMD Instinct MI300X"],
    )


# -J reports (src/util.cu): 2 processes of 2 threads x 2 GPUs, so 8 ranks on 2 hosts
def _report(**over) -> dict:
    doc = {
        "version": 1,
        "args": ["./build/reduce_scatter_perf", "-b", "1K"],
        "nccl_version": 22703,
        "config": {
            "nthreads": 2,
            "ngpus": 2,
            "devices": [
                {"rank": 0, "hostname": "nodeA", "device_info": "NVIDIA H100 80GB HBM3"},
                {"rank": 4, "hostname": "nodeB", "device_info": "NVIDIA H200"},
                {"rank": 4, "hostname": "nodeB", "device_info": "NVIDIA H200"},
                "not a record",
            ],
        },
        "results": [
            {"size": 1024, "count": 32, "type": "float", "redop": "sum",
             "out_of_place": {"time": 8.0, "alg_bw": 0.128, "bus_bw": 0.112, "nwrong": "3"},
             "in_place": {"cpu_time": 16.0, "alg_bw": 0.064, "bus_bw": 0.056}},
            {"size": 2048, "type": "float",
             "out_of_place": None, "in_place": {"time": 32.0, "alg_bw": 0.064, "bus_bw": 0.056, "nwrong": 0}},
        ],
    }  # fmt: skip
    doc.update(over)
    return doc


def test_a_json_report_reads_every_field():
    (run,) = parse_nccl_tests_json(json.dumps(_report()), "r.json")
    # 3 device records (the string is no record) x 2 threads x 2 GPUs
    assert (run.path, run.tool, run.op, run.op_from, run.ranks) == (
        "r.json",
        "nccl-tests",
        "reduce_scatter",
        "binary name",
        12,
    )
    assert (run.hosts, run.device_kinds) == (["nodeA", "nodeB"], ["NVIDIA H100 80GB HBM3", "NVIDIA H200"])
    assert run.library_version == "NCCL 22703" and run.header == {**_report()["config"], "devices": 3}
    first, second = run.rows
    assert (first.line, first.S_bytes, first.count, first.type, first.redop) == (0, 1024, 32, "float", "sum")
    assert first.out_of_place == Measured(
        pytest.approx(8e-6, rel=1e-12), pytest.approx(0.128e9, rel=1e-12), pytest.approx(0.112e9, rel=1e-12), 3
    )
    assert first.in_place == Measured(
        pytest.approx(16e-6, rel=1e-12), pytest.approx(0.064e9, rel=1e-12), pytest.approx(0.056e9, rel=1e-12), None
    )
    # only in-place measured: it is the point's time; no count or redop printed
    assert (second.line, second.count, second.redop, second.in_place.wrong) == (1, 0, "None", 0)
    assert second.out_of_place == second.in_place and second.out_of_place.time_s == pytest.approx(32e-6, rel=1e-12)


def test_a_json_report_is_named_by_its_file_or_op_and_a_bare_config_counts_one_rank_a_device():
    doc = _report(args=[], nccl_version=None, config={"devices": [{"hostname": "h", "device_info": "k"}] * 2})
    (run,) = parse_nccl_tests_json(json.dumps(doc), "AllGather.json")
    assert (run.op, run.op_from, run.ranks, run.library_version, run.hosts) == (
        "all_gather",
        "file name",
        2,
        None,
        ["h"],
    )
    (run,) = parse_nccl_tests_json(json.dumps(doc), "x.json", op="all_to_all")
    assert (run.op, run.op_from) == ("all_to_all", "--op")
    assert parse_nccl_tests_json(json.dumps(doc), "x.json", op="AllToAll")[0].op == "all_to_all"


def _json_error(doc, path: str = "r.json", op: str | None = None) -> str:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with pytest.raises(ImportFormatError) as e:
        parse_nccl_tests_json(text, path, op)
    return str(e.value)


def test_each_malformed_json_report_is_one_error_naming_the_file():
    assert _json_error('{\n  "results": [\n  ,') == "r.json:3: not a whole nccl-tests JSON report (Expecting value)"
    assert _json_error([1]) == "r.json: a JSON file without nccl-tests' 'config' and 'results'"
    assert (
        _json_error({"results": {}, "config": {}}) == "r.json: a JSON file without nccl-tests' 'config' and 'results'"
    )
    assert (
        _json_error({"results": [], "config": []}) == "r.json: a JSON file without nccl-tests' 'config' and 'results'"
    )
    assert _json_error(_report(config={"devices": ["x"]})) == "r.json: config.devices is empty: no ranks to read"
    assert _json_error(_report(results=[])) == "r.json: no results in it"
    assert _json_error(_report(results=[{"size": 8, "out_of_place": None}])) == (
        "r.json: results[0] has neither out_of_place nor in_place"
    )
    no_bw = {"size": 8, "out_of_place": {"time": 1.0, "bus_bw": 2.0, "note": "x" * 200}}
    msg = _json_error(_report(results=[no_bw]))
    assert msg == "r.json: " + f"a result without time, alg_bw and bus_bw: {no_bw['out_of_place']!r}"[:160]
    assert _json_error(_report(args=["./build/sendrecv_perf"])) == (
        "r.json: sendrecv: shardlab models all_gather, reduce_scatter, all_reduce and alltoall only"
    )
    assert _json_error(_report(), op="Broadcast") == (
        "r.json: broadcast: shardlab models all_gather, reduce_scatter, all_reduce and alltoall only"
    )
