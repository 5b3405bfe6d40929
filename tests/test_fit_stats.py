"""The fits recover constants they were given; the median CI behaves like one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.fit import fit_alpha_beta, fit_max_model, fit_table
from analysis.stats import median_ci, summarize


def test_alpha_beta_recovers_known_constants_from_noisy_points():
    rng = np.random.default_rng(0)
    V = np.geomspace(1e3, 1e8, 20)
    alpha, beta = 25e-6, 3e9
    T = (alpha + V / beta) * rng.lognormal(0, 0.02, V.size)
    fit = fit_alpha_beta(V, T)
    assert fit["alpha_s"] == pytest.approx(alpha, rel=0.05)
    assert fit["beta_Bps"] == pytest.approx(beta, rel=0.05)
    assert fit["rel_rmse"] < 0.05 and len(fit["residuals"]) == V.size


def test_max_model_recovers_T_min_and_W_and_the_crossover():
    # AllGather on an 8-ring: hops = 8/2 = 4, bandwidth term = V/W. With T_min = 10 us and
    # W = 1e9 B/s the regimes meet at V = 4 * 10e-6 * 1e9 = 40 kB.
    V = np.geomspace(1e3, 1e7, 25)
    hops = np.full(V.size, 4.0)
    T = np.maximum(10e-6 * hops, V / 1e9)
    fit = fit_max_model(T, hops, V)
    assert fit["T_min_s"] == pytest.approx(10e-6, rel=1e-6)
    assert fit["W_Bps"] == pytest.approx(1e9, rel=1e-6)
    assert fit["rel_rmse"] < 1e-9


def test_fit_table_makes_one_row_per_family():
    V = np.geomspace(1e3, 1e7, 10)
    rows = []
    for op, c in (("all_gather", 1.0), ("all_reduce", 2.0)):
        T = np.maximum(4e-5, c * V / 2e9)
        rows.append(
            pd.DataFrame(
                {
                    "op": op,
                    "axes": "X",
                    "group_size": 8,
                    "dtype": "float32",
                    "mesh": "auto",
                    "V_bytes": V,
                    "time_s": T,
                    "latency_unit": 4.0 * c,
                    "bandwidth_unit": c * V,
                }
            )
        )
    fits, left_out = fit_table(pd.concat(rows))
    assert left_out.empty
    assert list(fits["op"]) == ["all_gather", "all_reduce"]
    # the factor c is the model's, so both families give the same W: the book's claim holds here
    assert fits["W_Bps"].to_numpy() == pytest.approx([2e9, 2e9], rel=1e-6)
    assert fits["T_min_s"].to_numpy() == pytest.approx([1e-5, 5e-6], rel=1e-6)


def _family(V, T, flags=None, L=4.0):
    n = len(V)
    return pd.DataFrame(
        {
            "op": "all_gather",
            "axes": "X",
            "group_size": 8,
            "dtype": "float32",
            "mesh": "auto",
            "job": [f"{i:03d}" for i in range(n)],
            "V_bytes": V,
            "time_s": T,
            "latency_unit": L,
            "bandwidth_unit": V,
            "flags": flags if flags is not None else [""] * n,
        }
    )


def test_fit_table_leaves_out_flagged_points_and_a_cache_edge_and_says_why():
    # T = max(1e-5 s * 4 hops, V / W): W = 4e9 below 4 MiB (in cache), 1e9 from 4 MiB up;
    # the 256 MiB point is flagged above its ceiling.
    V = 4096.0 * 4.0 ** np.arange(9)  # 4 KiB .. 256 MiB
    T = np.maximum(4e-5, V / np.where(V < 4 * 2**20, 4e9, 1e9))
    fits, left = fit_table(_family(V, T, [""] * 8 + ["above_ceiling"]))
    row = fits.iloc[0]
    # left out: the flagged point; the in-cache 256 KiB and 1 MiB (4.00x the large messages'
    # bandwidth); then, refitted, 64 KiB, whose 4e-5 s is 1.64x faster than 1e9 B/s allows
    assert list(zip(left["job"], left["reason"].str[:35])) == [
        ("008", "above_ceiling"),
        ("003", "another bandwidth regime: 4.00x the"),
        ("004", "another bandwidth regime: 4.00x the"),
        ("002", "another bandwidth regime: 1.64x the"),
    ]
    assert (row["n_points"], row["V_min_bytes"], row["V_max_bytes"]) == (5, 4096, 64 * 2**20)
    assert row["W_Bps"] == pytest.approx(1e9, rel=1e-6) and row["T_min_s"] == pytest.approx(1e-5, rel=1e-6)
    assert row["hops"] == 4 and row["crossover_bytes"] == pytest.approx(4e4, rel=1e-6)  # 1e-5 * 4 * 1e9
    assert row["note"] == ""


def test_fit_table_fits_three_points_and_not_two():
    V = np.array([1e3, 1e6, 1e8])
    T = np.maximum(4e-5, V / 1e9)
    three, _ = fit_table(_family(V, T))
    assert three.iloc[0]["n_points"] == 3 and three.iloc[0]["W_Bps"] == pytest.approx(1e9, rel=1e-6)
    two, _ = fit_table(_family(V, T, ["", "", "above_ceiling"]))
    row = two.iloc[0]
    assert (row["n_points"], row["V_min_bytes"], row["V_max_bytes"]) == (2, 1e3, 1e6)
    assert row["note"] == "too few points (2; a fit needs 3)" and "W_Bps" not in two


def test_median_ci_covers_the_median_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(400):
        x = rng.lognormal(0, 0.5, 60)  # true median 1.0, skewed like timings
        lo, hi = median_ci(x)
        hits += lo <= 1.0 <= hi
    assert 0.9 <= hits / 400 <= 0.99


def test_summarize_reports_the_fields_result_json_promises():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median_s"] == 3.0 and s["n"] == 5 and s["p10_s"] < s["median_s"] < s["p90_s"]
    assert s["ci_low_s"] <= 3.0 <= s["ci_high_s"] and s["cv"] > 1
