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
