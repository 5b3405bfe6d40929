"""The headline's numbers on a synthetic sweep with known answers, and the column dictionary
held to summary.csv."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.headline import headline_sentence, headline_table
from analysis.statistics.fit import fit_table


def _points():
    # AllGather over 8 devices: T = max(40 us, V / 2e9); busbw = V/T * 7/8; ceiling 2.5e9 B/s
    V = np.array([2.0**k for k in range(10, 25)])
    T = np.maximum(40e-6, V / 2e9)
    busbw = V / T * 7 / 8
    flags = [""] * len(V)
    flags[-1] = "bus bandwidth 1.30x its ceiling (a measurement problem)"
    busbw[-1] = 2.5e9 * 1.3  # the flagged point must not be the peak
    caveats = ["noisy" if i < 2 else "" for i in range(len(V))]
    pts = pd.DataFrame(
        {
            "op": "all_gather",
            "axes": "X",
            "group_size": 8,
            "dtype": "float32",
            "mesh": "auto",
            "point": [str(i) for i in range(len(V))],
            "V_bytes": V,
            "time_s": T,
            "busbw_Bps": busbw,
            "ceiling_busbw_Bps": 2.5e9,
            "latency_unit": 4.0,
            "bandwidth_unit": V,
            "flags": flags,
            "caveats": caveats,
            "measured_over_model": 1.0,
            "status": "ok",
            "is_target": True,
        }
    )
    pts["busbw_over_ceiling"] = pts["busbw_Bps"] / pts["ceiling_busbw_Bps"]
    return pts


def test_headline_numbers_of_a_known_sweep():
    pts = _points()
    summary = pd.concat(
        [
            pts,
            pd.DataFrame(
                [{"point": "x", "status": "failed", "op": "all_gather", "dtype": "float32", "is_target": False}]
            ),
        ],
        ignore_index=True,
    )
    fits, _ = fit_table(pts)
    head = headline_table(summary, pts, fits)
    row = head.iloc[0]
    assert row["latency_floor_s"] == pytest.approx(40e-6, rel=1e-6)  # the latency-bound points' median
    assert row["latency_floor_from"] == "fit: median of its latency-bound points"
    # the peak of the trusted points: 2e9 * 7/8, first reached at 128 KiB (the first V above 80 kB)
    assert row["peak_busbw_Bps"] == pytest.approx(1.75e9) and row["peak_at_V_bytes"] == 2**17
    assert row["peak_share_of_ceiling"] == pytest.approx(0.7)
    assert row["bandwidth_bound_above_bytes"] == pytest.approx(40e-6 * 2e9, rel=1e-6)  # 80 kB
    assert (row["ok"], row["failed"], row["flagged"], row["noisy"], row["unchecked"]) == (15, 1, 1, 2, 0)
    text = headline_sentence(row)
    assert text.startswith(
        "AllGather over X (8 devices, float32): latency floor about 40 us, peak bus bandwidth "
        "1.75 GB/s at 128 KiB (70% of ceiling), bandwidth-bound above about 78.1 KiB"
    )
    assert text.endswith("(1 failed, 1 flagged, 2 noisy)")
    # a family without a fit (one 8 MiB point, as in book_claims) has no latency floor to speak of
    lone = row.copy()
    lone["latency_floor_s"], lone["latency_floor_from"] = 5.76e-3, "smallest median measured"
    assert ": no fit (too few points), fastest median 5.76 ms, peak bus" in headline_sentence(lone)


def test_every_summary_column_is_in_the_dictionary(tmp_path, compose_cfg):
    from small_sweep import small_sweep

    from analysis.report.columns import SUMMARY, write_dictionary
    from analysis.runs.rundir import read_results
    from analysis.sweep import load_sweep

    root = small_sweep(tmp_path / "s", compose_cfg, sizes=("1KiB", "64KiB"))
    cols = set(load_sweep(root).summary.columns)
    assert cols - set(SUMMARY) == set(), "columns without an entry in analysis/report/columns.py"
    assert set(SUMMARY) - cols == set(), "entries for columns summary.csv no longer has"
    md = write_dictionary(tmp_path / "columns.md").read_text()
    assert all(f"`{c}`" in md for c in cols) and len(read_results(root)) == 2


def _two_families():
    """AllGather float32 (as _points, with intervals, regimes and out-of-sample ratios; a self-fit)
    and an AllReduce bfloat16 sweep that stops at 4 KiB (250, 240, 260 us)."""
    ag = _points()
    ag["time_ci_low_s"], ag["time_ci_high_s"] = ag["time_s"] * 0.9, ag["time_s"] * 1.1
    ag.loc[7, "caveats"] = "noisy"  # 128 KiB: the first point at the peak, but its interval is wide
    ag.loc[7, "time_ci_high_s"] = ag.loc[7, "time_s"] * 1.4
    ag["model_regime"] = np.where(ag["V_bytes"] <= 8e4, "latency", "bandwidth")
    ag["model_self_fit"] = True
    # out of sample: 0.9, 1.0, 1.1, ... over the 7 latency-bound points; 0.3, 0.35, 0.4 ... bandwidth-bound
    ag["measured_over_model_cv"] = np.where(
        ag["model_regime"] == "latency", 0.9 + 0.1 * (np.arange(15) % 3), 0.3 + 0.05 * (np.arange(15) % 3)
    )
    ar = pd.DataFrame(
        {
            "op": "all_reduce",
            "axes": "X",
            "group_size": 8,
            "dtype": "bfloat16",
            "mesh": "auto",
            "point": ["a", "b", "c"],
            "V_bytes": [1024.0, 2048.0, 4096.0],
            "time_s": [250e-6, 240e-6, 260e-6],
            "busbw_Bps": np.array([1024.0, 2048.0, 4096.0]) / np.array([250e-6, 240e-6, 260e-6]) * 1.75,
            "latency_unit": 8.0,
            "bandwidth_unit": [2048.0, 4096.0, 8192.0],
            "flags": "",
            "caveats": "",
            "measured_over_model": [1.2, 1.1, 1.3],
            "model_regime": "latency",
            "model_self_fit": False,
        }
    )
    ar["measured_over_model_cv"] = ar["measured_over_model"]
    return pd.concat([ag, ar], ignore_index=True)


def test_headline_claims_only_what_the_data_shows():
    pts = _two_families()
    fits, _ = fit_table(pts)
    head = headline_table(pts.assign(status="ok"), pts, fits)
    ag, ar = head.iloc[0], head.iloc[1]
    assert (ag["op"], ar["op"]) == ("all_gather", "all_reduce")
    # the peak skips the flagged 64 MiB; 128 KiB's lower end (1.75 / 1.4 GB/s) is below the steady
    # points' (1.75 / 1.1): 1.75 GB/s at 256 KiB, +-10% in time
    assert (ag["peak_busbw_Bps"], ag["peak_at_V_bytes"], ag["peak_from"]) == (
        pytest.approx(1.75e9),
        2**18,
        "steady point",
    )
    assert ag["peak_busbw_ci_low_Bps"] == pytest.approx(1.75e9 / 1.1) and ag["peak_busbw_ci_high_Bps"] == pytest.approx(
        1.75e9 / 0.9
    )
    # out of sample by regime: latency 0.9, 1.0, 1.1 cycling over 7 points; bandwidth 0.3 .. 0.4 over 8
    assert [ag[f"out_of_sample_latency_{s}"] for s in ("min", "median", "max", "points")] == pytest.approx(
        [0.9, 1.0, 1.1, 7]
    )
    assert [ag[f"out_of_sample_bandwidth_{s}"] for s in ("min", "median", "max", "points")] == pytest.approx(
        [0.3, 0.35, 0.4, 8]
    )
    text = headline_sentence(ag)
    # the first interval says what it is; the peak's is 1.75 / 1.1 .. 1.75 / 0.9 GB/s
    assert "latency floor about 40 us (95%: " in text
    assert "us), peak bus bandwidth 1.75 GB/s (1.59-1.94 GB/s) at 256 KiB" in text
    assert text.endswith(
        "measured/model 1 (self-fit; out of sample: latency-bound 0.9-1.1, median 1; bandwidth-bound 0.3-0.4, "
        "median 0.35) (1 flagged, 3 noisy)"
    )
    # a noisy point whose lower end beats every steady point's is the peak, and says so
    louder = pts.copy()
    louder.loc[7, "busbw_Bps"] = 3e9  # lower end 3 / 1.4 = 2.14 GB/s
    row = headline_table(louder.assign(status="ok"), louder, fits).iloc[0]
    assert (row["peak_busbw_Bps"], row["peak_at_V_bytes"], row["peak_from"]) == (3e9, 2**17, "noisy point")
    assert "peak bus bandwidth 3 GB/s (2.14-3.33 GB/s) at 128 KiB (a noisy point" in headline_sentence(row)
    # the sweep that stops at 4 KiB: a latency floor (the median, 250 us), no bandwidth claim
    assert ar["bandwidth_regime"] in (False,) and ag["bandwidth_regime"] in (True,)
    assert pd.isna(ar["bandwidth_bound_above_bytes"]) and ar["latency_floor_s"] == pytest.approx(250e-6)
    text = headline_sentence(ar)
    assert text == (
        "AllReduce over X (8 devices, bfloat16): latency floor about 250 us, peak bus bandwidth 0.0276 GB/s at 4 KiB, "
        "no bandwidth regime in range (to 4 KiB), measured/model 1.2 (latency-bound 1.1-1.3, median 1.2)"
    )
    assert "bandwidth-bound above" not in text
