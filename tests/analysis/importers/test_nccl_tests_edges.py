"""The nccl-tests readers' edges, by exact expectations (issue 30, round two's mutation check;
the survivors of tests/analysis/importers/test_nccl_tests.py): the reduction told by its columns on both sides
of every condition, rccl-tests told by each of its marks, runs cut before their first row, a
table closed by either closing line, columns a table lacks, a bad number in either group, and
the default file names in messages. Tables are written as nccl-tests prints them (src/common.cu),
with runs of spaces shortened: the reader splits on whitespace."""

from __future__ import annotations

import json

import pytest

from analysis.importers import ImportFormatError
from analysis.importers.nccl_tests import parse_nccl_tests
from analysis.importers.nccl_tests_json import parse_nccl_tests_json
from analysis.importers.nccl_tests_rows import NcclRun, run_points

HEAD = "# nThread 1 nGpus 1 minBytes 8 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20"
GROUPS = "#  out-of-place  in-place"
COLS = "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong"
OOB, AVG = "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.0"


def ranks(n: int, kind: str = "NVIDIA H100 80GB HBM3") -> list[str]:
    return [f"#  Rank {r:2d} Group  0 Pid  {100 + r} on node1 device {r:2d} [0x{r:02x}] {kind}" for r in range(n)]


def table(*rows: str, n: int = 4, cols: str = COLS, end=(OOB, AVG), kind: str = "NVIDIA H100 80GB HBM3") -> str:
    """One run: the header (line 1), ``n`` rank lines (2 to n + 1), "#", the group and column
    lines (n + 3, n + 4), the rows from line n + 5, then ``end``."""
    return "\n".join([HEAD, *ranks(n, kind), "#", GROUPS, cols, *rows, *end])


def row(size: int, algbw: str, busbw: str, redop: str = "sum", dtype: str = "float", wrong: str = "0") -> str:
    return f"  {size}  {size // 4}  {dtype}  {redop}  -1  10.00  {algbw}  {busbw}  {wrong}  10.00  {algbw}  {busbw}  0"


def _error(text: str, path: str = "f.txt") -> str:
    with pytest.raises(ImportFormatError) as e:
        parse_nccl_tests(text, path)
    return str(e.value)


CANNOT_TELL = (
    "f.txt: cannot tell which collective this table measured (no *_perf binary name in it, none in the file "
    "name, and its columns fit several); name the file after it (all_gather.txt, alltoall.log, ...) or pass --op"
)


def test_the_reduction_is_told_by_its_last_moving_row():
    # 4 ranks: 0.6 (a small row, rounded), 1.5 (an AllReduce's 2 x 3/4), then 0.75: the last says
    # ReduceScatter; the middle row would say AllReduce
    rows = [row(1024, "0.10", "0.06"), row(2048, "0.20", "0.30"), row(4096, "100.00", "75.00")]
    (run,) = parse_nccl_tests(table(*rows), "f.txt")
    assert (run.op, run.op_from) == ("reduce_scatter", "columns (busbw / algbw and the reduction)")
    # 2 ranks, one moving row: busbw = algbw is an AllReduce's 2 x 1/2
    (run,) = parse_nccl_tests(table(row(4096, "0.40", "0.40"), n=2), "f.txt")
    assert (run.op, run.ranks) == ("all_reduce", 2)


@pytest.mark.parametrize(
    "text",
    [
        table(row(4096, "0.40", "0.00"), n=1),  # one rank: nothing moves, every factor is 0
        table(row(8, "0.00", "0.00")),  # no row that moved bytes
        table(row(4096, "100.00", "75.00", redop="-")),  # no reduction: AllGather or AllToAll?
    ],
)
def test_without_a_name_one_rank_no_moving_row_or_no_reduction_cannot_be_told(text):
    assert _error(text) == CANNOT_TELL


def test_the_starting_line_names_the_binary_before_an_echoed_command():
    echo = "$ ./build/all_reduce_perf -b 8\n# Collective test starting: all_gather_perf\n"
    text = echo + table(row(64, "0.01", "0.01"))
    (run,) = parse_nccl_tests(text, "f.txt")
    assert (run.op, run.op_from) == ("all_gather", "binary name")


@pytest.mark.parametrize(
    "prefix, kind, tool",
    [
        ("$ ./rccl-tests/build/all_gather_perf\n", "GPU", "rccl-tests"),
        ("", "AMD Radeon PRO W7900", "rccl-tests"),
        ("", "MI250X", "rccl-tests"),
        ("$ ./build/all_gather_perf\n", "GPU", "nccl-tests"),
    ],
)
def test_rccl_tests_is_told_by_any_of_its_marks(prefix, kind, tool):
    (run,) = parse_nccl_tests(prefix + table(row(64, "0.01", "0.01"), kind=kind), "all_gather.txt")
    assert run.tool == tool


def test_runs_cut_before_their_first_row_are_skipped_and_each_run_reads_only_its_own_lines():
    whole = table(row(64, "0.01", "0.01"))
    cut = "\n".join([HEAD, *ranks(4), "#", GROUPS, COLS])  # a run that died before its first size
    runs = parse_nccl_tests("\n".join([cut, whole, cut]), "all_gather.txt")
    assert [(r.op, r.rows[0].line) for r in runs] == [("all_gather", 17)]
    # the first run names nothing: its file's name, not the next run's binary
    runs = parse_nccl_tests("\n".join([whole, "$ ./build/alltoall_perf -b 64", whole]), "all_gather.txt")
    assert [(r.op, r.op_from) for r in runs] == [("all_gather", "file name"), ("all_to_all", "binary name")]


@pytest.mark.parametrize("end", [(OOB,), (AVG,)])
def test_either_closing_line_closes_a_table(end):
    (run,) = parse_nccl_tests(table(row(64, "0.01", "0.01"), end=end), "all_gather.txt")
    assert [r.S_bytes for r in run.rows] == [64]


def test_prose_after_a_table_is_never_a_table_even_with_time_in_it():
    text = table(row(64, "0.01", "0.01")) + "\n# Total time 3.5 s\ndone."
    (run,) = parse_nccl_tests(text, "all_gather.txt")
    assert len(run.rows) == 1


def test_columns_a_table_lacks_read_as_their_defaults():
    cols = "#  size  count  time  algbw  busbw  time  algbw  busbw"  # no type, redop, root or #wrong
    (run,) = parse_nccl_tests(table("  64  16  5.00  0.01  0.01  6.00  0.01  0.01", cols=cols), "all_gather.txt")
    (r,) = run.rows
    assert (r.type, r.redop, run.dtype, r.out_of_place.wrong, r.in_place.wrong) == ("?", "none", "?", None, None)


def test_a_table_with_one_group_of_columns_reads_it_as_the_points_time():
    cols = "#  size  count  type  redop  root  time  algbw  busbw  #wrong"
    text = table("  4096  1024  float  sum  -1  8.00  0.51  0.77  0", cols=cols).replace(GROUPS, "#  out-of-place")
    (run,) = parse_nccl_tests(text, "all_reduce.txt")
    (r,) = run.rows
    assert (r.out_of_place.time_s, r.out_of_place.busbw_Bps, r.out_of_place.wrong, r.in_place) == (
        pytest.approx(8e-6, rel=1e-12, abs=0),
        pytest.approx(0.77e9, rel=1e-12, abs=0),
        0,
        None,
    )
    no_busbw = "#  size  count  type  redop  root  time  algbw  #wrong"
    assert _error(table("  4096  1024  float  sum  -1  8.00  0.51  0", cols=no_busbw)) == (
        "f.txt:9: the table's header has no 'busbw' column (its measurement columns: 'time algbw #wrong')"
    )


def test_a_bad_number_in_either_group_and_a_long_row_cut_short_name_file_and_line():
    assert _error(table(row(64, "x", "0.01"))) == "f.txt:9: algbw 'x' is not a number"
    assert _error(table(row(64, "0.01", "0.01", wrong="many"))) == "f.txt:9: #wrong 'many' is not a number"
    in_place_bad = "  64  16  float  sum  -1  10.00  0.01  0.01  0  soon  0.01  0.01  0"
    assert _error(table(in_place_bad)) == "f.txt:9: time 'soon' is not a number"
    long = "     1048576        262144     float     sum      -1   100.00   10.49   15.73      0    98.00   10.70"
    why = f"a table row with 11 fields where the header has 13: {long.strip()[:60]!r} (cut short?)"
    assert _error(table(long)) == f"f.txt:9: {why}"
    stops = "f.txt:9: the table stops here, without its '# Avg bus bandwidth' line (cut short?)"
    assert _error(table(row(64, "0.01", "0.01"), end=())) == stops


def test_run_points_count_runs_from_zero_keep_a_one_byte_size_and_name_a_missing_kind():
    (run,) = parse_nccl_tests(table(row(1, "0.01", "0.02", dtype="int8"), n=2), "all_reduce.txt")
    (p,) = run_points(run)
    assert (p.S_bytes, p.V_bytes, p.dtype, p.origin["run"]) == (1, 1.0, "int8", 0)
    bare = NcclRun("f", "nccl-tests", "all_reduce", "--op", 2, ["h"], [], rows=run.rows)
    assert run_points(bare)[0].device_kind == "unknown"


def test_messages_without_a_path_name_the_text_or_the_json():
    assert _error("hello", path="<text>").startswith("<text>: no nccl-tests")
    with pytest.raises(ImportFormatError, match=r"^<text>: no nccl-tests"):
        parse_nccl_tests("hello")
    with pytest.raises(ImportFormatError, match=r"^<json>: a JSON file without"):
        parse_nccl_tests_json("[]")


def test_a_json_report_without_a_name_is_told_by_its_columns_and_takes_op_with_dashes():
    doc = {
        "args": [],
        "config": {"nthreads": 1, "ngpus": 4, "devices": [{"hostname": "h", "device_info": "k"}]},
        "results": [
            {"size": 4096, "type": "float", "redop": "sum",
             "out_of_place": {"time": 10.0, "alg_bw": 100.0, "bus_bw": 150.0, "nwrong": 0}},
        ],
    }  # fmt: skip
    # 4 ranks (1 process x 1 thread x 4 GPUs): busbw / algbw = 1.5 = 2 x 3/4, an AllReduce
    (run,) = parse_nccl_tests_json(json.dumps(doc), "r.json")
    assert (run.op, run.op_from, run.ranks) == ("all_reduce", "columns (busbw / algbw and the reduction)", 4)
    assert run.rows[0].out_of_place.busbw_Bps == pytest.approx(150e9, rel=1e-12)
    (run,) = parse_nccl_tests_json(json.dumps(doc), "r.json", op="all-to-all")
    assert (run.op, run.op_from) == ("all_to_all", "--op")
