"""Fits of measured collective times: ``T = alpha + V/beta`` and the book's
``T = max(T_min * hops, c * V / W)``, with bootstrap intervals.

Both take their shape from :mod:`analysis.book`: the model evaluated with unit constants gives,
per point, the latency term per second of ``T_min`` (hops) and the bandwidth term per unit of
``1/W`` (``c * V``), so the same fit serves rings, lines, switches and every collective, and
the fitted W is directly comparable across collectives (if the book is right, they agree).

One function fits a family (:func:`fit_family`): the report's fit table, the headline and
``python -m analysis calibrate`` all call it. Every step runs on a batch of rows at once (the
medians; each bootstrap replicate; each leave-one-size-out refit), so the intervals and the
cross-validation repeat the whole procedure, regime selection included.
"""

from __future__ import annotations

import math
import warnings
import zlib
from typing import NamedTuple

import numpy as np
import pandas as pd

from analysis.statistics.resample import replicate_times
from analysis.statistics.stats import CONFIDENCE, percentile_interval

GROUP_KEYS = ["op", "axes", "group_size", "dtype", "mesh"]
MIN_POINTS = 3  # fewer points than this are not fitted: two points fit any two-parameter model
REGIME_JUMP = 1.5  # a point moving its bytes this much faster than the largest messages is in another regime
LARGEST = 3  # the largest messages' bandwidth: the median over this many of the largest points
# A sweep has a bandwidth regime when a point the fit calls bandwidth-bound takes this many times
# its latency term: beyond the +-25% a noisy point may drift, so a sweep that stops at 4 KiB has none
BANDWIDTH_REGIME = 1.5
CLEARLY_BANDWIDTH = 2.0  # the large messages' reference bandwidth comes from points this far above the floor
BOOTSTRAP = 1000  # replicates behind each interval
SEED = 0  # the bootstrap's seed (fit.json records it): the same files give the same intervals


def _alpha_beta_rows(V, T, keep):
    """Least squares in relative error of ``T = alpha + V/beta`` per row of ``T`` over its
    ``keep`` points, with alpha and 1/beta >= 0: (alpha, 1/beta), arrays of rows."""
    scale = float(np.max(V))  # V spans five decades: scaled, the normal equations stay well conditioned
    x1, x2 = np.where(keep, 1 / T, 0.0), np.where(keep, (V / scale) / T, 0.0)
    s11, s12, s22 = (x1 * x1).sum(1), (x1 * x2).sum(1), (x2 * x2).sum(1)
    r1, r2 = x1.sum(1), x2.sum(1)
    det = s11 * s22 - s12 * s12
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(det > 0, (s22 * r1 - s12 * r2) / det, -1.0)
        b = np.where(det > 0, (s11 * r2 - s12 * r1) / det, -1.0)
        # no latency signal: a pure bandwidth line through the origin; no bandwidth signal: a constant
        no_lat, no_bw = a < 0, (a >= 0) & (b < 0)
        a, b = np.where(no_lat, 0.0, np.where(no_bw, r1 / s11, a)), np.where(no_lat, r2 / s22, np.where(no_bw, 0.0, b))
    return a, b / scale


def fit_alpha_beta(V_bytes, time_s) -> dict:
    """Least squares in relative error of ``T = alpha + V/beta`` (alpha, 1/beta >= 0).

    Relative error, because the points span five decades of time: plain least squares
    would fit only the largest messages.
    """
    V, T = np.asarray(V_bytes, float), np.asarray(time_s, float)
    a, ib = (float(x[0]) for x in _alpha_beta_rows(V, T[None, :], np.ones((1, V.size), bool)))
    rel = (a + V * ib) / T - 1
    return {
        "alpha_s": a,
        "beta_Bps": (1 / ib) if ib > 0 else math.inf,
        "rel_rmse": float(np.sqrt(np.mean(rel**2))),
        "residuals": rel.tolist(),
    }


def _max_model_rows(T, L, B, keep):
    """``T = max(T_min * L, B / W)`` per row over its ``keep`` points: (T_min, W) arrays.

    Exact search over where the regime switches: for each split of the points (sorted by B,
    between distinct values of B) into a latency-bound head and a bandwidth-bound tail, the
    best T_min and W in log space are geometric means; the split with the smallest log error of
    the full max() model wins. Points on the corner fit either regime equally: among equal
    errors no latency term or no bandwidth term at all is preferred over one fitted to a single
    corner point, so pure latency data gives no W (not a W from its largest point) and pure
    bandwidth data T_min 0.
    """
    order = np.argsort(B, kind="stable")
    L, B, T, keep = L[order], B[order], T[:, order], keep[:, order]
    n = T.shape[1]
    splits = np.concatenate([[0], np.flatnonzero(B[1:] != B[:-1]) + 1, [n]])
    logT, k = np.log(T), keep.astype(float)
    zero = np.zeros((T.shape[0], 1))
    head = np.concatenate([zero, np.cumsum(np.where(keep, logT - np.log(L), 0), 1)], 1)[:, splits]
    head_n = np.concatenate([zero, np.cumsum(k, 1)], 1)[:, splits]
    tail_terms = np.where(keep, np.log(B) - logT, 0)
    tail = tail_terms.sum(1, keepdims=True) - np.concatenate([zero, np.cumsum(tail_terms, 1)], 1)[:, splits]
    tail_n = k.sum(1, keepdims=True) - head_n
    with np.errstate(divide="ignore", invalid="ignore"):
        t_min = np.where(head_n > 0, np.exp(head / np.maximum(head_n, 1)), 0.0)  # (rows, splits)
        W = np.where(tail_n > 0, np.exp(tail / np.maximum(tail_n, 1)), np.inf)
        err = np.empty_like(t_min)
        step = max(1, 2_000_000 // (len(splits) * n))  # rows at a time: (rows, splits, points) stays small
        for a in range(0, T.shape[0], step):
            pred = np.maximum(t_min[a : a + step, :, None] * L, B / W[a : a + step, :, None])
            sq = (np.log(pred) - logT[a : a + step, None, :]) ** 2
            err[a : a + step] = np.where(keep[a : a + step, None, :], sq, 0).sum(2)
    least = err.min(1, keepdims=True)
    tied = err <= least * (1 + 1e-9) + 1e-300
    last = len(splits) - 1
    pick = np.where(tied[:, last], last, np.where(tied[:, 0], 0, np.argmax(tied, 1)))
    rows = np.arange(T.shape[0])
    return t_min[rows, pick], W[rows, pick]


def fit_max_model(time_s, latency_unit, bandwidth_unit) -> dict:
    """Fit ``T = max(T_min * L, B / W)`` where L = hops and B = c*V per point (see
    :func:`_max_model_rows`; :func:`fit_family` adds regime selection and intervals)."""
    T, L, B = (np.asarray(a, float) for a in (time_s, latency_unit, bandwidth_unit))
    t_min, W = (float(x[0]) for x in _max_model_rows(T[None, :], L, B, np.ones((1, T.size), bool)))
    rel = np.maximum(t_min * L, B / W) / T - 1
    return {"T_min_s": t_min, "W_Bps": W, "rel_rmse": float(np.sqrt(np.mean(rel**2))), "residuals": rel.tolist()}


def _nanmedian(x):
    """Row medians ignoring NaN; NaN (quietly) for a row with none."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(x, 1)


def _ranked(V, mask, largest: bool):
    """Each row's points of ``mask`` among the :data:`LARGEST` (3) largest (or smallest) V."""
    order = np.argsort(V, kind="stable")[::-1] if largest else np.argsort(V, kind="stable")
    rank = np.empty_like(mask, dtype=int)
    rank[:, order] = np.cumsum(mask[:, order], 1)
    return mask & (rank <= LARGEST)


def regime_keep(V, L, B, T, mask):
    """The points of each row that the book's single W can describe, and each point's
    effective bandwidth over the reference.

    The rule: the book's max() says no point moves its bytes faster than W (``c*V / T <= W``),
    and W is what the largest messages see. The reference is the median effective bandwidth
    ``c*V / T`` of the :data:`LARGEST` (3) largest points that are clearly bandwidth-bound
    (at least :data:`CLEARLY_BANDWIDTH` (2x) the smallest sizes' latency: the median of T/hops
    over the 3 smallest points, times the point's hops; a latency-bound point's c*V/T says
    nothing about W). Any point more than :data:`REGIME_JUMP` (1.5x) faster than the reference
    is in another regime (a cache edge) and left out; slower points stay (latency adds to their
    time). One pass, no jumps between neighbours: a flagged or stalled point moves the
    reference only through a median of three, so no single point decides which side of the
    sweep is dropped. Without a clearly bandwidth-bound point nothing is left out, nor when
    fewer than :data:`MIN_POINTS` would be left.
    """
    w = B / T
    floor = _nanmedian(np.where(_ranked(V, mask, largest=False), T / L, np.nan))
    clear = mask & (T >= CLEARLY_BANDWIDTH * floor[:, None] * L)
    ref = _nanmedian(np.where(_ranked(V, clear, largest=True), w, np.nan))
    ratio = w / ref[:, None]
    keep = mask & ~(ratio > REGIME_JUMP)
    keep = np.where((keep.sum(1) < MIN_POINTS)[:, None], mask, keep)
    return keep, ratio


def _fit_rows(V, L, B, T, mask, has_units: bool) -> dict:
    """The whole procedure on each row of ``T`` (medians, replicates, or refits without a point):
    regime selection, both fits, whether there is a bandwidth regime, and the latency floor.

    A bandwidth regime needs a point that the fit calls bandwidth-bound taking at least
    :data:`BANDWIDTH_REGIME` (1.5x) its latency term: a time that grew with V, not noise around a
    floor (a sweep that stops at 4 KiB has none, whatever split fits its noise best). Without
    one, W is infinite (none) and T_min the geometric mean of every point's T/hops."""
    keep, ratio = regime_keep(V, L, B if has_units else V, T, mask)
    alpha, inv_beta = _alpha_beta_rows(V, T, keep)
    out = {"keep": keep, "ratio": ratio, "alpha_s": alpha, "inv_beta": inv_beta}
    if not has_units:
        return out
    t_min, W = _max_model_rows(T, L, B, keep)
    lat = t_min[:, None] * L
    with np.errstate(divide="ignore", invalid="ignore"):
        bw_bound = keep & (B / W[:, None] > lat)
        regime = (bw_bound & (T >= BANDWIDTH_REGIME * lat)).any(1)
        all_lat = np.exp(np.where(keep, np.log(T / L), 0).sum(1) / np.maximum(keep.sum(1), 1))
        t_min, W = np.where(regime, t_min, all_lat), np.where(regime, W, np.inf)
        latency_bound = keep & (t_min[:, None] * L >= B / W[:, None])
    # the floor a reader compares with the small points: the median of the latency-bound
    # points' times (T_min is their geometric mean, which points near the corner pull up)
    floor = _nanmedian(np.where(latency_bound, T / L, np.nan))
    hops, per_byte = float(np.median(L)), float(np.median(B / V))
    out.update(T_min_s=t_min, W_Bps=W, regime=regime, floor=floor * hops, hops=hops, per_byte=per_byte)
    out["crossover_bytes"] = np.where(regime, t_min * hops * W / per_byte, np.inf)
    return out


def _seed(seed: int, key) -> int:
    """A family's own seed, so that adding a family to a sweep leaves the others' intervals alone."""
    keys = key if isinstance(key, tuple) else (key,)
    return (int(seed) + zlib.crc32("|".join(map(str, keys)).encode())) % 2**32  # (str: the same across numpy versions)


class FamilyFit(NamedTuple):
    """:func:`fit_family`'s answer: the fit table's row, the left-out points (index, reason),
    and each point's leave-one-size-out prediction (``cv_model_time_s``, NaN where none)."""

    row: dict
    left: list
    cv_model_time_s: pd.Series


def fit_family(
    g: pd.DataFrame, rounds: dict | None = None, seed: int = SEED, n_boot: int = BOOTSTRAP, key=()
) -> FamilyFit:
    """Fit one family's unflagged points (``V_bytes, time_s, latency_unit, bandwidth_unit``),
    with 95% bootstrap intervals for every constant and a leave-one-size-out prediction per point.

    Intervals: each replicate redraws every point's median from its rounds and their samples
    (``rounds``: point -> the chosen estimator's samples per round,
    :func:`analysis.statistics.resample.rounds_by_point`; a point without them is drawn from its
    own interval) and repeats the whole fit, regime
    selection included; seeded from ``seed`` and the family ``key``. Without a bandwidth regime
    (no bandwidth-bound point taking 1.5x its latency term) W is None and the crossover too.
    """
    V, T0 = g["V_bytes"].to_numpy(float), g["time_s"].to_numpy(float)
    n = len(g)
    row = {"n_points": n, "V_min_bytes": V.min() if n else None, "V_max_bytes": V.max() if n else None}
    cv = pd.Series(np.nan, index=g.index, name="cv_model_time_s")
    if n < MIN_POINTS:
        return FamilyFit(dict(row, note=f"too few points ({n}; a fit needs {MIN_POINTS})"), [], cv)
    has_units = bool(g[["latency_unit", "bandwidth_unit"]].notna().all().all()) if "latency_unit" in g else False
    L = g["latency_unit"].to_numpy(float) if has_units else np.ones(n)
    B = g["bandwidth_unit"].to_numpy(float) if has_units else V
    est = _fit_rows(V, L, B, T0[None, :], np.ones((1, n), bool), has_units)
    keep = est["keep"][0]
    left = [
        (i, f"another bandwidth regime: {r:.2f}x the effective bandwidth of the largest messages (a cache edge)")
        for i, r, k in zip(g.index, est["ratio"][0], keep)
        if not k
    ]
    row.update(n_points=int(keep.sum()), V_min_bytes=V[keep].min(), V_max_bytes=V[keep].max())
    draws, how = replicate_times(g, rounds, n_boot, np.random.default_rng(_seed(seed, key)))
    boot = _fit_rows(V, L, B, draws, np.ones_like(draws, bool), has_units) if draws is not None else {}
    row.update(bootstrap_replicates=n_boot if boot else 0, bootstrap_seed=int(seed), resampled=how)

    rel = (est["alpha_s"][0] + V * est["inv_beta"][0]) / T0 - 1
    _interval(row, "alpha", "s", est["alpha_s"][0], boot.get("alpha_s"))
    with np.errstate(divide="ignore"):
        _interval(row, "beta", "Bps", 1 / est["inv_beta"][0], 1 / boot["inv_beta"] if boot else None)
    row.update(alpha_beta_rel_rmse=float(np.sqrt(np.mean(rel[keep] ** 2))), note="")
    if has_units:
        t_min, W = est["T_min_s"][0], est["W_Bps"][0]
        rel = np.maximum(t_min * L, B / W) / T0 - 1
        row.update(book_rel_rmse=float(np.sqrt(np.mean(rel[keep] ** 2))), hops=est["hops"])
        row.update(
            bandwidth_regime=bool(est["regime"][0]),
            bandwidth_regime_share=float(boot["regime"].mean()) if boot else None,
        )
        _interval(row, "T_min", "s", t_min, boot.get("T_min_s"))
        _interval(row, "latency_floor", "s", est["floor"][0], boot.get("floor"))
        _interval(row, "W", "Bps", W, boot.get("W_Bps"))
        _interval(row, "crossover", "bytes", est["crossover_bytes"][0], boot.get("crossover_bytes"))
        if not est["regime"][0]:
            row["note"] = (
                f"no bandwidth regime in range: every point latency-bound (none takes {BANDWIDTH_REGIME:g}x "
                "the latency term)"
            )
        # leave each size out in turn (every point of it: repeats of a size are no test), refit,
        # and predict that size's points from the fit that never saw them
        sizes, which = np.unique(V, return_inverse=True)
        others = V[None, :] != sizes[:, None]
        loo = _fit_rows(V, L, B, np.tile(T0, (len(sizes), 1)), others, has_units)
        enough = (others.sum(1) >= MIN_POINTS)[which]
        cv[:] = np.where(enough, np.maximum(loo["T_min_s"][which] * L, B / loo["W_Bps"][which]), np.nan)
    return FamilyFit(row, left, cv)


def _interval(row: dict, name: str, unit: str, value: float, boot) -> None:
    """``name_unit`` and its 95% bootstrap interval ``name_ci_low_unit, name_ci_high_unit``
    into ``row``: None for an infinite or undefined value, for an unbounded side, and for no
    replicates (``boot`` None)."""
    value = float(value)
    lo, hi = percentile_interval(boot, value, CONFIDENCE) if boot is not None else (math.nan, math.nan)
    ok = math.isfinite(value)
    row[f"{name}_{unit}"] = value if ok else None
    row[f"{name}_ci_low_{unit}"] = lo if ok and math.isfinite(lo) else None
    row[f"{name}_ci_high_{unit}"] = hi if ok and math.isfinite(hi) else None


class Fits(NamedTuple):
    """:func:`fit_points`' answer: one row per family, the left-out points, and every point's
    leave-one-size-out prediction (aligned with the points given)."""

    fits: pd.DataFrame
    left_out: pd.DataFrame
    cv_model_time_s: pd.Series


def fit_points(
    points: pd.DataFrame, rounds: dict | None = None, seed: int = SEED, n_boot: int = BOOTSTRAP, by=GROUP_KEYS
) -> Fits:
    """:func:`fit_family` per family (``by``, default :data:`GROUP_KEYS`).

    ``points`` needs ``V_bytes, time_s, latency_unit, bandwidth_unit`` (from
    :func:`analysis.predictions.unit_terms`) and ``flags`` for the ok target rows of a sweep.
    Flagged points (above their ceiling, page-faulting) are left out first, then points in
    another bandwidth regime (:func:`regime_keep`); a family with fewer than :data:`MIN_POINTS`
    left gets no constants ("too few points"). Errors are reported as measured.
    """
    rows, left = [], []
    original, points = points.index, points.reset_index(drop=True)  # (concatenated tables repeat labels)
    cv = pd.Series(np.nan, index=points.index, name="cv_model_time_s")
    for key, g in points.groupby(by, dropna=False, sort=True):
        fam = dict(zip(by, key))
        g = g.dropna(subset=["V_bytes", "time_s"])
        flagged = g["flags"].fillna("").astype(str).ne("") if "flags" in g else pd.Series(False, index=g.index)
        left += [dict(fam, point=r.point, V_bytes=r.V_bytes, reason=r.flags) for r in g[flagged].itertuples()]
        g = g[~flagged]
        fit = fit_family(g, rounds, seed, n_boot, key)
        left += [
            dict(fam, point=g.at[i, "point"] if "point" in g else None, V_bytes=g.at[i, "V_bytes"], reason=why)
            for i, why in fit.left
        ]
        cv[fit.cv_model_time_s.index] = fit.cv_model_time_s
        rows.append(dict(fam, **fit.row))
    left_out = pd.DataFrame(left, columns=[*by, "point", "V_bytes", "reason"])
    return Fits(pd.DataFrame(rows), left_out, cv.set_axis(original))


def fit_table(points: pd.DataFrame, rounds: dict | None = None, seed: int = SEED) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row of fitted constants per family and every point left out of its
    family's fit with the reason (:func:`fit_points` without the cross-validation)."""
    fits = fit_points(points, rounds, seed)
    return fits.fits, fits.left_out
