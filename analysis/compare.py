"""Comparing sweeps that share points: small functions over DataFrames.

A sweep's points (:attr:`analysis.sweep.Sweep.points`) carry a ``sweep`` label. An
point is identified by :data:`IDENTITY_KEYS` plus those :data:`SETTING_KEYS` the sweeps
do not differ in; a setting that is constant within each sweep and differs between them (the
dtype of a float32 sweep against a bfloat16 one, the mesh of x8 against xy_4x2) is what the
comparison is about, so it is left out of the match. Ratios are ``sweep / reference``, the
reference being the first sweep.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.runs.record import Result
from analysis.runs.rundir import point_dirs
from analysis.sweep import load_sweep


def stack_sweeps(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The rows of every sweep's table in one table (``pd.concat``), a column's dtype set by the
    sweeps that have values in it.

    A column can be empty in one sweep and measured in another (``device_time_s`` of a CPU sweep
    against a GPU one, ``W_Bps`` of a family with no bandwidth regime). Plain ``pd.concat`` lets
    the empty side's object dtype win from pandas 3 on (2.2 warns), which turns numbers into
    objects; so a column is dropped from a frame where it is all NA before the concat, and comes
    back as NaN in the original column order.
    """
    columns = list(dict.fromkeys(c for f in frames for c in f.columns))
    kept = [f.loc[:, f.notna().any()] if len(f) else f.iloc[:, :0] for f in frames]
    return pd.concat(kept, ignore_index=True).reindex(columns=columns)


class CompareError(Exception):
    """Input the comparison cannot use; the message is the one line the user sees."""


IDENTITY_KEYS = ["op", "size_bytes"]
SETTING_KEYS = ["axes", "mesh", "axis_sizes", "dtype"]
FIT_VALUES = {
    "W_Bps": "W (B/s)",
    "T_min_s": "T_min (s)",
    "book_rel_rmse": "book rel. RMSE",
    "alpha_s": "α (s)",
    "beta_Bps": "β (B/s)",
}


def flatten_config(cfg: Any, prefix: str = "") -> dict[str, str]:
    """``{"op": {"name": "all_gather"}}`` -> ``{"op.name": "all_gather"}``; lists and scalars
    become their JSON text, so values compare and print the same way."""
    if isinstance(cfg, dict) and cfg:
        out: dict[str, str] = {}
        for k, v in cfg.items():
            out.update(flatten_config(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: cfg if isinstance(cfg, str) else json.dumps(cfg)}


def config_values(results_by_sweep: dict[str, list[Result]]) -> pd.DataFrame:
    """Rows ``sweep, key, value``: every distinct value each flattened config key took in each
    sweep's points (from result.json's ``config``)."""
    rows = {
        (sweep, k, v)
        for sweep, results in results_by_sweep.items()
        for r in results
        for k, v in flatten_config(r.config.tree).items()
    }
    return pd.DataFrame(sorted(rows), columns=["sweep", "key", "value"])


def differing_keys(values: pd.DataFrame, sweeps: Iterable[str]) -> pd.DataFrame:
    """One row per config key whose set of values is not the same in every sweep; one column
    per sweep with its values (``, ``-joined; ``(absent)`` where its points lack the key)."""
    sweeps = list(sweeps)
    table = {
        key: {s: ", ".join(sorted(g.loc[g["sweep"] == s, "value"])) or "(absent)" for s in sweeps}
        for key, g in values.groupby("key", sort=True)
    }
    rows = [{"key": key, **vals} for key, vals in table.items() if len(set(vals.values())) > 1]
    return pd.DataFrame(rows, columns=["key", *sweeps])


def split_absent(diff: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(keys every sweep's configs have, keys some lack). The second kind usually comes from a
    newer shardlab that added a config key with its default, not from a different point."""
    absent = (diff.iloc[:, 1:] == "(absent)").any(axis=1)
    return diff[~absent].reset_index(drop=True), diff[absent].reset_index(drop=True)


def sweep_labels(names: list[str], diff: pd.DataFrame) -> list[str]:
    """Labels for the sweeps: ``key=value`` when one config key tells them apart with one
    value each (``group=name`` when every differing key is in one group that has a ``name``,
    e.g. ``mesh=x8``), else the folder names (``names``), made unique."""
    cols = diff.columns[1:]
    keys = list(diff["key"])
    groups = {k.split(".", 1)[0] for k in keys}
    if len(keys) == 1:
        row = diff.iloc[0]
    elif len(groups) == 1 and f"{next(iter(groups))}.name" in keys:
        row = diff[diff["key"] == f"{next(iter(groups))}.name"].iloc[0]
    else:
        row = None
    if row is not None:
        labels = [f"{row['key'].removesuffix('.name')}={row[c]}" for c in cols]
        if len(set(labels)) == len(labels) and not any("," in lab for lab in labels):
            return labels
    labels = list(names)
    if len(set(labels)) < len(labels):
        labels = [f"{i}:{n}" for i, n in enumerate(names)]
    return labels


def match_keys(points: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(keys that identify a point across the sweeps, setting keys the sweeps differ in)."""
    varied = []
    for key in SETTING_KEYS:
        per_sweep = points.groupby("sweep")[key].agg(lambda s: frozenset(s.astype(str)))
        if all(len(v) == 1 for v in per_sweep) and len(set(per_sweep)) > 1:
            varied.append(key)
    return IDENTITY_KEYS + [k for k in SETTING_KEYS if k not in varied], varied


def ratio_table(points: pd.DataFrame, keys: list[str], reference: str) -> pd.DataFrame:
    """Per shared point and other sweep: both medians, ``time_ratio`` = sweep / reference
    and its approximate 95% CI.

    The CI combines the two medians' CIs in log space: each side of the ratio's interval is
    the root sum of squares of the matching sides of the two intervals (``log(hi/median)``
    and so on), which treats the two sweeps' errors as independent. ``differs`` says the
    interval excludes 1.
    """
    cols = keys + ["time_s", "time_ci_low_s", "time_ci_high_s", "busbw_Bps", "V_bytes"]
    pts = points.assign(**{k: points[k].astype(str) for k in keys if k != "size_bytes"})
    pts = pts.drop_duplicates(subset=["sweep", *keys])
    ref = pts[pts["sweep"] == reference][cols]
    frames = []
    for sweep in [s for s in pts["sweep"].unique() if s != reference]:
        other = pts[pts["sweep"] == sweep][cols]
        m = ref.merge(other, on=keys, suffixes=("_ref", ""))
        if len(m):
            frames.append(m.assign(sweep=sweep, reference=reference))
    if not frames:
        return pd.DataFrame(
            columns=["sweep", "reference", *keys, "time_ratio", "time_ratio_ci_low", "time_ratio_ci_high", "differs"]
        )
    m = stack_sweeps(frames)
    r = m["time_s"] / m["time_s_ref"]
    down = np.hypot(np.log(m["time_s"] / m["time_ci_low_s"]), np.log(m["time_ci_high_s_ref"] / m["time_s_ref"]))
    up = np.hypot(np.log(m["time_ci_high_s"] / m["time_s"]), np.log(m["time_s_ref"] / m["time_ci_low_s_ref"]))
    m = m.assign(
        time_ratio=r,
        time_ratio_ci_low=r * np.exp(-down),
        time_ratio_ci_high=r * np.exp(up),
        busbw_ratio=m["busbw_Bps"] / m["busbw_Bps_ref"],
    )
    m["differs"] = (m["time_ratio_ci_low"] > 1) | (m["time_ratio_ci_high"] < 1)
    order = [
        "sweep",
        "reference",
        *keys,
        "V_bytes",
        "time_s_ref",
        "time_s",
        "time_ratio",
        "time_ratio_ci_low",
        "time_ratio_ci_high",
        "differs",
        "busbw_Bps_ref",
        "busbw_Bps",
        "busbw_ratio",
    ]
    return m[order].sort_values(["sweep", *keys]).reset_index(drop=True)


def fits_side_by_side(fits: pd.DataFrame, keys: list[str], labels: list[str]) -> pd.DataFrame:
    """Fitted constants (:func:`analysis.statistics.fit.fit_table` rows with a ``sweep`` column), one row
    per family (``keys`` less size) and one column per constant and sweep."""
    family = [k for k in keys if k in fits.columns and k != "size_bytes"]
    values = [v for v in FIT_VALUES if v in fits.columns]
    if not len(fits) or not values:
        return pd.DataFrame(columns=family)
    f = fits.assign(**{k: fits[k].astype(str) for k in family}).drop_duplicates(subset=["sweep", *family])
    wide = f.pivot(index=family, columns="sweep", values=values)
    wide.columns = [f"{FIT_VALUES[v]} [{s}]" for v, s in wide.columns]
    ordered = [f"{FIT_VALUES[v]} [{s}]" for v in values for s in labels if f"{FIT_VALUES[v]} [{s}]" in wide.columns]
    return wide[ordered].reset_index()


def geometric_mean(x: pd.Series) -> float:
    """The geometric mean of positive values (the average of ratios), NaN for none."""
    x = pd.to_numeric(x, errors="coerce").dropna()
    x = x[x > 0]
    return float(np.exp(np.log(x).mean())) if len(x) else math.nan


def load_sweeps(
    dirs: list[Path], allow_mixed: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str]]:
    """(points of every sweep with a ``sweep`` label, their fits, the config diff, the labels).

    Each sweep is read once (:func:`analysis.sweep.load_sweep`, with ``allow_mixed``). Raises
    :class:`CompareError` for a folder without results or whose points were measured unlike
    each other.
    """
    if len(dirs) < 2:
        raise CompareError("compare needs two or more sweep folders")
    names = [Path(d).resolve().name for d in dirs]
    sweeps = []
    for d in dirs:
        if not Path(d).is_dir() or not point_dirs(d):
            raise CompareError(f"{d} holds no run folders (no */result.json)")
        try:
            s = load_sweep(d, allow_mixed=allow_mixed)
        except ValueError as exc:  # MixedSweepError
            raise CompareError(str(exc)) from None
        if not len(s.points):
            raise CompareError(f"{d} has no successful results")
        sweeps.append(s)
    diff = differing_keys(config_values({n: s.results for n, s in zip(names, sweeps)}), names)
    labels = sweep_labels(names, split_absent(diff)[0])
    diff.columns = ["key", *labels]
    points = [s.points.assign(sweep=label) for s, label in zip(sweeps, labels)]
    fits = stack_sweeps([s.fits.assign(sweep=label) for s, label in zip(sweeps, labels)])
    return stack_sweeps(points), fits, diff, labels
