"""The headline's numbers on a synthetic sweep with known answers, and the column dictionary
held to summary.csv.

The headline by exact expectations (issue 30, round two's mutation check): several
families at once (two ops, two dtypes, group sizes 1, 2 and 8, families out of sorted order),
fits that match a family on one key and not another, failed points of the same op and another
dtype, unflagged points whose flags are missing, intervals from the summary or from the time,
and the sentence's every branch. Every expected number is worked out by hand in a comment.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.book.units import fmt_bandwidth, fmt_bytes, fmt_duration
from analysis.headline import HEADLINE_COLUMNS, family_name, headline_sentence, headline_table, within
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


NAN, INF = float("nan"), float("inf")
KEYS = ["op", "axes", "group_size", "dtype"]


def _family_points() -> pd.DataFrame:
    rows = [
        # AllReduce over Y, 2 devices, float32: listed first (the table keeps the sweep's order)
        ("all_reduce", "Y", 2, "float32", "xy_4x2", "0", 2**10, 1e-4, 1e7, NAN, "unchecked", 0.9e-4, 1.1e-4, NAN, NAN),
        ("all_reduce", "Y", 2, "float32", "auto", "1", 2**20, 2e-3, 5e8, "", "noisy", 1.8e-3, 2.2e-3, 4e8, 6e8),
        ("all_reduce", "Y", 2, "float32", "xy_4x2", "2", 2**22, 8e-3, 4.5e8, NAN, NAN, 7.2e-3, 8.8e-3, NAN, 5.5e8),
        # AllGather over X, 8 devices, float32
        ("all_gather", "X", 8, "float32", "auto", "3", 2**21, 1e-3, 1.6e9, "", "noisy", 0.9e-3, 1.1e-3, NAN, NAN),
        ("all_gather", "X", 8, "float32", "auto", "4", 2**23, 4e-3, 1.75e9, "", "noisy unchecked", 3.6e-3, 4.4e-3, NAN, NAN),  # noqa: E501
        ("all_gather", "X", 8, "float32", "auto", "5", 2**25, 1.6e-2, 3.25e9, "too fast", "", 1.5e-2, 1.7e-2, NAN, NAN),
        # the same family in bfloat16: one point
        ("all_gather", "X", 8, "bfloat16", "auto", "6", 2**20, 2e-3, 4.375e8, "", "", 1.9e-3, 2.1e-3, NAN, NAN),
        # a group of one: a copy, no bus bandwidth
        ("all_gather", "X", 1, "float32", "auto", "7", 2**12, 5e-6, NAN, "", "", 4e-6, 6e-6, NAN, NAN),
    ]  # fmt: skip
    cols = [*KEYS, "mesh", "point", "V_bytes", "time_s", "busbw_Bps", "flags", "caveats"]
    cols += ["time_ci_low_s", "time_ci_high_s", "busbw_ci_low_Bps", "busbw_ci_high_Bps"]
    pts = pd.DataFrame(rows, columns=cols)
    pts["busbw_over_ceiling"] = [0.01, 0.5, 0.45, 0.64, 0.7, 1.3, 0.2, NAN]
    pts["measured_over_model"] = [1.2, INF, -INF, 1.0, 1.1, 1.2, NAN, NAN]
    pts["measured_over_model_cv"] = [0.9, 1.1, -INF, 1.0, 1.1, 1.2, NAN, NAN]
    pts["model_regime"] = ["latency", "bandwidth", "bandwidth", "latency", "bandwidth", "bandwidth", "latency", None]
    pts["model_self_fit"] = [False, True, False, False, False, False, False, False]
    pts["time_rounds"] = [5, 1, 3, 3, 5, 3, 1, 1]  # 1: timed in one round (timing=quick)
    pts["status"] = "ok"
    return pts


def _summary(pts: pd.DataFrame) -> pd.DataFrame:
    failed = pd.DataFrame(
        [
            # one failed AllReduce float32 point, two rows (one per HLO kind): counted once
            {"point": "f1", "status": "failed", "op": "all_reduce", "dtype": "float32", "hlo_kind": "all-reduce"},
            {"point": "f1", "status": "failed", "op": "all_reduce", "dtype": "float32", "hlo_kind": "copy"},
            # a failed AllReduce in bfloat16 and a failed AllGather in float32
            {"point": "f2", "status": "failed", "op": "all_reduce", "dtype": "bfloat16", "hlo_kind": None},
            {"point": "f3", "status": "failed", "op": "all_gather", "dtype": "float32", "hlo_kind": None},
        ]
    )
    return pd.concat([pts, failed], ignore_index=True)


def _fits() -> pd.DataFrame:
    fit = ["latency_floor_s", "latency_floor_ci_low_s", "latency_floor_ci_high_s", "bandwidth_regime"]
    fit += ["crossover_bytes", "crossover_ci_low_bytes", "crossover_ci_high_bytes"]
    rows = [
        # decoys first: each differs from the AllGather float32 family in one key only
        ("all_reduce", "X", 8, "float32", 1.0, 0.9, 1.1, True, 1.0, 1.0, 1.0),
        ("all_gather", "Y", 8, "float32", 2.0, 1.9, 2.1, True, 2.0, 2.0, 2.0),
        ("all_gather", "X", 4, "float32", 3.0, 2.9, 3.1, True, 3.0, 3.0, 3.0),
        # the bfloat16 family: no latency fit, no bandwidth regime
        ("all_gather", "X", 8, "bfloat16", NAN, NAN, NAN, False, 9e5, 8e5, 1e6),
        ("all_gather", "X", 8, "float32", 3e-4, 2.5e-4, 3.5e-4, True, 6e5, 5e5, 7e5),
        # the AllReduce family: a fit whose bandwidth regime is unknown (NaN): no regime
        ("all_reduce", "Y", 2, "float32", 9e-5, 8e-5, 1e-4, NAN, 5e4, 4e4, 6e4),
    ]
    return pd.DataFrame(rows, columns=[*KEYS, *fit])


def _rows(head: pd.DataFrame) -> list[dict]:
    """The table's rows with NaN read as None (pandas stores a missing float as NaN)."""
    out = []
    for r in head.to_dict("records"):
        out.append({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()})
    return out


def test_the_table_of_four_families_at_once():
    pts = _family_points()
    head = headline_table(_summary(pts), pts, _fits())
    assert list(head.columns) == HEADLINE_COLUMNS
    ar, ag, bf, one = _rows(head)
    # in the sweep's order: AllReduce first
    assert [tuple(r[k] for k in KEYS) for r in (ar, ag, bf, one)] == [
        ("all_reduce", "Y", 2, "float32"),
        ("all_gather", "X", 8, "float32"),
        ("all_gather", "X", 8, "bfloat16"),
        ("all_gather", "X", 1, "float32"),
    ]
    assert ar == pytest.approx(
        {
            **dict(zip(KEYS, ("all_reduce", "Y", 2, "float32"))),
            "mesh": "auto, xy_4x2",
            # 3 ok and f1 (its two rows are one point); f2 is bfloat16
            "points": 4,
            "ok": 3,
            "failed": 1,
            "noisy": 1,
            "unchecked": 1,
            # a missing flag is no flag
            "flagged": 0,
            "one_round": 1,  # point 1: its interval says nothing of run-to-run drift
            # a group of 2 is a collective: the fit's floor
            "latency_floor_s": 9e-5,
            "latency_floor_ci_low_s": 8e-5,
            "latency_floor_ci_high_s": 1e-4,
            "latency_floor_from": "fit: median of its latency-bound points",
            # lower ends: point 0 1e7 x 1/1.1; point 1 its own 4e8; point 2 (flags missing, so
            # unflagged) 4.5e8 x 8/8.8 = 4.09e8 from its time: point 2 is the peak, its upper
            # end its own 5.5e8 (the time's would be 4.5e8 x 8/7.2 = 5e8)
            "peak_busbw_Bps": 4.5e8,
            "peak_busbw_ci_low_Bps": 4.5e8 * 8 / 8.8,
            "peak_busbw_ci_high_Bps": 5.5e8,
            "peak_at_V_bytes": 2**22,
            "peak_from": "steady point",
            "peak_share_of_ceiling": 0.45,
            # a NaN regime is none: no crossover, though the fit has one
            "bandwidth_regime": False,
            "V_max_bytes": 2**22,
            "bandwidth_bound_above_bytes": None,
            "bandwidth_bound_above_ci_low_bytes": None,
            "bandwidth_bound_above_ci_high_bytes": None,
            # 1.2, with inf and -inf left out
            "measured_over_model_median": 1.2,
            "model_self_fit": True,
            # the out-of-sample column: latency 0.9; bandwidth 1.1 (-inf left out)
            **_oos("latency", 0.9, 0.9, 0.9, 1),
            **_oos("bandwidth", 1.1, 1.1, 1.1, 1),
        }
    )
    assert ag == pytest.approx(
        {
            **dict(zip(KEYS, ("all_gather", "X", 8, "float32"))),
            "mesh": "auto",
            "points": 4,
            "ok": 3,
            "failed": 1,
            "noisy": 2,
            "unchecked": 1,
            "flagged": 1,
            "one_round": 0,
            "latency_floor_s": 3e-4,
            "latency_floor_ci_low_s": 2.5e-4,
            "latency_floor_ci_high_s": 3.5e-4,
            "latency_floor_from": "fit: median of its latency-bound points",
            # point 5 is flagged; lower ends from the time (+-10%): 1.6e9 / 1.1 < 1.75e9 / 1.1
            "peak_busbw_Bps": 1.75e9,
            "peak_busbw_ci_low_Bps": 1.75e9 * 4 / 4.4,
            "peak_busbw_ci_high_Bps": 1.75e9 * 4 / 3.6,
            "peak_at_V_bytes": 2**23,
            "peak_from": "noisy point",
            "peak_share_of_ceiling": 0.7,
            "bandwidth_regime": True,
            "V_max_bytes": 2**25,
            "bandwidth_bound_above_bytes": 6e5,
            "bandwidth_bound_above_ci_low_bytes": 5e5,
            "bandwidth_bound_above_ci_high_bytes": 7e5,
            "measured_over_model_median": 1.1,
            "model_self_fit": False,
            **_oos("latency", 1.0, 1.0, 1.0, 1),
            **_oos("bandwidth", 1.15, 1.1, 1.2, 2),
        }
    )
    assert bf == pytest.approx(
        {
            **dict(zip(KEYS, ("all_gather", "X", 8, "bfloat16"))),
            "mesh": "auto",
            "points": 1,
            "ok": 1,
            "failed": 0,
            "noisy": 0,
            "unchecked": 0,
            "flagged": 0,
            "one_round": 1,
            "latency_floor_s": 2e-3,
            "latency_floor_ci_low_s": None,
            "latency_floor_ci_high_s": None,
            "latency_floor_from": "smallest median measured",
            "peak_busbw_Bps": 4.375e8,
            "peak_busbw_ci_low_Bps": 4.375e8 * 2 / 2.1,
            "peak_busbw_ci_high_Bps": 4.375e8 * 2 / 1.9,
            "peak_at_V_bytes": 2**20,
            "peak_from": "steady point",
            "peak_share_of_ceiling": 0.2,
            "bandwidth_regime": False,
            "V_max_bytes": 2**20,
            "bandwidth_bound_above_bytes": None,
            "bandwidth_bound_above_ci_low_bytes": None,
            "bandwidth_bound_above_ci_high_bytes": None,
            "measured_over_model_median": None,
            "model_self_fit": False,
            # its one point is latency-bound but has no ratio: none in either regime
            **_oos("latency", None, None, None, 0),
            **_oos("bandwidth", None, None, None, 0),
        }
    )
    # a group of one: no fit row matches, a copy's time, no bus bandwidth, no regime known
    assert (one["latency_floor_s"], one["latency_floor_from"]) == (5e-6, "no communication (group of 1): a copy")
    assert one["peak_busbw_Bps"] is None and one["bandwidth_regime"] is None and one["points"] == 2


def _oos(regime, median, lo, hi, n) -> dict:
    return {
        f"out_of_sample_{regime}_median": median,
        f"out_of_sample_{regime}_min": lo,
        f"out_of_sample_{regime}_max": hi,
        f"out_of_sample_{regime}_points": n,
    }


def test_a_sweep_without_the_optional_columns_and_a_fit_without_axes():
    # no flags, caveats, intervals, cv or self-fit columns; the fits lack "axes" (filtered on the rest)
    pts = pd.DataFrame(
        {
            "op": "all_reduce",
            "axes": "X",
            "group_size": 4,
            "dtype": "float32",
            "mesh": "auto",
            "point": ["0", "1"],
            "V_bytes": [2.0**10, 2.0**20],
            "time_s": [1e-4, 1e-3],
            "busbw_Bps": [1.5e7, 1.5e9],
            "measured_over_model": [2.0, 3.0],
            "model_regime": ["latency", "latency"],
            "status": "ok",
        }
    )
    fits = pd.DataFrame([{"op": "all_reduce", "group_size": 4, "dtype": "float32", "latency_floor_s": 7e-5}])
    head = headline_table(pts, pts, fits)
    # one family: what it lacks is None in headline.json, not NaN
    raw = head.iloc[0]
    assert raw["latency_floor_ci_low_s"] is None and raw["latency_floor_ci_high_s"] is None
    assert raw["peak_busbw_ci_low_Bps"] is None and raw["peak_busbw_ci_high_Bps"] is None
    assert raw["out_of_sample_bandwidth_median"] is None and raw["out_of_sample_bandwidth_min"] is None
    assert raw["out_of_sample_bandwidth_max"] is None
    (row,) = _rows(head)
    assert (row["flagged"], row["noisy"], row["unchecked"], row["model_self_fit"]) == (0, 0, 0, False)
    assert (row["latency_floor_s"], row["latency_floor_ci_low_s"], row["latency_floor_from"]) == (
        7e-5,
        None,
        "fit: median of its latency-bound points",
    )
    # no interval anywhere: the highest value is the peak, with none
    assert (row["peak_busbw_Bps"], row["peak_busbw_ci_low_Bps"], row["peak_busbw_ci_high_Bps"]) == (1.5e9, None, None)
    # the fit has no bandwidth_regime column: unknown, not False
    assert row["bandwidth_regime"] is None and row["bandwidth_bound_above_bytes"] is None
    # no cv column: the out-of-sample spread is measured/model's own
    assert row["measured_over_model_median"] == 2.5
    assert _oos("latency", 2.5, 2.0, 3.0, 2).items() <= row.items()
    # no fits at all, and no measured/model: the smallest median, no ratio
    (bare,) = _rows(headline_table(pts, pts.drop(columns=["measured_over_model"]), pd.DataFrame()))
    assert (bare["latency_floor_s"], bare["latency_floor_ci_low_s"], bare["latency_floor_ci_high_s"]) == (
        1e-4,
        None,
        None,
    )
    assert bare["latency_floor_from"] == "smallest median measured"
    raw = headline_table(pts, pts, pd.DataFrame()).iloc[0]
    assert raw["latency_floor_ci_low_s"] is None and raw["latency_floor_ci_high_s"] is None
    assert (
        headline_table(pts, pts.drop(columns=["measured_over_model"]), pd.DataFrame()).iloc[0][
            "measured_over_model_median"
        ]
        is None
    )
    assert bare["out_of_sample_latency_points"] == 0 and bare["out_of_sample_latency_median"] is None


def test_the_sentences_of_the_four_families():
    pts = _family_points()
    ar, ag, bf, one = (r for _, r in headline_table(_summary(pts), pts, _fits()).iterrows())
    assert headline_sentence(ar) == (
        "AllReduce over Y (2 devices, float32): latency floor about 90 us (95%: 80-100 us), "
        "peak bus bandwidth 0.45 GB/s (0.409-0.55 GB/s) at 4 MiB (45% of ceiling), "
        "no bandwidth regime in range (to 4 MiB), "
        "measured/model 1.2 (self-fit; out of sample: latency-bound 0.9; bandwidth-bound 1.1) "
        "(1 failed, 1 noisy, 1 unchecked); 1 of 3 point(s) in one round: not checked for run-to-run drift"
    )
    assert headline_sentence(ag) == (
        "AllGather over X (8 devices, float32): latency floor about 300 us (95%: 250-350 us), "
        "peak bus bandwidth 1.75 GB/s (1.59-1.94 GB/s) at 8 MiB (a noisy point, picked by its interval's lower "
        "end; 70% of ceiling), bandwidth-bound above about 586 KiB (488-684 KiB), "
        "measured/model 1.1 (latency-bound 1; bandwidth-bound 1.1-1.2, median 1.1) "  # 1.15 is 1.1499...
        "(1 failed, 1 flagged, 2 noisy, 1 unchecked)"
    )
    assert headline_sentence(bf) == (
        "AllGather over X (8 devices, bfloat16): no fit (too few points), fastest median 2 ms, "
        "peak bus bandwidth 0.438 GB/s (95%: 0.417-0.461 GB/s) at 1 MiB (20% of ceiling), "
        "no bandwidth regime in range (to 1 MiB); one round: not checked for run-to-run drift"
    )
    assert headline_sentence(one) == (
        "AllGather over X (1 device, float32): no communication (group of 1): XLA runs it as a copy, "
        "5 us a step; collectives need at least two devices"
    )


def test_a_sentence_says_only_what_the_row_has():
    base = {
        "op": "all_to_all",
        "axes": "X,Y",
        "group_size": 2,
        "dtype": "int8",
        "latency_floor_from": "smallest median measured",
        "latency_floor_s": NAN,
        "peak_busbw_Bps": NAN,
        "bandwidth_bound_above_bytes": NAN,
        "bandwidth_regime": NAN,
        "measured_over_model_median": NAN,
    }
    # NaN everywhere: no time, no peak, no regime either way, no ratio
    assert headline_sentence(pd.Series(base)) == (
        "AllToAll over X,Y (2 devices, int8): no point has a time (the report lists why, under Points without a time)"
    )
    # a regime that is None or True says nothing without a crossover
    for regime in (None, True):
        assert "bandwidth regime" not in headline_sentence(pd.Series(dict(base, bandwidth_regime=regime)))
    # a self-fit without out-of-sample points: only "self-fit"
    row = dict(base, measured_over_model_median=0.5, model_self_fit=True, out_of_sample_latency_points=0)
    assert headline_sentence(pd.Series(row)).endswith(", measured/model 0.5 (self-fit)")
    # two out-of-sample points are a range; one, a value
    two = dict(row, model_self_fit=False, out_of_sample_latency_points=2)
    two.update(out_of_sample_latency_min=0.4, out_of_sample_latency_max=0.6, out_of_sample_latency_median=0.5)
    assert headline_sentence(pd.Series(two)).endswith(", measured/model 0.5 (latency-bound 0.4-0.6, median 0.5)")


def test_family_names_and_intervals_in_words():
    row = {"op": "my_op", "axes": "X", "group_size": 1, "dtype": "float32"}
    assert family_name(row) == "my_op over X (1 device, float32)"
    assert family_name(dict(row, group_size=2)) == "my_op over X (2 devices, float32)"
    # one unit for both ends only where they share it
    assert within(500e-6, 2e-3, fmt_duration) == " (500 us-2 ms)"
    assert within(1e-3, 2e-3, fmt_duration) == " (1-2 ms)"
    assert within(2**20, NAN, fmt_bytes, "95%") == " (95%: 1 MiB or more)"
    assert within(NAN, 2**20, fmt_bytes) == "" and within(None, 1.0, fmt_bandwidth) == ""
    assert within(1e9, None, fmt_bandwidth) == " (1 GB/s or more)"
    assert within(np.float64(3), np.float64(4), lambda v: f"{v:g}") == " (3-4)"
