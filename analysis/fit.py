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
    return {
        "alpha_s": alpha,
        "beta_Bps": (1 / inv_beta) if inv_beta > 0 else math.inf,
        "rel_rmse": float(np.sqrt(np.mean(rel**2))),
        "residuals": rel.tolist(),
    }


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
    fits = []
    for k in range(len(T) + 1):
        t_min = math.exp(np.mean(logT[:k] - np.log(L[:k]))) if k else 0.0
        W = math.exp(np.mean(np.log(B[k:]) - logT[k:])) if k < len(T) else math.inf
        pred = np.maximum(t_min * L, B / W)
        err = float(np.sum((np.log(pred) - logT) ** 2)) if np.all(pred > 0) else math.inf
        fits.append((err, t_min, W, pred))
    # Points on the corner fit either regime equally: among equal errors prefer no latency
    # term or no bandwidth term at all over one fitted to a single corner point, so pure
    # latency data gives no W (not a W from its largest point) and pure bandwidth data T_min 0.
    least = min(f[0] for f in fits)
    tied = [k for k, f in enumerate(fits) if f[0] <= least * (1 + 1e-9) + 1e-300]
    pick = len(T) if len(T) in tied else 0 if 0 in tied else tied[0]
    _, t_min, W, pred = fits[pick]
    rel = np.empty_like(T)
    rel[order] = pred / T - 1
    return {"T_min_s": t_min, "W_Bps": W, "rel_rmse": float(np.sqrt(np.mean(rel**2))), "residuals": rel.tolist()}


MIN_POINTS = 3  # fewer points than this are not fitted: two points fit any two-parameter model
REGIME_JUMP = 1.5  # a bandwidth that changes this much between neighbouring sizes is a new regime


def regime_break(V, time_s, bandwidth_unit, latency_unit, T_min: float, W: float) -> tuple[np.ndarray, str] | None:
    """Points of a family to leave out because they sit in another bandwidth regime (a cache
    edge): among the bandwidth-bound points in order of V, the largest jump of the effective
    bandwidth (c*V / T) between neighbours, if it exceeds :data:`REGIME_JUMP`, splits them;
    the larger messages' side is kept (what large messages see). Returns (a boolean mask of
    the points to leave out, why) or None."""
    V, T, B, L = (np.asarray(a, float) for a in (V, time_s, bandwidth_unit, latency_unit))
    bw_bound = np.isfinite(W) & (B / W > T_min * L) if math.isfinite(W) else np.zeros(len(V), bool)
    idx = np.where(bw_bound)[0]
    idx = idx[np.argsort(V[idx])]
    if len(idx) < 3:
        return None
    w = B[idx] / T[idx]
    jumps = w[1:] / w[:-1]
    j = int(np.argmax(np.maximum(jumps, 1 / jumps)))
    if max(jumps[j], 1 / jumps[j]) < REGIME_JUMP:
        return None
    small, large = idx[: j + 1], idx[j + 1 :]
    drop = small if len(large) >= 2 else large
    kept_w = float(np.median(B[large] / T[large] if len(large) >= 2 else B[small] / T[small]))
    drop_w = float(np.median(B[drop] / T[drop]))
    mask = np.zeros(len(V), bool)
    mask[drop] = True
    side = "smaller" if drop is small else "larger"
    return mask, (
        f"another bandwidth regime: {drop_w / kept_w:.2f}x the effective bandwidth of the "
        f"{'larger' if side == 'smaller' else 'smaller'} messages (a cache edge)"
    )


def fit_table(points: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row of fitted constants per experiment family (:data:`GROUP_KEYS`), and every
    point left out of its family's fit with the reason.

    ``points`` needs ``V_bytes, time_s, latency_unit, bandwidth_unit`` (from
    :func:`analysis.predictions.unit_terms`) and ``flags`` for the ok target rows of a sweep.
    Flagged points (above their ceiling, page-faulting) are left out, then points in another
    bandwidth regime (:func:`regime_break`); a family with fewer than :data:`MIN_POINTS` left
    gets no constants ("too few points"). Errors are reported as measured.
    """
    rows, left = [], []
    for key, g in points.groupby(GROUP_KEYS, dropna=False, sort=True):
        fam = dict(zip(GROUP_KEYS, key))
        g = g.dropna(subset=["V_bytes", "time_s"])
        flagged = g["flags"].fillna("").astype(str).ne("") if "flags" in g else pd.Series(False, index=g.index)
        left += [dict(fam, job=r.job, V_bytes=r.V_bytes, reason=r.flags) for r in g[flagged].itertuples()]
        g = g[~flagged]
        row = dict(
            fam,
            n_points=len(g),
            V_min_bytes=g["V_bytes"].min() if len(g) else None,
            V_max_bytes=g["V_bytes"].max() if len(g) else None,
        )
        if len(g) < MIN_POINTS:
            rows.append(dict(row, note=f"too few points ({len(g)}; a fit needs {MIN_POINTS})"))
            continue
        has_units = g[["latency_unit", "bandwidth_unit"]].notna().all().all()
        for _ in range(3 if has_units else 0):  # a refit can show more of the other regime
            mm = fit_max_model(g["time_s"], g["latency_unit"], g["bandwidth_unit"])
            brk = regime_break(
                g["V_bytes"], g["time_s"], g["bandwidth_unit"], g["latency_unit"], mm["T_min_s"], mm["W_Bps"]
            )
            if brk is None or (~brk[0]).sum() < MIN_POINTS:
                break
            mask, why = brk
            left += [dict(fam, job=r.job, V_bytes=r.V_bytes, reason=why) for r in g[mask].itertuples()]
            g = g[~mask]
            row.update(n_points=len(g), V_min_bytes=g["V_bytes"].min(), V_max_bytes=g["V_bytes"].max())
        ab = fit_alpha_beta(g["V_bytes"], g["time_s"])
        row.update(
            alpha_s=ab["alpha_s"],
            beta_Bps=ab["beta_Bps"] if math.isfinite(ab["beta_Bps"]) else None,
            alpha_beta_rel_rmse=ab["rel_rmse"],
            note="",
        )
        if has_units:
            mm = fit_max_model(g["time_s"], g["latency_unit"], g["bandwidth_unit"])
            # bandwidth term per byte is constant for a family, so the crossover V solves
            # T_min * L = (B/V) * V / W.
            b_per_byte = float((g["bandwidth_unit"] / g["V_bytes"]).median())
            hops = float(g["latency_unit"].median())
            finite_W = math.isfinite(mm["W_Bps"])
            row.update(
                T_min_s=mm["T_min_s"],
                W_Bps=mm["W_Bps"] if finite_W else None,
                book_rel_rmse=mm["rel_rmse"],
                hops=hops,
                crossover_bytes=mm["T_min_s"] * hops * mm["W_Bps"] / b_per_byte if finite_W else None,
            )
            if not finite_W:
                row["note"] = "every point latency-bound: no bandwidth to fit"
        rows.append(row)
    left_out = pd.DataFrame(left, columns=[*GROUP_KEYS, "job", "V_bytes", "reason"])
    return pd.DataFrame(rows), left_out
