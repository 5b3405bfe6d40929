"""nccl-tests' table and a run's bandwidth pinned where a plausible-wrong version differs
(issue 30): every collective kind in one frame (redop, count per rank or per peer, S != V for
AllToAll), a missing S, every dtype's nccl-tests type name, GB/s not GiB/s, and the closing
average over the sizes that have a time."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.report.nccl_table import avg_busbw_line, nccl_frame
from runner.sweep.bandwidth import bandwidth, bandwidth_words

KiB, MiB = 1 << 10, 1 << 20


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


def _result(op, V, n, median, lo=None, hi=None, **exp) -> dict:
    s = {"median_s": median}
    if lo is not None:
        s.update(ci_low_s=lo, ci_high_s=hi)
    return {"status": "ok", "spec": {"op": op, "V_bytes": V, "group_size": n, **exp}, "timing": {"summary": s}}


def test_each_kind_s_and_factor_over_an_odd_group():
    # ReduceScatter of 12 MiB over 3 in 4 ms: S = V, algbw = 3 MiB/ms, busbw x 2/3 = 2 MiB/ms
    rs = bandwidth(_result("reduce_scatter", 12 * MiB, 3, 4e-3))
    assert rs["S_bytes"] == 12 * MiB and rs["algbw_Bps"] == pytest.approx(3 * MiB * 1000)
    assert rs["busbw_Bps"] == pytest.approx(2 * MiB * 1000)
    assert "busbw_ci_low_Bps" not in rs  # no interval recorded: none made up
    assert rs["what"] == "nccl-tests: algbw = S / time, busbw = algbw x 0.666667 (reduce_scatter over 3 devices)"
    # AllGather over 5: busbw x 4/5; interval inverted: the slow end of the time is the low end
    ag = bandwidth(_result("all_gather", 5000, 5, 1e-6, lo=0.5e-6, hi=2e-6))
    assert (ag["algbw_Bps"], ag["busbw_Bps"]) == (pytest.approx(5e9), pytest.approx(4e9))
    assert (ag["busbw_ci_low_Bps"], ag["busbw_ci_high_Bps"]) == (pytest.approx(2e9), pytest.approx(8e9))
    # AllReduce over 2: x 2 (2-1)/2 = 1
    ar = bandwidth(_result("all_reduce", 1000, 2, 1e-6))
    assert (ar["algbw_Bps"], ar["busbw_Bps"]) == (pytest.approx(1e9), pytest.approx(1e9))
    assert bandwidth_words(ar) == "algbw 1 GB/s  busbw 1 GB/s" and bandwidth_words(None) == ""
    # AllToAll over 4: S = V / 4, busbw x 3/4
    a2a = bandwidth(_result("all_to_all", 4000, 4, 1e-6))
    assert a2a["S_bytes"] == 1000 and a2a["busbw_Bps"] == pytest.approx(0.75e9)


def test_no_bandwidth_without_a_collective_time_over_two_devices():
    assert bandwidth(_result("all_reduce", 1000, 2, 1e-6, grad=True)) is None  # a gradient step
    assert bandwidth(_result("all_reduce", 1000, 1, 1e-6)) is None
    assert bandwidth(_result("all_reduce", 1000, None, 1e-6)) is None
    assert bandwidth(_result("all_reduce", 0, 2, 1e-6)) is None
    assert bandwidth(_result("all_reduce", 1000, 2, None)) is None
    assert bandwidth(_result("transformer_block", 1000, 2, 1e-6)) is None
    assert bandwidth({"status": "ok"}) is None


def test_the_count_of_a_sub_byte_dtype_counts_its_elements():
    # int4 holds two elements a byte: the count is 2 per byte, not a division by zero whole bytes
    from analysis.report.nccl_table import nccl_count

    assert nccl_count("all_reduce", 1024, 8, "int4") == 2048
    assert nccl_count("all_gather", 1024, 8, "int4") == 256  # per rank
    assert nccl_count("all_reduce", 1024, 8, "float32") == 256
