"""nccl-tests' conventions (issue 24 item 8): the count column per rank (per peer for
AllToAll), as nccl-tests' ``*GetCollByteCount`` sets its paramcount; the table closed by
"Avg bus bandwidth"; a single run's console line and result.json with algbw and busbw.

nccl-tests' table and a run's bandwidth pinned where a plausible-wrong version differs
(issue 30): every collective kind in one frame (redop, count per rank or per peer, S != V for
AllToAll), a missing S, every dtype's nccl-tests type name, GB/s not GiB/s, and the closing
average over the sizes that have a time.

nccl-tests' table on the sizes a plausible-wrong version prints differently (issue 30's
mutation check): counts that do not divide evenly (nccl-tests prints whole elements), a
collective the table has no per-rank rule for, a long time in microseconds, and bandwidth
cells that are not numbers; and a run's bandwidth with half an interval.
"""

from __future__ import annotations

import logging
import math

import pandas as pd
import pytest

from analysis.report.nccl_table import avg_busbw_line, nccl_count, nccl_frame
from analysis.runs.record import Result
from runner.sweep import bandwidth as runner_bandwidth
from runner.sweep.bandwidth import bandwidth_words

KiB, MiB = 1 << 10, 1 << 20


def bandwidth(result: dict) -> dict | None:
    """The runner's bandwidth of a result.json's object (the runner hands it the typed record)."""
    return runner_bandwidth.bandwidth(Result.from_json(result))


def test_the_count_column_is_what_one_rank_passes():
    # AllGather 1 KiB of float32 over 8: each rank sends 1 KiB / 8 / 4 B = 32 (not 256)
    assert nccl_count("all_gather", 1 * KiB, 8, "float32") == 32
    # ReduceScatter: S is the per-rank input (1 KiB); each rank receives an eighth: 32
    assert nccl_count("reduce_scatter", 1 * KiB, 8, "float32") == 32
    # AllReduce: the whole per-rank buffer, 256
    assert nccl_count("all_reduce", 1 * KiB, 8, "float32") == 256
    # AllToAll of V = 1 KiB: S = V / 8 = 128 B a rank, 32 elements, 4 per peer
    assert nccl_count("all_to_all", 128, 8, "float32") == 4
    assert nccl_count("all_gather", 1 * KiB, 8, "bfloat16") == 64
    assert nccl_count("all_gather", 1 * KiB, 2, "int8") == 512


def _family() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "op": ["all_gather", "all_gather", "all_gather"],
            "V_bytes": [1.0 * KiB, 4.0 * KiB, 16.0 * KiB],
            "S_bytes": [1.0 * KiB, 4.0 * KiB, 16.0 * KiB],
            "group_size": [8, 8, 8],
            "dtype": ["float32"] * 3,
            "time_s": [100e-6, 200e-6, 400e-6],
            "algbw_Bps": [1.0e9, 2.0e9, 4.5e9 / 0.875],
            "busbw_Bps": [1.0e9, 2.0e9, 4.5e9],
            "checked": [True, True, False],
        }
    )


def test_the_table_has_nccl_tests_columns_and_closes_with_the_average_bus_bandwidth():
    t = nccl_frame(_family())
    assert list(t.columns) == [
        "size",
        "count",
        "type",
        "redop",
        "time (us)",
        "algbw (GB/s)",
        "busbw (GB/s)",
        "#wrong",
    ]
    assert t["size"].tolist() == [1024, 4096, 16384] and t["count"].tolist() == [32, 128, 512]
    assert t["type"].tolist() == ["float"] * 3 and t["redop"].tolist() == ["none"] * 3
    assert t["time (us)"].tolist() == ["100.00", "200.00", "400.00"]
    assert t["busbw (GB/s)"].tolist() == ["1.00", "2.00", "4.50"] and t["#wrong"].tolist() == [0, 0, ""]
    # nccl-tests: the mean of every line's busbw, in GB/s, printed with %g: (1 + 2 + 4.5) / 3
    assert avg_busbw_line(_family()) == "# Avg bus bandwidth    : 2.5 "


def _result(op="all_reduce", V=64 * MiB, n=8, median=0.1, lo=0.08, hi=0.125) -> dict:
    return {
        "status": "ok",
        "spec": {"op": op, "V_bytes": V, "group_size": n},
        "timing": {"summary": {"median_s": median, "ci_low_s": lo, "ci_high_s": hi}},
    }


def test_a_run_records_algbw_and_busbw_as_nccl_tests_computes_them():
    bw = bandwidth(_result())
    # AllReduce 64 MiB over 8 in 0.1 s: algbw = 64 MiB / 0.1 s; busbw = algbw x 2 x 7 / 8
    assert bw["S_bytes"] == 64 * MiB and bw["algbw_Bps"] == pytest.approx(671088640.0)
    assert bw["busbw_Bps"] == pytest.approx(671088640.0 * 1.75)
    assert bw["busbw_ci_low_Bps"] == pytest.approx(64 * MiB / 0.125 * 1.75)
    assert bw["busbw_ci_high_Bps"] == pytest.approx(64 * MiB / 0.08 * 1.75)
    assert bandwidth_words(bw) == "algbw 0.671 GB/s  busbw 1.17 GB/s"
    # AllToAll: S is the per-rank buffer, V / n; busbw x 7/8
    a2a = bandwidth(_result("all_to_all", V=8 * MiB, median=0.01))
    assert a2a["S_bytes"] == 1 * MiB and a2a["busbw_Bps"] == pytest.approx(1 * MiB / 0.01 * 0.875)
    # no bandwidth for a matmul, a group of one, or a failed run
    assert bandwidth(_result("matmul")) is None and bandwidth(_result(n=1)) is None
    assert bandwidth(dict(_result(), status="failed")) is None


def test_a_single_run_and_a_sweep_line_print_algbw_and_busbw(caplog, tmp_path):
    from runner.sweep.point import _log_line
    from runner.sweep.progress import point_line

    r = _result()
    r["bandwidth"] = bandwidth(r)
    r["timing"].update(estimator="step", summary=dict(r["timing"]["summary"], rel_ci_halfwidth=0.04, n=60, rounds=5))
    r["spec"]["size_bytes"] = 64 * MiB
    r["config"] = {"op": {"name": "all_reduce"}}
    with caplog.at_level(logging.INFO, logger="shardlab"):
        _log_line(Result.from_json(r), tmp_path)
    assert caplog.records[-1].getMessage() == (
        f"all_reduce 64MiB: median 100 ms (+-4%, step estimator, 60 samples in 5 round(s))  "
        f"algbw 0.671 GB/s  busbw 1.17 GB/s -> {tmp_path}"
    )
    line = point_line(3, 17, "op.size_bytes=64MiB", r)
    assert line.endswith("ok    100 ms ±4%  algbw 0.671 GB/s  busbw 1.17 GB/s"), line


def test_a_real_single_run_records_its_bandwidth_from_every_round(compose_cfg, tmp_path):
    from runner import run

    quick = ["timing.min_iters=5", "timing.budget_s=0.3", "trace.enabled=false", "check_result=false"]
    r = run(compose_cfg([*quick, "op=all_reduce", "op.size_bytes=64KiB", "timing.rounds=2"]), tmp_path)
    assert r["status"] == "ok", r.get("error")
    assert len(r["timing"]["rounds"]) == 2
    # recomputed from the median over both rounds, not left at round 1's
    assert r["bandwidth"] == bandwidth(r)
    assert r["bandwidth"]["busbw_Bps"] == pytest.approx(64 * KiB / r["timing"]["summary"]["median_s"] * 1.75)


def _every_kind() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "op": ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_gather"],
            "V_bytes": [3 * KiB, 6 * KiB, 12 * KiB, 8 * KiB, 96.0],
            # AllToAll: S = V / n; the last row has no S (a point from before S was recorded): V stands in
            "S_bytes": [3 * KiB, 6 * KiB, 12 * KiB, 1 * KiB, math.nan],
            "group_size": [2, 3, 4, 8, 3],
            "dtype": ["bfloat16", "float16", "int32", "float16", "int8"],
            "time_s": [12.5e-6, 1e-3, 2.5e-6, 40e-6, 1.25e-6],
            "algbw_Bps": [1.5e9, 6e6, 4.9152e9, 25.6e6, 76.8e6],
            "busbw_Bps": [1.5e9, 4e6, 3.6864e9, 22.4e6, 51.2e6],
            "checked": [True, False, True, True, None],
        }
    )


def test_every_kind_in_one_table():
    t = nccl_frame(_every_kind())
    assert t["size"].tolist() == [3072, 6144, 12288, 1024, 96]
    # AllReduce: the whole buffer, 3 KiB / 2 B = 1536; AllGather: 6 KiB / 2 B / 3 ranks = 1024;
    # ReduceScatter: 12 KiB / 4 B / 4 = 768; AllToAll: per peer, 1 KiB / 2 B / 8 = 64;
    # the int8 AllGather with V for S: 96 / 1 / 3 = 32
    assert t["count"].tolist() == [1536, 1024, 768, 64, 32]
    assert t["type"].tolist() == ["bfloat16", "half", "int32", "half", "int8"]
    assert t["redop"].tolist() == ["sum", "none", "sum", "none", "none"]
    assert t["time (us)"].tolist() == ["12.50", "1000.00", "2.50", "40.00", "1.25"]
    # decimal GB/s as nccl-tests (GiB/s would print 1.40, 4.58, ...)
    assert t["algbw (GB/s)"].tolist() == ["1.50", "0.01", "4.92", "0.03", "0.08"]
    assert t["busbw (GB/s)"].tolist() == ["1.50", "0.00", "3.69", "0.02", "0.05"]
    # checked -> 0 wrong; not checked (False or unknown) -> blank
    assert t["#wrong"].tolist() == [0, "", 0, 0, ""]


def test_dtypes_take_nccl_tests_names_and_one_it_lacks_keeps_its_own():
    g = _every_kind().iloc[:1].assign(dtype="float32")
    assert nccl_frame(g)["type"].tolist() == ["float"] and nccl_frame(g)["count"].tolist() == [768]
    # test_typenames in nccl-tests' src/common.cu; it has no int16
    names = {d: nccl_frame(g.assign(dtype=d))["type"].item() for d in ("float64", "float16", "bfloat16", "int16")}
    assert names == {"float64": "double", "float16": "half", "bfloat16": "bfloat16", "int16": "int16"}


def test_the_average_is_the_mean_over_the_sizes_with_a_time():
    g = pd.DataFrame({"busbw_Bps": [1e9, math.nan, 2e9, 6e9, None]})
    # mean of 1, 2 and 6 GB/s: 3 (the median would be 2; counting the blanks, 1.8 or NaN)
    assert avg_busbw_line(g) == "# Avg bus bandwidth    : 3 "
    assert avg_busbw_line(pd.DataFrame({"busbw_Bps": [1.23456789e9]})) == "# Avg bus bandwidth    : 1.23457 "
    assert avg_busbw_line(pd.DataFrame({"busbw_Bps": [math.nan]})) == "# Avg bus bandwidth    : (no size has a time)"


def _result_of(op, V, n, median, lo=None, hi=None, **exp) -> dict:
    s = {"median_s": median}
    if lo is not None:
        s.update(ci_low_s=lo, ci_high_s=hi)
    return {"status": "ok", "spec": {"op": op, "V_bytes": V, "group_size": n, **exp}, "timing": {"summary": s}}


def test_each_kind_s_and_factor_over_an_odd_group():
    # ReduceScatter of 12 MiB over 3 in 4 ms: S = V, algbw = 3 MiB/ms, busbw x 2/3 = 2 MiB/ms
    rs = bandwidth(_result_of("reduce_scatter", 12 * MiB, 3, 4e-3))
    assert rs["S_bytes"] == 12 * MiB and rs["algbw_Bps"] == pytest.approx(3 * MiB * 1000)
    assert rs["busbw_Bps"] == pytest.approx(2 * MiB * 1000)
    assert "busbw_ci_low_Bps" not in rs  # no interval recorded: none made up
    assert rs["what"] == "nccl-tests: algbw = S / time, busbw = algbw x 0.666667 (reduce_scatter over 3 devices)"
    # AllGather over 5: busbw x 4/5; interval inverted: the slow end of the time is the low end
    ag = bandwidth(_result_of("all_gather", 5000, 5, 1e-6, lo=0.5e-6, hi=2e-6))
    assert (ag["algbw_Bps"], ag["busbw_Bps"]) == (pytest.approx(5e9), pytest.approx(4e9))
    assert (ag["busbw_ci_low_Bps"], ag["busbw_ci_high_Bps"]) == (pytest.approx(2e9), pytest.approx(8e9))
    # AllReduce over 2: x 2 (2-1)/2 = 1
    ar = bandwidth(_result_of("all_reduce", 1000, 2, 1e-6))
    assert (ar["algbw_Bps"], ar["busbw_Bps"]) == (pytest.approx(1e9), pytest.approx(1e9))
    assert bandwidth_words(ar) == "algbw 1 GB/s  busbw 1 GB/s" and bandwidth_words(None) == ""
    # AllToAll over 4: S = V / 4, busbw x 3/4
    a2a = bandwidth(_result_of("all_to_all", 4000, 4, 1e-6))
    assert a2a["S_bytes"] == 1000 and a2a["busbw_Bps"] == pytest.approx(0.75e9)


def test_no_bandwidth_without_a_collective_time_over_two_devices():
    assert bandwidth(_result_of("all_reduce", 1000, 2, 1e-6, grad=True)) is None  # a gradient step
    assert bandwidth(_result_of("all_reduce", 1000, 1, 1e-6)) is None
    assert bandwidth(_result_of("all_reduce", 1000, None, 1e-6)) is None
    assert bandwidth(_result_of("all_reduce", 0, 2, 1e-6)) is None
    assert bandwidth(_result_of("all_reduce", 1000, 2, None)) is None
    assert bandwidth(_result_of("transformer_block", 1000, 2, 1e-6)) is None
    assert bandwidth({"status": "ok"}) is None


def test_the_count_of_a_sub_byte_dtype_counts_its_elements():
    # int4 holds two elements a byte: the count is 2 per byte, not a division by zero whole bytes
    from analysis.report.nccl_table import nccl_count

    assert nccl_count("all_reduce", 1024, 8, "int4") == 2048
    assert nccl_count("all_gather", 1024, 8, "int4") == 256  # per rank
    assert nccl_count("all_reduce", 1024, 8, "float32") == 256


def test_counts_are_whole_elements_rounded_down():
    # 10 B of float32: 2 whole elements (not 2.5); AllGather of 7 int8 over 2 ranks: 3 each
    assert nccl_count("all_reduce", 10, 2, "float32") == 2 and type(nccl_count("all_reduce", 10, 2, "float32")) is int
    assert nccl_count("all_gather", 7, 2, "int8") == 3 and type(nccl_count("all_gather", 7, 2, "int8")) is int
    # a collective without a per-rank rule prints its whole buffer
    assert nccl_count("broadcast", 4096, 8, "float32") == 1024


def test_sizes_print_as_integers_and_a_long_time_keeps_its_last_digits():
    g = pd.DataFrame(
        {
            "op": ["all_reduce"],
            "V_bytes": [64.0 * 2**20],
            "S_bytes": [64.0 * 2**20],  # floats, as summary.csv reads them
            "group_size": [8],
            "dtype": ["float32"],
            "time_s": [0.02],  # 20 ms: 20000.00 us
            "algbw_Bps": [3.3554432e9],
            "busbw_Bps": [5.8720256e9],
            "checked": [True],
        }
    )
    t = nccl_frame(g)
    assert str(t["size"].dtype) == "int64" and t.to_string(index=False).split("\n")[1].split()[:2] == [
        "67108864",
        "16777216",
    ]
    assert t["time (us)"].tolist() == ["20000.00"]


def test_a_bandwidth_cell_that_is_not_a_number_is_skipped_in_the_average():
    assert avg_busbw_line(pd.DataFrame({"busbw_Bps": ["", "-", "3e9", 1e9]})) == "# Avg bus bandwidth    : 2 "


def test_a_run_with_one_end_of_its_interval_missing_has_no_bandwidth_interval():
    # the key as format_version 1 wrote it (read either way)
    result = {
        "status": "ok",
        "experiment": {"op": "all_gather", "V_bytes": 8e9, "group_size": 4},
        "timing": {"summary": {"median_s": 2.0, "ci_low_s": 1.0, "ci_high_s": None}},
    }
    bw = bandwidth(result)
    assert (bw["S_bytes"], bw["algbw_Bps"], bw["busbw_Bps"]) == (8e9, 4e9, 3e9)
    assert "busbw_ci_low_Bps" not in bw and "busbw_ci_high_Bps" not in bw
