"""``python -m analysis import nccl-tests``: published nccl-tests output (tests/data/published,
sources in SOURCES.md) read into sweep folders that load_sweep and report take unchanged.

nccl-tests' text and ``-J`` JSON readers (analysis.importers.nccl_tests, .nccl_tests_json) by
exact expectations (issue 30, round two's mutation check): tables written by hand in the layout
nccl-tests prints (src/common.cu; runs of spaces shortened, as the reader splits on whitespace),
with ranks printed out of order, two device kinds, in-place columns first, older versions'
``error`` column, log lines between rows, two runs in one file, every way the collective is
named, and every error with its file and line.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from analysis import load_sweep
from analysis.cli import main as analysis_main
from analysis.importers import ImportFormatError
from analysis.importers.nccl_tests import parse_nccl_tests
from analysis.importers.nccl_tests_json import parse_nccl_tests_json
from analysis.importers.nccl_tests_rows import Measured, run_points

DATA = Path(__file__).resolve().parents[2] / "data" / "published"
A3_MEGA = DATA / "gcp_a3_mega_2node_all_reduce_perf.txt"


def run_cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = analysis_main(["import", *map(str, argv)])
    return rc, out.getvalue(), err.getvalue()


def printed_rows(path: Path) -> list[list[str]]:
    """The table's rows as printed, split by hand (independent of the importer's parser)."""
    return [ln.split() for ln in path.read_text().splitlines() if ln.strip() and ln.split()[0].isdigit()]


def test_a_two_node_all_reduce_reads_with_its_ranks_nodes_and_device():
    (run,) = parse_nccl_tests(A3_MEGA.read_text(), A3_MEGA)
    assert (run.op, run.op_from, run.ranks, run.nodes, run.dtype) == ("all_reduce", "binary name", 16, 2, "float32")
    assert run.hosts == ["ztan-mig-235z", "ztan-mig-gq73"]
    assert run.device_kinds == ["NVIDIA H100 80GB HBM3"]
    assert len(run.rows) == 31 and run.rows[0].S_bytes == 8 and run.rows[-1].S_bytes == 8 << 30
    last = run.rows[-1]
    # 8589934592 float sum -1 47535 180.71 338.82 0 | 47743 179.92 337.35 0
    assert last.out_of_place.time_s == pytest.approx(47535e-6)
    assert last.out_of_place.busbw_Bps == pytest.approx(338.82e9)
    assert last.in_place.time_s == pytest.approx(47743e-6) and last.in_place.wrong == 0
    assert last.line == 62


def test_imported_sweep_has_the_files_busbw_at_every_size(tmp_path):
    rc, out, err = run_cli("nccl-tests", A3_MEGA, "--out", tmp_path / "a3")
    assert rc == 0, err
    assert "31 points of 1 run(s)" in out
    s = load_sweep(tmp_path / "a3")
    pts = s.points.sort_values("V_bytes").reset_index(drop=True)
    rows = printed_rows(A3_MEGA)
    assert len(pts) == len(rows) == 31
    assert set(pts["hardware"]) == {"h100"} and set(pts["group_size"]) == {16}
    # another tool's averages bring no interval: not "noisy", and no HLO is expected of them
    assert not pts["noisy"].any()
    for col in ("caveats", "flags"):
        assert not pts[col].fillna("").str.contains("HLO").any(), pts[col].tolist()
    for (_, p), row in zip(pts.iterrows(), rows):
        size, time_us, busbw = int(row[0]), float(row[5]), float(row[7])
        assert p["V_bytes"] == size  # AllReduce: nccl-tests' size is the book's V
        assert p["time_s"] == pytest.approx(time_us * 1e-6)
        # printed to 2 decimals from a time printed to 4-5 digits
        assert abs(p["busbw_Bps"] / 1e9 - busbw) <= 0.006 + 5e-4 * busbw, (size, p["busbw_Bps"], busbw)
    result = json.loads(next((tmp_path / "a3").glob("030_*/result.json")).read_text())
    assert result["spec"]["nodes"] == 2 and result["timing"]["estimator"] == "imported"
    assert result["imported"]["line"] == 62 and result["imported"]["file"].endswith(A3_MEGA.name)
    assert result["imported"]["in_place"]["busbw_Bps"] == pytest.approx(337.35e9)
    # the report reads it unchanged: fits and the model side by side
    assert len(s.fits) == 1 and s.fits.iloc[0]["bandwidth_regime"]
    assert pts["model_time_s"].notna().all()
    # measured / roofline and measured / expected side by side: at 8 GiB over 2 x 8 H100, NCCL's model
    # (analysis.book.nccl_cost) takes nvls_tree/Simple: latency 25 + 2 x (14 + 2 x 13.6) us, per channel
    # min(48 x 0.85 x 7/8 x 2, 2 x 48, 57.7) = 57.7 GB/s x 8 channels x 16/30
    last = pts.iloc[-1]
    assert last["expected_time_s"] == pytest.approx(107.4e-6 + (8 << 30) / (57.7e9 * 8 * 16 / 30))
    assert last["measured_over_expected"] == pytest.approx(47535e-6 / last["expected_time_s"])


# A hand-made alltoall table in nccl-tests' layout (8 ranks, one host), to check S -> V.
ALLTOALL = """# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20
#
# Using devices
{ranks}
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576         32768     float    none      -1   100.00   10.49    9.18      0   100.00   10.49    9.18    N/A
     2097152         65536     float    none      -1   200.00   10.49    9.18      3   200.00   10.49    9.18    N/A
# Out of bounds values : 3 FAILED
# Avg bus bandwidth    : 9.18
"""
RANKS = "\n".join(
    f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on nodeA device {r:2d} [0x{r:02x}] NVIDIA H100 80GB HBM3"
    for r in range(8)
)


def test_alltoall_named_by_its_file_has_V_n_times_the_size_and_wrong_rows_fail(tmp_path):
    f = tmp_path / "alltoall_perf.log"
    f.write_text(ALLTOALL.format(ranks=RANKS))
    (run,) = parse_nccl_tests(f.read_text(), f)
    assert (run.op, run.op_from, run.ranks, run.nodes) == ("all_to_all", "file name", 8, 1)
    assert run.rows[0].in_place.wrong is None  # N/A: not checked
    assert run_cli("nccl-tests", f, "--out", tmp_path / "s")[0] == 0
    results = sorted((tmp_path / "s").glob("*/result.json"))
    first, second = (json.loads(p.read_text()) for p in results)
    assert first["spec"]["V_bytes"] == 8 * 1048576  # V = S * n for AllToAll
    assert first["status"] == "ok" and second["status"] == "failed"
    assert second["error"] == "nccl-tests counted 3 wrong elements at this size"


def test_a_reduction_table_without_a_name_is_told_by_its_columns(tmp_path):
    text = ALLTOALL.format(ranks=RANKS).replace("none", " sum").replace("9.18", "18.36")
    (run,) = parse_nccl_tests(text, tmp_path / "run1.txt")
    assert (run.op, run.op_from) == ("all_reduce", "columns (busbw / algbw and the reduction)")  # 2 * 7/8
    with pytest.raises(ImportFormatError, match="cannot tell which collective"):
        parse_nccl_tests(ALLTOALL.format(ranks=RANKS), tmp_path / "run1.txt")  # no reduction: AG or A2A?


def test_a_table_cut_short_is_one_error_line_naming_file_and_line_and_writes_nothing(tmp_path):
    lines = A3_MEGA.read_text().splitlines()
    cut = tmp_path / "all_reduce_cut.txt"
    cut.write_text("\n".join(lines[:40]) + "\n" + lines[40][:44] + "\n")
    rc, out, err = run_cli("nccl-tests", A3_MEGA, cut, "--out", tmp_path / "never")
    assert rc == 2 and out == ""
    row = lines[40][:44].strip()  # '4096          1024     float     sum'
    assert err == f"error: {cut}:41: a table row with 4 fields where the header has 13: {row!r} (cut short?)\n"
    assert not (tmp_path / "never").exists() and not list(tmp_path.glob(".never*"))
    whole_rows_only = tmp_path / "all_reduce_stops.txt"
    whole_rows_only.write_text("\n".join(lines[:40]) + "\n")
    rc, _, err = run_cli("nccl-tests", whole_rows_only, "--out", tmp_path / "never")
    assert rc == 2 and err.startswith(f"error: {whole_rows_only}:40: the table stops here")


def test_a_file_that_is_not_nccl_tests_output_is_refused(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello\nworld\n")
    rc, _, err = run_cli("nccl-tests", f, "--out", tmp_path / "o")
    assert (
        rc == 2
        and err == f"error: {f}: no nccl-tests / rccl-tests results table (a '# size count type ...' header and rows)\n"
    )
    rc, _, err = run_cli("nccl-bench", f, "--out", tmp_path / "o")
    assert rc == 2 and err == "error: import 'nccl-bench': the tool is one of nccl-tests, accelerator-microbenchmarks\n"


def test_calibrate_on_an_imported_two_node_run_fits_the_network_level_apart(tmp_path):
    import yaml

    from analysis.book.hardware import load_hardware
    from analysis.calibrate import across_calibration, split_levels

    assert run_cli("nccl-tests", A3_MEGA, "--out", tmp_path / "a3")[0] == 0
    out = tmp_path / "a3_mine.yaml"
    buf, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        rc = analysis_main(["calibrate", str(tmp_path / "a3"), "--name", "a3_mine", "--out", str(out)])
    assert rc == 0, err.getvalue()
    s = load_sweep(tmp_path / "a3")
    h100 = load_hardware("h100")
    inside, crossing = split_levels(s.points, h100)
    assert len(inside) == 0 and len(crossing) == 31  # 16 ranks over 2 nodes of 8: every point crosses
    across = across_calibration(crossing, h100)
    written = yaml.safe_load(out.read_text())
    hw = load_hardware(str(out))
    # inside a node: no run there, so the links keep h100's published constants
    assert (hw.link_bw_unidir_Bps, hw.hop_latency_s, hw.calibrated) == (4.5e11, 1e-6, ())
    # across nodes: the scale-out constants are the fit's, not h100's 5e10 B/s and 5 us
    assert hw.scaleout_bw_unidir_Bps == pytest.approx(across["scaleout_bw_unidir_Bps"])
    assert hw.scaleout_latency_s == pytest.approx(across["scaleout_latency_s"])
    assert hw.scaleout_bw_unidir_Bps != 5e10 and hw.scaleout_latency_s != 5e-6
    assert "across domains: scaleout_bw_unidir_Bps and scaleout_latency_s fitted to 31 points" in written["source"]
    assert "across domains (all_reduce, 31 points): W_out" in buf.getvalue()


# A -J report in the layout of nccl-tests src/util.cu (commit cfa8a96): 2 processes of 4 GPUs, one
# device record per process, so 8 ranks on 2 hosts.
JSON_REPORT = {
    "version": 1,
    "start_time": "2025-06-01 10:00:00",
    "args": ["./build/all_gather_perf", "-b", "1M", "-e", "2M", "-g", "4", "-J", "out.json"],
    "env": [],
    "nccl_version": 22703,
    "config": {
        "nthreads": 1,
        "ngpus": 4,
        "minimum_bytes": 1048576,
        "maximum_bytes": 2097152,
        "step_factor": 2,
        "devices": [
            {"rank": 0, "group": 0, "pid": 11, "hostname": "nodeA", "device": 0, "device_hex": "0000:1b:00",
             "device_info": "NVIDIA H100 80GB HBM3"},
            {"rank": 4, "group": 0, "pid": 12, "hostname": "nodeB", "device": 0, "device_hex": "0000:1b:00",
             "device_info": "NVIDIA H100 80GB HBM3"},
        ],
    },
    "results": [
        {"size": 1048576, "count": 32768, "type": "float", "redop": "none", "root": "    -1",
         "out_of_place": {"time": 100.0, "alg_bw": 10.49, "bus_bw": 9.18, "nwrong": 0.0},
         "in_place": {"time": 98.0, "alg_bw": 10.70, "bus_bw": 9.36, "nwrong": 0.0},
         "actual_iterations": 20, "experiment_name": "all_gather"},
        {"size": 2097152, "count": 65536, "type": "float", "redop": "none", "root": "    -1",
         "out_of_place": {"time": 150.0, "alg_bw": 13.98, "bus_bw": 12.23, "nwrong": None},
         "in_place": None, "actual_iterations": 20, "experiment_name": "all_gather"},
    ],
    "end_time": "2025-06-01 10:00:05",
}  # fmt: skip


def test_a_json_report_reads_like_the_table(tmp_path):
    f = tmp_path / "out.json"
    f.write_text(json.dumps(JSON_REPORT, indent=1))
    rc, out, err = run_cli("nccl-tests", f, "--out", tmp_path / "j")
    assert rc == 0, err
    results = [json.loads(p.read_text()) for p in sorted((tmp_path / "j").glob("*/result.json"))]
    assert [r["spec"]["op"] for r in results] == ["all_gather", "all_gather"]
    first, second = results
    assert first["spec"]["group_size"] == 8 and first["spec"]["nodes"] == 2  # 2 processes x 4 GPUs
    assert first["spec"]["V_bytes"] == 1048576 and first["timing"]["summary"]["median_s"] == pytest.approx(100e-6)
    assert first["imported"]["in_place"]["time_s"] == pytest.approx(98e-6)
    assert second["imported"]["in_place"] is None and second["imported"]["out_of_place"]["wrong"] is None
    assert first["imported"]["library_version"] == "NCCL 22703" and first["imported"]["op_from"] == "binary name"
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(JSON_REPORT, indent=1)[:400])
    rc, _, err = run_cli("nccl-tests", cut, "--out", tmp_path / "k")
    assert rc == 2 and err.startswith(f"error: {cut}:") and "not a whole nccl-tests JSON report" in err
    assert not (tmp_path / "k").exists()


def test_the_report_reads_an_imported_sweep_unchanged(tmp_path):
    assert run_cli("nccl-tests", A3_MEGA, "--out", tmp_path / "a3", "--hardware", "gcp_a3_mega")[0] == 0
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert analysis_main(["report", str(tmp_path / "a3")]) == 0
    md = (tmp_path / "a3" / "report" / "report.md").read_text()
    assert "31 points: 31 ok, 0 failed" in md
    assert "| gcp_a3_mega | gpu | NVIDIA H100 80GB HBM3 | 16 |" in md
    # the times are the log's own, said in words (not "the imported estimator: imported")
    assert "Times are the **imported** estimator: the time the imported log reports (that tool's average" in md
    assert "Times are the imported log's own." in md and "*imported* estimator with its 95% interval" not in md
    # the nccl-tests-style table shows the file's own row back: 8 GiB in 47535 us, busbw 338.82 GB/s
    # (recomputed from S and the time: 8589934592 / 47535e-6 * 2 * 15/16 / 1e9 = 338.83)
    assert "| 8589934592 | 2147483648 | float | sum | 47535.00 | 180.71 | 338.83 |" in md
    # measured against the roofline and against NCCL's model on gcp_a3_mega, whose TCPXO profile leaves
    # NCCL ring and tree with Simple across nodes: at 8 B tree/Simple, latency 8.4 + 2 x (7 x 4.0 + 14 +
    # 2 x 30.1) = 212.8 us (30.1 us: the TCPXO all_gather fit's network latency), against 136 us: 0.64
    assert "| measured/model | out of sample | expected | measured/expected |" in md
    row = "| all_reduce | X | 8 B | 136 us |  |  |  | 0.00011 GB/s |  | 14 us | latency | 9.7 | 9.7 | 213 us | 0.64 |"
    assert row in md


RCCL = DATA / "mi355x_2node_rccl_all_reduce_and_alltoall.log"


def test_an_rccl_tests_log_with_two_runs_gives_both_collectives(tmp_path):
    runs = parse_nccl_tests(RCCL.read_text(), RCCL)
    assert [(r.tool, r.op, r.op_from, r.ranks, r.nodes) for r in runs] == [
        ("rccl-tests", "all_reduce", "binary name", 16, 2),
        ("rccl-tests", "all_to_all", "binary name", 16, 2),
    ]
    assert runs[0].library_version == "RCCL 2.27.7-HEAD:96a25b5" and runs[1].rows[4].in_place.wrong is None
    assert run_cli("nccl-tests", RCCL, "--out", tmp_path / "m")[0] == 0
    results = [json.loads(p.read_text()) for p in sorted((tmp_path / "m").glob("*/result.json"))]
    a2a = [r for r in results if r["spec"]["op"] == "all_to_all"]
    # 31 all_reduce sizes; 31 alltoall rows less the 4 of size 0 (they time an empty launch)
    assert len(results) == 31 + 27 and len(a2a) == 27
    big = max(a2a, key=lambda r: r["spec"]["size_bytes"])
    # alltoall's printed size is the per-rank buffer S = 16 GiB: the book's V = 16 ranks x S
    assert big["spec"]["size_bytes"] == 17179869184 and big["spec"]["V_bytes"] == 16 * 17179869184
    s = load_sweep(tmp_path / "m")
    busbw = s.points.set_index(["op", "S_bytes"])["busbw_Bps"]
    assert busbw["all_to_all", 17179869184] / 1e9 == pytest.approx(91.09, abs=0.01)
    assert busbw["all_reduce", 17179869184] / 1e9 == pytest.approx(385.98, abs=0.01)


def test_the_gate_averages_an_imported_run_as_nccl_tests_does(tmp_path):
    from analysis.gate import below_bar

    assert run_cli("nccl-tests", A3_MEGA, "--out", tmp_path / "a3")[0] == 0
    s = load_sweep(tmp_path / "a3")
    # the file closes with "# Avg bus bandwidth    : 70.742" (GB/s, over its 31 sizes)
    (fam,) = below_bar(s.summary, 100e9).to_dict("records")
    assert fam["points"] == 31 and fam["avg_busbw_Bps"] / 1e9 == pytest.approx(70.742, abs=0.05)
    assert below_bar(s.summary, 70e9).empty


def test_expected_time_only_where_the_entry_has_expected_factors():
    """An entry with no ``expected:`` block (cpu, a user's what-if) has nothing to expect beyond
    the roofline: its expected time is left empty, not a copy of the model's (the report's
    expected columns then do not appear)."""
    import dataclasses

    import numpy as np
    import pandas as pd

    from analysis.book.hardware import load_hardware
    from analysis.predictions import predict_points

    h100 = load_hardware("h100")
    assert h100.nccl  # the catalogue's h100 is priced by NCCL's model (its expected.nccl block)
    row = {"op": "all_reduce", "V_bytes": float(1 << 30), "axes": "X", "axis_sizes": "8", "time_s": 0.01}
    with_factors = predict_points(pd.DataFrame([row]), h100).iloc[0]
    without = predict_points(pd.DataFrame([row]), dataclasses.replace(h100, expected=(), nccl=None)).iloc[0]
    assert with_factors["model_time_s"] == pytest.approx(without["model_time_s"])
    # NCCL's NVLS price (tests/analysis/book/test_nccl_cost.py works it), not a copy of the roofline: here
    # below it, since the NVSwitch reduces and each GPU moves V, not a ring's 2(n-1)/n V, over its NVLink
    assert with_factors["expected_time_s"] == pytest.approx(25e-6 + (1 << 30) / (476e9 * 8 / 14))
    assert with_factors["expected_time_s"] < with_factors["model_time_s"]
    assert np.isnan(without["expected_time_s"]) and np.isnan(without["measured_over_expected"])


HEAD = (
    "# nThread 1 nGpus 1 minBytes 0 maxBytes 2048 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
    "validation: 1 graph: 0"
)
RANKS_TWO_HOSTS = """#
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
        RANKS_TWO_HOSTS,
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
    text = "\n".join([HEAD, RANKS_TWO_HOSTS, "#", swapped, COLS, UNITS, *rows, END])
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
    text = "\n".join([HEAD.lstrip("# "), RANKS_TWO_HOSTS, "#", cols, row, END])
    (run,) = parse_nccl_tests(text, "nccl_allreduce_v2.txt")
    (r,) = run.rows
    assert (run.op, r.S_bytes, r.out_of_place.wrong, r.in_place.wrong) == ("all_reduce", 1048576, 0, 1)
    assert r.out_of_place.busbw_Bps == pytest.approx(15.73e9, rel=1e-12) and run.header["nThread"] == "1"


ALL_GATHER_RUN = "\n".join(
    [
        HEAD,
        RANKS_TWO_HOSTS,
        "#",
        GROUPS,
        COLS,
        "  64  4  float  none  -1  9.00  0.01  0.01  0  9.00  0.01  0.01  0",
        END,
    ]
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
    bad_time = "\n".join([HEAD, RANKS_TWO_HOSTS, "#", GROUPS, COLS, row.replace("9.00", "fast", 1), END])
    assert _error(bad_time) == "all_gather.txt:11: time 'fast' is not a number"
    bad_count = "\n".join([HEAD, RANKS_TWO_HOSTS, "#", GROUPS, COLS, row.replace(" 4 ", " four ", 1), END])
    assert _error(bad_count) == "all_gather.txt:11: count 'four' is not a number"
    bad_busbw = "\n".join(
        [HEAD, RANKS_TWO_HOSTS, "#", GROUPS, COLS, row.replace("0.01  0  9.00", "x  0  9.00", 1), END]
    )
    assert _error(bad_busbw) == "all_gather.txt:11: busbw 'x' is not a number"
    # a second run starts before the first one's table was closed
    cut = "\n".join([HEAD, RANKS_TWO_HOSTS, "#", GROUPS, COLS, row, row, HEAD, RANKS_TWO_HOSTS])
    assert _error(cut) == "all_gather.txt:12: the table stops here, without its '# Avg bus bandwidth' line"
    # a table closed with no row in it is no table
    empty = "\n".join([HEAD, RANKS_TWO_HOSTS, "#", GROUPS, COLS, END])
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
