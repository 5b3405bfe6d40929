"""Measured hardware constants: fit the book's model to a sweep and write a hardware entry.

The book's model gives every point two unit terms (:func:`analysis.predictions.unit_terms`):
``latency_unit`` (hops, the seconds per second of T_min) and ``bandwidth_unit`` (the bytes
the formula sends over a link, the seconds per unit of 1/W). Fitting
``time_s = max(T_min * latency_unit, bandwidth_unit / W)`` (:func:`analysis.statistics.fit.fit_max_model`,
the same max() form the model predicts with, so a prediction reproduces the fit) per
collective and number of mesh axes gives the W and T_min this machine really shows.

:func:`hardware_entry` turns those fits into a ``conf/hardware`` entry: the base entry's keys,
the AllGather fit as the headline constants, and a ``calibrated:`` list that
:func:`analysis.hardware.calibrated_for` consults per (op, n_axes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from analysis.book.collective_cost import predict_collective
from analysis.book.hardware import hardware_dir, load_hardware
from analysis.predictions import unit_terms
from analysis.statistics.fit import SEED, fit_max_model, fit_points

CALIBRATION_COLUMNS = [
    "op",
    "n_axes",
    "W_Bps",
    "W_ci_low_Bps",
    "W_ci_high_Bps",
    "T_min_s",
    "T_min_ci_low_s",
    "T_min_ci_high_s",
    "rel_rms_error",
    "n_points",
    "V_min_bytes",
    "V_max_bytes",
    "meshes",
    "left_out",
]
WARN_REL_ERROR = 0.25  # calibrate warns when the fitted model stays further than this from the medians


def calibration_table(points: pd.DataFrame, base: str, rounds: dict | None = None, seed: int = SEED) -> pd.DataFrame:
    """One row per (op, n_axes) with the fitted ``W_Bps``, ``T_min_s``, their 95% bootstrap
    intervals (``W_ci_low_Bps`` ...) and the relative RMS error over the ``n_points`` medians.

    The fit is the report's own (:func:`analysis.statistics.fit.fit_points` grouped by op and n_axes, so
    regime selection, intervals and seed are the same): flagged points and points in another
    bandwidth regime are left out (``left_out`` says which and why), groups with fewer than 3
    points are skipped, and a group without a bandwidth regime (no W to write) too.

    ``points`` are a sweep's ok target rows (:func:`analysis.report.target_points`);
    ``base`` is the hardware (name or YAML path) whose topology rules give the unit terms;
    ``rounds``: each point's samples (:func:`analysis.statistics.resample.rounds_by_point`) for the intervals.
    """
    pts = unit_terms(points.assign(hardware=base))
    pts = pts.dropna(subset=["time_s", "latency_unit", "bandwidth_unit"])
    if not len(pts):
        return pd.DataFrame(columns=CALIBRATION_COLUMNS)
    fitted = fit_points(pts, rounds, seed, by=["op", "n_axes"])
    rows = []
    for f in fitted.fits.to_dict("records"):
        if f.get("W_Bps") is None or pd.isna(f.get("W_Bps")):
            continue  # too few points, or every point latency-bound: no W to write
        mine = (pts["op"] == f["op"]) & (pts["n_axes"] == f["n_axes"])
        gone = fitted.left_out[(fitted.left_out["op"] == f["op"]) & (fitted.left_out["n_axes"] == f["n_axes"])]
        rows.append(
            {
                **{k: f[k] for k in CALIBRATION_COLUMNS if k in f},
                "n_axes": int(f["n_axes"]),
                "rel_rms_error": f["book_rel_rmse"],
                "meshes": ", ".join(sorted(set(pts.loc[mine, "mesh_axes"].astype(str)))),
                "left_out": "; ".join(f"{r.point}: {r.reason}" for r in gone.itertuples()),
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


def split_levels(points: pd.DataFrame, base_hw) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The points whose group fits in one domain of ``base_hw`` (a node, a slice), and those
    whose group crosses domains (an imported multi-node nccl-tests run): the book prices the
    two over different fabrics, so each level gets constants of its own."""
    domain = base_hw.domain_size
    if not domain or base_hw.interconnect == "host":
        return points, points.iloc[0:0]
    across = points["group_size"].astype(float) > domain
    return points[~across], points[across]


def across_calibration(points: pd.DataFrame, base_hw) -> dict | None:
    """W_out and T_out of the scale-out network (per device, one way) fitted to the points whose
    group crosses domains, with the book's ``max(T_out * hops, bytes / W_out)`` at the across
    level (its hops and bytes from the base entry's own prediction, the devices filling domains
    in order), all collectives together; None with fewer than 3 such points."""
    pts = points.dropna(subset=["time_s", "V_bytes", "group_size"])
    if len(pts) < 3 or not base_hw.scaleout_bw_unidir_Bps or not base_hw.scaleout_latency_s:
        return None
    hops, nbytes = [], []
    for r in pts.itertuples():
        p = predict_collective(r.op, float(r.V_bytes), [int(r.group_size)], base_hw)
        out = p.levels[-1]  # the outermost level: across domains
        hops.append(out["latency_time_s"] / base_hw.scaleout_latency_s)
        nbytes.append(out["bandwidth_time_s"] * base_hw.scaleout_bw_unidir_Bps)
    # the report's own fit (regime selection: points the single W cannot describe are left out),
    # over the across level's hops and bytes instead of the whole group's
    fitted = fit_points(pts.assign(latency_unit=hops, bandwidth_unit=nbytes, _all="all"), None, SEED, by=["_all"])
    f = fitted.fits.iloc[0] if len(fitted.fits) else None
    if f is None or pd.isna(f.get("W_Bps")) or pd.isna(f.get("T_min_s")):
        fit = fit_max_model(pts["time_s"].to_numpy(float), hops, nbytes)  # no bandwidth regime told apart
        W, T, rel, n = fit["W_Bps"], fit["T_min_s"], fit["rel_rmse"], len(pts)
    else:
        W, T, rel, n = float(f["W_Bps"]), float(f["T_min_s"]), float(f["book_rel_rmse"]), int(f["n_points"])
    return {
        "scaleout_bw_unidir_Bps": W,
        "scaleout_latency_s": T,
        "rel_rms_error": rel,
        "n_points": n,
        "ops": ", ".join(sorted(set(pts["op"]))),
    }
