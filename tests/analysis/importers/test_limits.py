"""``python -m analysis import`` refuses what no run of nccl-tests or accelerator-microbenchmarks
prints (issue 40), in one ``error:`` line naming the file, the line and the field, with exit 2
and no folder written: absurd rank counts (and the nccl-tests export of a large group stays a
few lines), malformed fields, times and sizes out of range, a size measured twice, more points
than a report reads. A size whose data check failed is kept as a failed point, never an ok one.
A property test (hypothesis, seeded, as tests/runner/config/test_spec_values.py does for config values)
gives every field of each importer random values: each is accepted with points in range, or
refused in one line naming that field."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st

from analysis.book.dtypes import DTYPE_BYTES
from analysis.cli import main as analysis_main
from analysis.importers import ImportFormatError
from analysis.importers.accelerator_microbenchmarks import parse_results
from analysis.importers.limits import (
    MAX_POINTS,
    MAX_RANKS,
    MAX_SIZE_BYTES,
    MAX_TIME_S,
    MIN_TIME_S,
    MAX_BANDWIDTH_Bps,
)
from analysis.importers.nccl_tests import parse_nccl_tests
from analysis.importers.nccl_tests_json import parse_nccl_tests_json
from analysis.importers.nccl_tests_rows import run_points
from analysis.importers.sweep_writer import ImportedPoint, point_overrides, point_result
from analysis.report.nccl_export import LISTED_RANKS, nccl_json, nccl_text
from analysis.runs.rundir import MAX_BYTES, RESULT_NAME, read_result, write_json_atomic

# -- the files: an all_gather table over 2 ranks (nccl-tests' layout, runs of spaces shortened),
# its -J report, and an accelerator-microbenchmarks line -----------------------------------------

HEAD = "# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20"
RANK_LINES = [
    "#  Rank  0 Group  0 Pid  100 on nodeA device  0 [0x1b] NVIDIA H100 80GB HBM3",
    "#  Rank  1 Group  0 Pid  101 on nodeA device  1 [0x2c] NVIDIA H100 80GB HBM3",
]
GROUPS = "#  out-of-place  in-place"
COLS = "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong"
# the tokens of a row, by column; the in-place group's time and #wrong have their own names
COLUMNS = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "in-place time")
COLUMNS += ("in-place algbw", "in-place busbw", "in-place #wrong")
ROW = dict(zip(COLUMNS, "1024 128 float none -1 10.00 0.10 0.05 0 10.00 0.10 0.05 0".split()))


def row(**tokens) -> str:
    """One table row: ROW with ``tokens`` (``{"#wrong": "3"}``) in place of its own."""
    return "  " + "  ".join({**ROW, **tokens}[c] for c in COLUMNS)


def table(*rows: str, out_of_bounds: str = "0 OK", ranks: list[str] = RANK_LINES) -> str:
    """One run: the header (line 1), the rank lines (2, 3), the group and column lines (4, 5),
    the rows from line 6, the closing lines."""
    end = [f"# Out of bounds values : {out_of_bounds}", "# Avg bus bandwidth    : 0.05"]
    return "\n".join([HEAD, *ranks, GROUPS, COLS, *rows, *end]) + "\n"


def result(**over) -> dict:
    """One -J result: 1 MiB of float gathered over the report's 4 ranks in 100 us."""
    m = {"time": 100.0, "alg_bw": 10.49, "bus_bw": 7.86, "nwrong": 0}
    r = {"size": 1048576, "count": 65536, "type": "float", "redop": "none", "root": "    -1"}
    return {**r, "out_of_place": dict(m), "in_place": dict(m), **over}


def report(*results: dict, **over) -> dict:
    """A -J report (nccl-tests src/util.cu): one process of 4 GPUs."""
    doc = {
        "version": 1,
        "args": ["./build/all_gather_perf", "-g", "4"],
        "nccl_version": 22703,
        "config": {"nthreads": 1, "ngpus": 4, "devices": [{"hostname": "nodeA", "device_info": "NVIDIA H100"}]},
        "results": list(results) or [result()],
        "out_of_bounds": {"count": 0, "okay": True},
    }
    return {**doc, **over}


def metrics_line(metrics: dict | None = None, **dims) -> str:
    """A psum of a 1024^2 bfloat16 matrix over 8 chips at 87.5 GB/s."""
    d = {"test_name": "psum", "matrix_dim": "1024", "dtype": "2", "ici_size": "8", **dims}
    return json.dumps({"metrics": {"ici_bandwidth_gbyte_s_p50": 87.5} if metrics is None else metrics, "dimensions": d})


# -- the command, and what a refusal looks like ------------------------------------------------


def run_cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = analysis_main(["import", *map(str, argv)])
    return rc, out.getvalue(), err.getvalue()


TOOLS = {".txt": ("nccl-tests",), ".json": ("nccl-tests",), ".jsonl": ("accelerator-microbenchmarks", "--hardware")}


def import_file(tmp_path: Path, name: str, text: str) -> tuple[Path, Path, int, str, str]:
    """Write ``text`` as ``name`` and import it into ``tmp_path/out``: (file, out, rc, stdout, stderr)."""
    f, out = tmp_path / name, tmp_path / "out"
    f.write_text(text)
    tool, *hardware = TOOLS[f.suffix]
    rc, stdout, stderr = run_cli(tool, f, "--out", out, *(hardware and [*hardware, "tpu_v6e"]))
    return f, out, rc, stdout, stderr


def refusal(tmp_path: Path, name: str, text: str) -> str:
    """The one line an import of ``text`` is refused with (after ``error: FILE``), having
    checked the exit status, that nothing else was printed and that no folder was written."""
    f, out, rc, stdout, stderr = import_file(tmp_path, name, text)
    assert (rc, stdout) == (2, ""), stderr
    assert stderr.startswith(f"error: {f}") and stderr.count("\n") == 1, stderr
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == [name]  # no temporary folder either
    return stderr[len(f"error: {f}") : -1]


def case_id(value) -> str:
    """A test's id: the file's name and the message's start, not the whole file."""
    if isinstance(value, str) and "\n" not in value and not value.startswith(("{", "[", "#")):
        return value[:48]
    return "text" if isinstance(value, str) else "statuses"


def statuses(out: Path) -> list[tuple[str, str | None]]:
    """(status, error) of each point written, in order."""
    results = [json.loads(p.read_text()) for p in sorted(out.glob(f"*/{RESULT_NAME}"))]
    return [(r["status"], r.get("error")) for r in results]


# -- 1. counts past any cluster: refused at the door; the export of a large group stays small -----

RANKS = f"at most {MAX_RANKS} ranks (over twice the largest cluster built)"


@pytest.mark.parametrize(
    "name, text, line",
    [
        (
            "r.json",
            json.dumps(report(config={"ngpus": 10**9, "devices": [{"hostname": "a", "device_info": "k"}]})),
            f": config.ngpus=1000000000: must be a whole number from 1 to {MAX_RANKS} (over twice the largest "
            "cluster built)",
        ),
        (
            # each number in range, their product not: 2 x 1024 x 1024 ranks
            "r.json",
            json.dumps(report(config={"nthreads": 1024, "ngpus": 1024, "devices": [{"hostname": "a"}] * 2})),
            f": ranks (device records x nthreads x ngpus)=2097152: must be {RANKS}",
        ),
        (
            "all_gather.txt",
            table(row(), ranks=[RANK_LINES[0], RANK_LINES[1].replace("Rank  1 ", "Rank  1000000000 ")]),
            f":3: # Rank='1000000000': must be a rank below {MAX_RANKS}: {RANKS}",
        ),
        (
            "m.jsonl",
            metrics_line(ici_size="1000000000"),
            f":1: psum: dimensions' 'ici_size' is 1000000000; it must be {RANKS}",
        ),
    ],
    ids=case_id,
)
def test_a_rank_count_past_any_cluster_is_refused_naming_its_field(tmp_path, name, text, line):
    assert refusal(tmp_path, name, text) == line


def _family(ranks: int) -> pd.DataFrame:
    """One AllReduce point over ``ranks`` devices, as the report hands it to the export."""
    return pd.DataFrame(
        {
            "family": ["all_reduce over X"],
            "op": ["all_reduce"],
            "V_bytes": [4096.0],
            "S_bytes": [4096.0],
            "group_size": [ranks],
            "dtype": ["float32"],
            "time_s": [1e-5],
            "algbw_Bps": [4.096e8],
            "busbw_Bps": [8.19e8],
            "checked": [True],
            "device_kind": ["NVIDIA H100 80GB HBM3"],
            "hardware": ["h100"],
        }
    )


def test_the_nccl_tests_export_lists_a_bounded_number_of_ranks_and_reads_back_with_all_of_them():
    # before the fix it wrote one "# Rank" line per rank: 10^9 of them took 24 GB
    g = _family(MAX_RANKS)
    text = nccl_text(nccl_json(g, "S0", None, host="nodeA"), g)
    listed = [ln for ln in text.splitlines() if ln.startswith("#  Rank")]
    assert len(listed) == LISTED_RANKS and len(text) < 20_000
    assert listed[-2].startswith(f"#  Rank {LISTED_RANKS - 2} ") and listed[-1].startswith(f"#  Rank {MAX_RANKS - 1} ")
    left_out = MAX_RANKS - LISTED_RANKS
    assert (
        f"#  ... ranks {LISTED_RANKS - 1} to {MAX_RANKS - 2} ({left_out} of them) on the same host, not listed" in text
    )
    (run,) = parse_nccl_tests(text, "export.txt")  # the last rank listed: every rank counted
    assert (run.op, run.ranks, run.hosts) == ("all_reduce", MAX_RANKS, ["nodeA"])


@pytest.mark.parametrize(
    "ranks, rank_lines, skipped", [(LISTED_RANKS, LISTED_RANKS, 0), (LISTED_RANKS + 1, LISTED_RANKS, 1)]
)
def test_the_export_lists_every_rank_up_to_its_bound(ranks, rank_lines, skipped):
    g = _family(ranks)
    text = nccl_text(nccl_json(g, "S0", None), g)
    assert sum(ln.startswith("#  Rank") for ln in text.splitlines()) == rank_lines
    assert text.count("not listed") == (1 if skipped else 0)
    assert parse_nccl_tests(text, "export.txt")[0].ranks == ranks


# -- 2. malformed fields: one line naming the field, never a traceback -------------------------

SIZE = f"a whole number of bytes from 0 to {MAX_SIZE_BYTES} (1 TiB, more than any device holds)"
BANDWIDTH = "a bandwidth above 0 and at most 1000000 GB/s (1 PB/s)"


@pytest.mark.parametrize(
    "name, text, line",
    [
        ("r.json", json.dumps(report(result(size="abc"))), f": results[0].size='abc': must be {SIZE}"),
        ("r.json", json.dumps(report(result(size=None))), f": results[0].size=None: must be {SIZE}"),
        (
            "r.json",
            json.dumps(report({k: v for k, v in result().items() if k != "size"})),
            f": results[0].size is missing: must be {SIZE}",
        ),
        (
            "r.json",
            json.dumps(report(result(count="many"))),
            f": results[0].count='many': must be a whole number of elements from 0 to {MAX_SIZE_BYTES}",
        ),
        (
            "r.json",
            json.dumps(report(result(out_of_place={"time": 1.0, "alg_bw": "fast", "bus_bw": 1.0}))),
            ": results[0].out_of_place.alg_bw 'fast' is not a number",
        ),
        (
            "r.json",
            json.dumps(report(result(out_of_place={"time": 1.0, "alg_bw": 1.0, "bus_bw": [1]}))),
            ": results[0].out_of_place.bus_bw [1] is not a number",
        ),
        (
            "r.json",
            json.dumps(report(config={"ngpus": "four", "devices": [{"hostname": "a"}]})),
            f": config.ngpus='four': must be a whole number from 1 to {MAX_RANKS} (over twice the largest cluster "
            "built)",
        ),
        ("all_gather.txt", table(row(count="four")), ":6: count 'four' is not a number"),
        ("all_gather.txt", table(row(size="1²")), f":6: size='1²': must be {SIZE}"),
        (
            "m.jsonl",
            metrics_line({"ici_bandwidth_gbyte_s_p50": "fast"}),
            f":1: psum: metrics.ici_bandwidth_gbyte_s_p50='fast': must be {BANDWIDTH}",
        ),
        (
            "m.jsonl",
            metrics_line({"ici_bandwidth_gbyte_s_p50": 0}),
            f":1: psum: metrics.ici_bandwidth_gbyte_s_p50=0: must be {BANDWIDTH}",
        ),
        (
            "m.jsonl",
            metrics_line({"ici_bandwidth_gbyte_s_p50": [87.5]}),
            f":1: psum: metrics.ici_bandwidth_gbyte_s_p50=[87.5]: must be {BANDWIDTH}",
        ),
        (
            "m.jsonl",
            metrics_line({"ici_time_ms_p50": "soon"}),
            ":1: psum: metrics.ici_time_ms_p50='soon': must be a time from 1e-06 ms to a week (604800000 ms)",
        ),
        (
            "m.jsonl",
            metrics_line(matrix_dim=None),
            ":1: psum: dimensions' 'matrix_dim' is missing; it must be a whole number like 8192, or a shape like "
            "8192x8x128",
        ),
        ("m.jsonl", "[" * 100_000, ":1: not a metrics_report.jsonl line (nested too deeply)"),
    ],
    ids=case_id,
)
def test_a_malformed_field_is_one_line_naming_it(tmp_path, name, text, line):
    assert refusal(tmp_path, name, text) == line


# -- 3. values no run prints are refused; a failed data check is a failed point -----------------

TIME = f"a time from 0.001 us to a week ({MAX_TIME_S * 1e6:.0f} us)"


@pytest.mark.parametrize("value", ["nan", "inf", "-5.00", "0.00", "1e300"])
def test_a_time_no_run_takes_is_refused_in_either_group(tmp_path, value):
    assert (
        refusal(tmp_path, "all_gather.txt", table(row(time=value)))
        == f":6: out-of-place time={value!r}: must be {TIME}"
    )
    (tmp_path / "all_gather.txt").unlink()
    assert refusal(tmp_path, "all_gather.txt", table(row(**{"in-place time": value}))) == (
        f":6: in-place time={value!r}: must be {TIME}"
    )


@pytest.mark.parametrize(
    "value, shown", [(float("nan"), "nan"), (float("inf"), "inf"), (-5, "-5"), (0, "0"), (1e300, "1e+300")]
)
def test_a_time_no_run_takes_is_refused_in_a_json_report(tmp_path, value, shown):
    text = json.dumps(report(result(out_of_place={"time": value, "alg_bw": 1.0, "bus_bw": 1.0, "nwrong": 0})))
    assert refusal(tmp_path, "r.json", text) == f": results[0].out_of_place.time={shown}: must be {TIME}"


@pytest.mark.parametrize(
    "name, text, line",
    [
        ("r.json", json.dumps(report(result(size=1e32))), f": results[0].size=1e+32: must be {SIZE}"),
        (
            "all_gather.txt",
            table(row(size="1099511627780")),  # 1 TiB and one float
            f":6: size='1099511627780': must be {SIZE}",
        ),
        (
            "all_gather.txt",
            table(row(size="1022")),
            ":6: size='1022': must be a whole number of float elements (4 bytes each)",
        ),
        (
            "r.json",
            json.dumps(report(result(size=1048578, type="double"))),
            ": results[0].size=1048578: must be a whole number of double elements (8 bytes each)",
        ),
        (
            "r.json",
            json.dumps(report(config={"ngpus": -4, "devices": [{"hostname": "a"}]})),
            f": config.ngpus=-4: must be a whole number from 1 to {MAX_RANKS} (over twice the largest cluster built)",
        ),
        (
            "all_gather.txt",
            table(row(**{"#wrong": "-1"})),
            ":6: #wrong='-1': must be a whole number of wrong elements from 0, or N/A (not checked)",
        ),
        (
            "all_gather.txt",
            table(row(busbw="-0.05")),
            ":6: out-of-place busbw='-0.05': must be a bandwidth from 0 to 1000000 GB/s (1 PB/s)",
        ),
        (
            "all_gather.txt",
            table(row(type="uint64")),
            ":6: type='uint64': must be a type the model has an element size for: float, half, bfloat16, double, "
            "int8, uint8, int32, f8e4m3, f8e5m2",
        ),
        (
            "m.jsonl",
            metrics_line({"ici_bandwidth_gbyte_s_p50": 1e-300}),
            ":1: psum: metrics.ici_bandwidth_gbyte_s_p50=1e-300: must be a bandwidth that gives a time from 1 ns to a "
            "week at S = 2.097e+06 bytes (matrix_dim '1024', it gives 3.67e+297 s)",
        ),
        (
            "m.jsonl",
            metrics_line(matrix_dim="1048576"),  # 2 TiB of bfloat16
            ":1: psum: dimensions' 'matrix_dim' is '1048576'; its bfloat16 matrix must be at most "
            f"{MAX_SIZE_BYTES} bytes (1 TiB, more than any chip holds)",
        ),
        ("all_gather.txt", table(row(size="0")), ": no row of a size above 0 (size 0 times an empty launch)"),
    ],
    ids=case_id,
)
def test_a_size_count_or_bandwidth_no_run_prints_is_refused(tmp_path, name, text, line):
    assert refusal(tmp_path, name, text) == line


UNOWNED = "nccl-tests found wrong values in this run ({} by its out-of-bounds count) and no row says at which size"


@pytest.mark.parametrize(
    "name, text, errors",
    [
        # the in-place check failed, the out-of-place one passed: the collective is still broken
        (
            "all_gather.txt",
            table(row(), row(size="2048", count="256", **{"in-place #wrong": "3"}), out_of_bounds="3 FAILED"),
            [None, "nccl-tests counted 3 wrong elements at this size, in place"],
        ),
        # the closing line counts what no row owns (rows unchecked, N/A): no size can be trusted
        (
            "all_gather.txt",
            table(
                row(**{"#wrong": "N/A", "in-place #wrong": "N/A"}),
                row(size="2048", count="256", **{"#wrong": "N/A", "in-place #wrong": "N/A"}),
                out_of_bounds="4 FAILED",
            ),
            [UNOWNED.format(4)] * 2,
        ),
        # -J: the run's own verdict, okay false
        (
            "r.json",
            json.dumps(report(out_of_bounds={"count": 0, "okay": False})),
            [UNOWNED.format(1)],
        ),
        ("r.json", json.dumps(report(result(in_place={"time": 1.0, "alg_bw": 1.0, "bus_bw": 1.0, "nwrong": 2}))),
         ["nccl-tests counted 2 wrong elements at this size, in place"]),
    ],
    ids=case_id,
)  # fmt: skip
def test_a_failed_data_check_is_a_failed_point_never_an_ok_one(tmp_path, name, text, errors):
    f, out, rc, stdout, stderr = import_file(tmp_path, name, text)
    assert rc == 0, stderr
    assert statuses(out) == [("ok", None) if e is None else ("failed", e) for e in errors]
    sizes = (1024, 2048) if f.suffix == ".txt" else (1048576,)
    failed = ", ".join(f"all_gather of {size} B in {f}" for size, e in zip(sizes, errors) if e)
    n = sum(e is not None for e in errors)
    assert stderr == f"warning: {n} size(s) failed the tool's data check ({failed}): imported as failed points\n"


# -- 4. a size measured twice: refused, naming both places ----------------------------------------


@pytest.mark.parametrize(
    "name, text, line",
    [
        (
            "all_gather.txt",
            table(row(), row(size="2048", count="256"), row(time="11.00")),
            ":8: size=1024 again, first at line 6: a sweep holds one point per collective, size and run; keep one of "
            "the rows (or one type and reduction per file)",
        ),
        (
            # nccl-tests -d all prints every type's sizes in one table
            "all_gather.txt",
            table(row(), row(type="half", count="256")),
            ":7: size=1024 again, first at line 6 (types float and half): a sweep holds one point per collective, size "
            "and run; keep one of the rows (or one type and reduction per file)",
        ),
        (
            "r.json",
            json.dumps(report(result(), result(size=2097152), result())),
            ": results[2].size=1048576 again, first at results[0]: a sweep holds one point per collective, size and "
            "run; keep one of the rows (or one type and reduction per file)",
        ),
        (
            "m.jsonl",
            "\n".join([metrics_line(), metrics_line({"ici_bandwidth_gbyte_s_p50": 80.0})]),
            ":2: psum: all_reduce over 8 devices of S = 2097152 bytes again (ici), first at line 1: a sweep holds one "
            "point per collective, size and group; keep one of the lines",
        ),
    ],
    ids=case_id,
)
def test_a_size_measured_twice_is_refused_naming_both(tmp_path, name, text, line):
    assert refusal(tmp_path, name, text) == line


def test_a_file_named_twice_is_refused(tmp_path):
    f = tmp_path / "all_gather.txt"
    f.write_text(table(row()))
    (tmp_path / "same.txt").symlink_to(f)  # another name for it
    rc, stdout, stderr = run_cli("nccl-tests", f, tmp_path / "same.txt", "--out", tmp_path / "out")
    assert (rc, stdout, stderr) == (2, "", f"error: {tmp_path / 'same.txt'}: named twice: each file is read once\n")
    assert not (tmp_path / "out").exists()


# -- 5. more points than a report reads: refused before anything is written ------------------------

POINTS = (
    f"must be at most {MAX_POINTS} points in one import (each is a folder every report reads; that is over a "
    "hundred whole nccl-tests sweeps)"
)


def _rows(n: int) -> list[str]:
    return [row(size=str(4 * (i + 1)), count=str(i + 1)) for i in range(n)]


def test_more_points_than_an_import_writes_are_refused_before_writing(tmp_path):
    line = 5 + MAX_POINTS + 1  # the first row past the bound
    assert refusal(tmp_path, "all_gather.txt", table(*_rows(MAX_POINTS + 1))) == (
        f":{line}: number of rows={MAX_POINTS + 1}: {POINTS}"
    )
    (tmp_path / "all_gather.txt").unlink()
    many = [result(size=4 * (i + 1), count=i + 1) for i in range(MAX_POINTS + 1)]
    assert refusal(tmp_path, "r.json", json.dumps(report(*many))) == f": number of results={MAX_POINTS + 1}: {POINTS}"
    (tmp_path / "r.json").unlink()
    lines = [metrics_line(matrix_dim=str(8 * (i + 1))) for i in range(MAX_POINTS + 1)]
    assert (
        refusal(tmp_path, "m.jsonl", "\n".join(lines))
        == f":{MAX_POINTS + 1}: number of points={MAX_POINTS + 1}: {POINTS}"
    )


def test_the_bound_holds_across_files_and_takes_exactly_its_number(tmp_path):
    half = MAX_POINTS // 2 + 1
    first, second = tmp_path / "a_all_gather.txt", tmp_path / "b_all_gather.txt"
    first.write_text(table(*_rows(half)))
    second.write_text(table(*_rows(half)))
    rc, stdout, stderr = run_cli("nccl-tests", first, second, "--out", tmp_path / "out")
    assert (rc, stdout, stderr) == (2, "", f"error: {second}: number of points so far={2 * half}: {POINTS}\n")
    assert not (tmp_path / "out").exists()
    # the writer's own check, before its folder: exactly MAX_POINTS pass
    (run,) = parse_nccl_tests(table(*_rows(MAX_POINTS)), "all_gather.txt")
    points = run_points(run)
    assert len(point_overrides(points)) == MAX_POINTS
    with pytest.raises(ImportFormatError, match=rf"^out: number of points={MAX_POINTS + 1}: must be at most"):
        point_overrides([*points, points[0]], "out")


# -- the property: any value in any field is accepted with points in range, or one line naming it --

FAST = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(-3, 5000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0, 1e7),
    st.sampled_from([0, -1, 1, 4, 1024, 2**31, 2**40, 2**40 + 4, 2**63, 1e-300, 1e300, 1e308, 0.5, 1023.0]),
)
JSON_VALUES = st.one_of(
    NUMBERS,
    st.text(max_size=12),
    st.sampled_from([None, True, False, [], [1], {}, "1024", "1e3", "NaN", "-1", "abc", "x" * 300, "8²", "١٢"]),
)
TOKENS = st.one_of(
    NUMBERS.map(str),
    st.text(min_size=1, max_size=12).filter(lambda s: s.split() == [s]),
    st.sampled_from(["N/A", "-", "nan", "inf", "-inf", "1e400", "1²", "١٢", "0x10", "9" * 400, "FAILED"]),
)


def _in_range(p: ImportedPoint) -> None:
    """An accepted point holds numbers every reader takes, and says whether it failed."""
    assert MIN_TIME_S <= p.time_s <= MAX_TIME_S and 0 < p.S_bytes <= MAX_SIZE_BYTES and p.V_bytes <= MAX_BYTES
    assert 1 <= p.ranks <= MAX_RANKS and p.dtype in DTYPE_BYTES
    if p.tool == "nccl-tests":
        assert (p.S_bytes / DTYPE_BYTES[p.dtype]).is_integer()
        for m in filter(None, (p.origin["out_of_place"], p.origin["in_place"])):  # both kept in the result
            assert MIN_TIME_S <= m["time_s"] <= MAX_TIME_S and (m["wrong"] is None or m["wrong"] >= 0)
            assert 0 <= m["algbw_Bps"] <= MAX_BANDWIDTH_Bps and 0 <= m["busbw_Bps"] <= MAX_BANDWIDTH_Bps
    r = point_result(p, "h100", "why", "cmd")
    assert (r["status"] == "ok") == (not p.wrong and not p.check_error)
    with tempfile.TemporaryDirectory() as d:  # written and read back as the readers do
        write_json_atomic(Path(d) / RESULT_NAME, r)
        back = read_result(Path(d))
    assert back.status == r["status"], back.error


def _accepted_or_one_line_naming(parse, names: tuple[str, ...]) -> list | None:
    """The points ``parse()`` gives, each in range; None where it refused in one line naming
    one of ``names``; any other exception fails the test."""
    try:
        points = parse()
    except ImportFormatError as exc:
        line = str(exc)
        assert "\n" not in line and any(n in line for n in names), line
        return None
    for p in points:
        _in_range(p)
    return points


def _set(doc: dict, where: str, value) -> dict:
    """``doc`` with ``value`` at ``where`` (``results.0.out_of_place.time``)."""
    doc = copy.deepcopy(doc)
    *parents, key = where.split(".")
    node = doc
    for k in parents:
        node = node[int(k)] if k.isdigit() else node[k]
    node[key] = value
    return doc


JSON_FIELDS = [
    "results.0.size", "results.0.count", "results.0.type", "results.0.redop", "results.0.out_of_place.time",
    "results.0.out_of_place.alg_bw", "results.0.out_of_place.bus_bw", "results.0.out_of_place.nwrong",
    "results.0.in_place.time", "results.0.in_place.nwrong", "config.ngpus", "config.nthreads",
    "out_of_bounds.count", "nccl_version",
]  # fmt: skip


def _json_names(where: str) -> tuple[str, ...]:
    """How a message names a -J field: results[0].size; config.ngpus, or the ranks they make;
    a measurement without one of its three numbers, as the reader always said it."""
    name = where.replace("results.0", "results[0]")
    if where.startswith("config."):
        return name, "ranks (device records"
    return (name, "a result without time, alg_bw and bus_bw") if "place." in where else (name,)


def _parse_json(doc: dict) -> list:
    return [p for run in parse_nccl_tests_json(json.dumps(doc), "r.json") for p in run_points(run)]


@pytest.mark.parametrize("where", JSON_FIELDS)
@seed(27)
@FAST
@given(value=JSON_VALUES)
@example(value="8²")  # a digit to str.isdigit, not to int()
@example(value=float("nan"))  # JSON's reader takes NaN
def test_any_value_in_a_json_report_is_accepted_in_range_or_one_line_naming_it(where, value):
    doc = _set(report(), where, value)
    _accepted_or_one_line_naming(lambda: _parse_json(doc), _json_names(where))


TEXT_FIELDS = ["size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "in-place time", "in-place #wrong"]


def _text_names(column: str) -> tuple[str, ...]:
    # a row that does not start with a number is no row of the table: the message says so
    return (column, "table row") if column == "size" else (column, column.removeprefix("in-place "))


@pytest.mark.parametrize("column", TEXT_FIELDS)
@seed(27)
@FAST
@given(token=TOKENS)
@example(token="1²")  # a digit to str.isdigit, not to int()
@example(token="9" * 400)  # digits past a float's range
def test_any_token_in_a_table_is_accepted_in_range_or_one_line_naming_it(column, token):
    text = table(row(**{column: token}))
    _accepted_or_one_line_naming(
        lambda: [p for run in parse_nccl_tests(text, "all_gather.txt") for p in run_points(run)], _text_names(column)
    )


ACCEL_FIELDS = [
    ("dimensions", "matrix_dim"), ("dimensions", "dtype"), ("dimensions", "ici_size"), ("dimensions", "dcn_size"),
    ("metrics", "ici_bandwidth_gbyte_s_p50"), ("metrics", "ici_time_ms_p50"), ("metrics", "dcn_bandwidth_gbyte_s_p50"),
]  # fmt: skip


@pytest.mark.parametrize("part, key", ACCEL_FIELDS)
@seed(27)
@FAST
@given(value=JSON_VALUES)
@example(value="8²")  # a digit to str.isdigit, not to int()
@example(value=float("nan"))  # JSON's reader takes NaN
def test_any_value_in_a_metrics_line_is_accepted_in_range_or_one_line_naming_it(part, key, value):
    rec = json.loads(metrics_line(dcn_size="2"))
    rec[part][key] = value
    text = json.dumps(rec)
    _accepted_or_one_line_naming(lambda: parse_results(text, "m.jsonl"), (key, "no psum, psum_scatter"))


# what a -J result's fields allow, worked out from the bounds: accepted exactly when allowed
def _number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        x = float(v)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def _size_allowed(v) -> bool:
    x = _number(v)
    return x is not None and x.is_integer() and 0 < x <= 2**40 and x % 4 == 0  # float: 4 bytes


def _time_allowed(v) -> bool | None:
    x = _number(v)
    if x is not None and any(abs(x / bound - 1) < 1e-9 for bound in (1e-3, MAX_TIME_S * 1e6)):
        return None  # at a bound, microseconds to seconds may round either way
    return x is not None and 1e-3 <= x <= MAX_TIME_S * 1e6


def _ngpus_allowed(v) -> bool:
    x = _number(v)
    return v is None or (x is not None and x.is_integer() and 1 <= x <= MAX_RANKS)


EXACT = {"results.0.size": _size_allowed, "results.0.out_of_place.time": _time_allowed, "config.ngpus": _ngpus_allowed}


@pytest.mark.parametrize("where", sorted(EXACT))
@seed(27)
@FAST
@given(value=NUMBERS)
def test_a_json_field_is_accepted_exactly_when_its_bounds_allow_it(where, value):
    points = _accepted_or_one_line_naming(lambda: _parse_json(_set(report(), where, value)), _json_names(where))
    allowed = EXACT[where](value)
    if allowed is not None:
        assert (points is not None and len(points) == 1) == allowed, f"{where}={value!r}: {points}"
