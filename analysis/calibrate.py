"""Measured hardware constants: fit the book's model to a sweep and write a hardware entry.

The book's model gives every point two unit terms (:func:`analysis.predictions.unit_terms`):
``latency_unit`` (hops, the seconds per second of T_min) and ``bandwidth_unit`` (the bytes
the formula sends over a link, the seconds per unit of 1/W). Fitting
``time_s = max(T_min * latency_unit, bandwidth_unit / W)`` (:func:`analysis.fit.fit_max_model`,
the same max() form the model predicts with, so a prediction reproduces the fit) per
collective and number of mesh axes gives the W and T_min this machine really shows.

:func:`hardware_entry` turns those fits into a ``conf/hardware`` entry: the base entry's keys,
the AllGather fit as the headline constants, and a ``calibrated:`` list that
:func:`analysis.hardware.calibrated_for` consults per (op, n_axes).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.book.hardware import hardware_dir, load_hardware
from analysis.fit import MIN_POINTS, fit_max_model, regime_break
from analysis.predictions import unit_terms

CALIBRATION_COLUMNS = [
    "op",
    "n_axes",
    "W_Bps",
    "T_min_s",
    "rel_rms_error",
    "n_points",
    "V_min_bytes",
    "V_max_bytes",
    "meshes",
    "left_out",
]
WARN_REL_ERROR = 0.25  # calibrate warns when the fitted model stays further than this from the medians


def calibration_table(points: pd.DataFrame, base: str) -> pd.DataFrame:
    """One row per (op, n_axes) with the fitted ``W_Bps``, ``T_min_s`` and their relative
    RMS error over the ``n_points`` medians. As in the sweep's fits, flagged points and points
    in another bandwidth regime are left out (``left_out`` says which and why), groups with
    fewer than 3 points are skipped, and a group with no bandwidth-bound point is too.

    ``points`` are a sweep's ok target rows (:func:`analysis.report.target_points`);
    ``base`` is the hardware (name or YAML path) whose topology rules give the unit terms.
    """
    pts = unit_terms(points.assign(hardware=base))
    pts = pts.dropna(subset=["time_s", "latency_unit", "bandwidth_unit"])
    rows = []
    for (op, k), g in pts.groupby(["op", "n_axes"], sort=True):
        flagged = g["flags"].fillna("").astype(str).ne("") if "flags" in g else pd.Series(False, index=g.index)
        left = [f"{r.job}: {r.flags}" for r in g[flagged].itertuples()]
        g = g[~flagged]
        if len(g) < MIN_POINTS:
            continue
        fit = fit_max_model(g["time_s"], g["latency_unit"], g["bandwidth_unit"])
        brk = regime_break(
            g["V_bytes"], g["time_s"], g["bandwidth_unit"], g["latency_unit"], fit["T_min_s"], fit["W_Bps"]
        )
        if brk is not None and (~brk[0]).sum() >= MIN_POINTS:
            left += [f"{r.job}: {brk[1]}" for r in g[brk[0]].itertuples()]
            g = g[~brk[0]]
            fit = fit_max_model(g["time_s"], g["latency_unit"], g["bandwidth_unit"])
        if not math.isfinite(fit["W_Bps"]):
            continue  # every point latency-bound: no W to write
        rows.append(
            {
                "op": op,
                "n_axes": int(k),
                "W_Bps": fit["W_Bps"],
                "T_min_s": fit["T_min_s"],
                "rel_rms_error": fit["rel_rmse"],
                "n_points": len(g),
                "V_min_bytes": g["V_bytes"].min(),
                "V_max_bytes": g["V_bytes"].max(),
                "meshes": ", ".join(sorted(set(g["mesh_axes"].astype(str)))),
                "left_out": "; ".join(left),
            }
        )
    return pd.DataFrame(rows, columns=CALIBRATION_COLUMNS)


def headline_fit(table: pd.DataFrame) -> pd.Series:
    """The fit the entry's top-level constants come from: AllGather over one axis if the sweep
    has it (the book's reference collective), else the AllGather, else the fit with most points."""
    ranked = table.assign(_ag=table["op"] == "all_gather", _one=table["n_axes"] == 1)
    return ranked.sort_values(["_ag", "_one", "n_points"], ascending=False).iloc[0]


def base_entry_path(base: str) -> Path:
    """The YAML file of a hardware name or path (as :func:`analysis.hardware.load_hardware` finds it)."""
    path = Path(base)
    return path if path.suffix in (".yaml", ".yml") and path.is_file() else hardware_dir() / f"{base}.yaml"


def hardware_entry(base_raw: dict, name: str, table: pd.DataFrame, source: str) -> dict:
    """The new hardware entry as a plain dict, ready for YAML.

    It copies ``base_raw`` (the base YAML's keys), renames it, empties ``device_kinds`` (so
    ``hardware=auto`` keeps picking the base entry) and sets the link constants from
    :func:`headline_fit`: W is ``link_bw_bidir_Bps`` with half of it one way, except on a
    switch, where the model's W is one GPU's egress (``link_bw_unidir_Bps``).
    """
    head = headline_fit(table)
    W, t_min = float(head["W_Bps"]), float(head["T_min_s"])
    switch = base_raw.get("interconnect") == "switch"
    entry = dict(base_raw)
    entry.update(
        name=name,
        device_kinds=[],
        link_bw_unidir_Bps=W if switch else W / 2,
        link_bw_bidir_Bps=2 * W if switch else W,
        hop_latency_s=t_min,
        source=source,
        calibrated=[
            {
                "op": str(r.op),
                "n_axes": int(r.n_axes),
                "link_bw_bidir_Bps": float(r.W_Bps),
                "hop_latency_s": float(r.T_min_s),
                "rel_rms_error": float(r.rel_rms_error),
                "n_points": int(r.n_points),
            }
            for r in table.itertuples()
        ],
    )
    return entry


def entry_yaml(entry: dict, header: str) -> str:
    """``entry`` as YAML text under a comment ``header`` (one or more lines)."""
    import yaml

    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + yaml.safe_dump(entry, sort_keys=False, width=100)


def check_round_trip(path: Path, table: pd.DataFrame) -> None:
    """Load the written file back and check every fit reads as written (a ValueError if not)."""
    hw = load_hardware(str(path))
    got = {(c.op, c.n_axes): (c.link_bw_bidir_Bps, c.hop_latency_s) for c in hw.calibrated}
    for r in table.itertuples():
        w, t = got.get((r.op, r.n_axes), (np.nan, np.nan))
        if not (np.isclose(w, r.W_Bps, rtol=1e-9) and np.isclose(t, r.T_min_s, rtol=1e-9, atol=0)):
            raise ValueError(f"{path}: the {r.op} over {r.n_axes} axes entry did not read back as written")
