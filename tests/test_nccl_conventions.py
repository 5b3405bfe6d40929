"""nccl-tests' conventions (issue 24 item 8): the count column per rank (per peer for
AllToAll), as nccl-tests' ``*GetCollByteCount`` sets its paramcount; the table closed by
"Avg bus bandwidth"; a single run's console line and result.json with algbw and busbw."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from analysis.report.nccl_table import avg_busbw_line, nccl_count, nccl_frame
from runner.sweep.bandwidth import bandwidth, bandwidth_words

KiB, MiB = 1 << 10, 1 << 20


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
        _log_line(r, tmp_path)
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
