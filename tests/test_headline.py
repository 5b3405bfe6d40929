"""The headline's numbers on a synthetic sweep with known answers, and the column dictionary
held to summary.csv."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.fit import fit_table
from analysis.headline import headline_sentence, headline_table


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
            "job": [str(i) for i in range(len(V))],
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
                [{"job": "x", "status": "failed", "op": "all_gather", "dtype": "float32", "is_target": False}]
            ),
        ],
        ignore_index=True,
    )
    fits, _ = fit_table(pts)
    head = headline_table(summary, pts, fits)
    row = head.iloc[0]
    assert row["latency_floor_s"] == pytest.approx(40e-6, rel=1e-6)  # T_min 10 us x 4 hops
    assert row["latency_floor_from"] == "fit: T_min x hops"
    # the peak of the trusted points: 2e9 * 7/8, first reached at 128 KiB (the first V above 80 kB)
    assert row["peak_busbw_Bps"] == pytest.approx(1.75e9) and row["peak_at_V_bytes"] == 2**17
    assert row["peak_share_of_ceiling"] == pytest.approx(0.7)
    assert row["bandwidth_bound_above_bytes"] == pytest.approx(40e-6 * 2e9, rel=1e-6)  # 80 kB
    assert (row["ok"], row["failed"], row["flagged"], row["noisy"], row["unchecked"]) == (15, 1, 1, 2, 0)
    text = headline_sentence(row)
    assert text.startswith(
        "AllGather over X (8 devices, float32): latency floor about 40 us, peak bus bandwidth "
        "1.75 GB/s at 128 KiB (70% of its ceiling), bandwidth-bound above about 78.1 KiB"
    )
    assert text.endswith("(1 failed, 1 flagged, 2 noisy)")
    # a family without a fit (one 8 MiB point, as in book_claims) has no latency floor to speak of
    lone = row.copy()
    lone["latency_floor_s"], lone["latency_floor_from"] = 5.76e-3, "smallest median measured"
    assert ": no fit (too few points), fastest median 5.76 ms, peak bus" in headline_sentence(lone)


def test_every_summary_column_is_in_the_dictionary(tmp_path, compose_cfg):
    from small_sweep import small_sweep

    from analysis.report.columns import SUMMARY, write_dictionary
    from analysis.rundir import read_results
    from analysis.sweep import load_sweep

    root = small_sweep(tmp_path / "s", compose_cfg, sizes=("1KiB", "64KiB"))
    cols = set(load_sweep(root).summary.columns)
    assert cols - set(SUMMARY) == set(), "columns without an entry in analysis/report/columns.py"
    assert set(SUMMARY) - cols == set(), "entries for columns summary.csv no longer has"
    md = write_dictionary(tmp_path / "columns.md").read_text()
    assert all(f"`{c}`" in md for c in cols) and len(read_results(root)) == 2
