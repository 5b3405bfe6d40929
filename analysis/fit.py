"""Fits of measured collective times: ``T = alpha + V/beta`` and the book's
``T = max(T_min * hops, c * V / W)``.

Both are small callables over DataFrames (table in, table out). The book form takes its
shape from :mod:`analysis.model`: the model evaluated with unit constants gives, per
point, the latency term per second of ``T_min`` (hops) and the bandwidth term per unit of
``1/W`` (``c * V``), so the same fit serves rings, lines, switches and every collective,
and the fitted W is directly comparable across collectives (if the book is right, they
agree).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

GROUP_KEYS = ["op", "axes", "group_size", "dtype", "mesh"]


def fit_alpha_beta(V_bytes, time_s) -> dict:
    """Least squares in relative error of ``T = alpha + V/beta`` (alpha, 1/beta >= 0).

    Relative error, because the points span five decades of time: plain least squares
    would fit only the largest messages.
    """
    V, T = np.asarray(V_bytes, float), np.asarray(time_s, float)
    A = np.column_stack([1 / T, V / T])
    coef = np.linalg.lstsq(A, np.ones_like(T), rcond=None)[0]
    if coef[0] < 0:  # no latency signal: fit a pure bandwidth line through the origin
        coef = np.array([0.0, np.sum(V / T) / np.sum((V / T) ** 2)])
    elif coef[1] < 0:  # no bandwidth signal
        coef = np.array([np.sum(1 / T) / np.sum((1 / T) ** 2), 0.0])
    alpha, inv_beta = float(coef[0]), float(coef[1])
    pred = alpha + V * inv_beta
    rel = pred / T - 1
    return {"alpha_s": alpha, "beta_Bps": (1 / inv_beta) if inv_beta > 0 else math.inf,
            "rel_rmse": float(np.sqrt(np.mean(rel**2))), "residuals": rel.tolist()}


def fit_max_model(time_s, latency_unit, bandwidth_unit) -> dict:
    """Fit ``T = max(T_min * L, B / W)`` where L = hops and B = c*V per point.

    Exact search over where the regime switches: for each split of the points (sorted by
    B) into a latency-bound head and a bandwidth-bound tail, the best T_min and W in log
    space are geometric means; the split with the smallest log error of the full max()
    model wins.
    """
    T, L, B = (np.asarray(a, float) for a in (time_s, latency_unit, bandwidth_unit))
    order = np.argsort(B)
    T, L, B = T[order], L[order], B[order]
    logT = np.log(T)
    best = None
    for k in range(len(T) + 1):
        t_min = math.exp(np.mean(logT[:k] - np.log(L[:k]))) if k else 0.0
        W = math.exp(np.mean(np.log(B[k:]) - logT[k:])) if k < len(T) else math.inf
        pred = np.maximum(t_min * L, B / W)
        err = float(np.sum((np.log(pred) - logT) ** 2)) if np.all(pred > 0) else math.inf
        if best is None or err < best[0]:
            best = (err, t_min, W, pred)
    _, t_min, W, pred = best
    rel = np.empty_like(T)
    rel[order] = pred / T - 1
    return {"T_min_s": t_min, "W_Bps": W, "rel_rmse": float(np.sqrt(np.mean(rel**2))),
            "residuals": rel.tolist()}


def fit_table(points: pd.DataFrame) -> pd.DataFrame:
    """One row of fitted constants per experiment family (:data:`GROUP_KEYS`).

    ``points`` needs ``V_bytes, time_s, latency_unit, bandwidth_unit`` (from
    :func:`analysis.predictions.unit_terms`) for the ok target rows of a sweep.
    """
    rows = []
    for key, g in points.groupby(GROUP_KEYS, dropna=False, sort=True):
        g = g.dropna(subset=["V_bytes", "time_s"])
        if len(g) < 2:
            continue
        ab = fit_alpha_beta(g["V_bytes"], g["time_s"])
        row = dict(zip(GROUP_KEYS, key), n_points=len(g), V_min_bytes=g["V_bytes"].min(),
                   V_max_bytes=g["V_bytes"].max(), alpha_s=ab["alpha_s"], beta_Bps=ab["beta_Bps"],
                   alpha_beta_rel_rmse=ab["rel_rmse"])
        if g[["latency_unit", "bandwidth_unit"]].notna().all().all():
            mm = fit_max_model(g["time_s"], g["latency_unit"], g["bandwidth_unit"])
            # bandwidth term per byte is constant for a family, so the crossover V solves
            # T_min * L = (B/V) * V / W.
            b_per_byte = float((g["bandwidth_unit"] / g["V_bytes"]).median())
            hops = float(g["latency_unit"].median())
            row.update(T_min_s=mm["T_min_s"], W_Bps=mm["W_Bps"], book_rel_rmse=mm["rel_rmse"],
                       hops=hops, crossover_bytes=mm["T_min_s"] * hops * mm["W_Bps"] / b_per_byte
                       if math.isfinite(mm["W_Bps"]) else math.inf)
        rows.append(row)
    return pd.DataFrame(rows)
