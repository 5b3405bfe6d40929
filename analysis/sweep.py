"""A sweep loaded once: its results, the tidy summary, the points of the collectives it asked
for, their fits and the book's model. Built by :func:`load_sweep` and handed to every
analyzer and report (as HolisticTraceAnalysis hands one parsed trace to its analyzers).

    from analysis import load_sweep
    s = load_sweep("outputs/sweeps/allgather_sizes/<time>")
    s.points[["op", "V_bytes", "time_s", "busbw_Bps", "model_time_s"]]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.book.hardware import Hardware, load_hardware
from analysis.fit import GROUP_KEYS, fit_table
from analysis.predictions import curves, hardware_for, model_constants, predict_points, unit_terms
from analysis.rundir import expected_points, job_dirs, job_number, read_results
from analysis.summary import summary_table


@dataclass
class Sweep:
    """Everything one sweep folder holds, as tables.

    ``summary``: one row per job and collective (``summary.csv``). ``points``: the ok rows of
    the collective each job asked for, with a ``family`` label, the model's unit terms and
    ``model_time_s``. ``fits``: one row of fitted constants per family; ``left_out``: the
    points the fits did not use, each with the reason. ``model_hw``: the
    constants the model used (published, calibrated or fitted here) and ``model_source``
    says which. ``curves``: smooth fit and model lines for the figures.
    """
    root: Path
    results: list[dict]
    summary: pd.DataFrame
    points: pd.DataFrame
    fits: pd.DataFrame
    left_out: pd.DataFrame
    model_hw: Hardware | None
    model_source: str
    curves: pd.DataFrame
    expected: list = field(default_factory=list)  # the points sweep.json says the sweep asked for
    missing: list = field(default_factory=list)  # those without a result

    @property
    def jobs(self) -> pd.DataFrame:
        """One summary row per job."""
        return self.summary.drop_duplicates("job")


def family_label(df: pd.DataFrame) -> pd.Series:
    """``all_gather over X (8), float32, mesh auto``: what one fit and one curve cover."""
    return df["op"] + " over " + df["axes"].astype(str) + " (" + df["axis_sizes"].astype(str) + "), " \
        + df["dtype"].astype(str) + ", mesh " + df["mesh"].astype(str)


def target_points(summary: pd.DataFrame) -> pd.DataFrame:
    """The ok rows of the collective each job asked for, labelled by family."""
    pts = summary[(summary["status"] == "ok") & summary["is_target"]].copy()
    pts["family"] = family_label(pts)
    return pts.sort_values(["family", "V_bytes"]).reset_index(drop=True)


def load_sweep(root: str | Path, hardware: str | None = None) -> Sweep:
    """Read the sweep (or single run) in ``root`` once and analyse it.

    ``hardware`` names the entry whose constants the model uses (default: the one the sweep
    ran on), e.g. one written by ``python -m analysis calibrate``.
    """
    root = Path(root)
    results = read_results(root)
    summary = summary_table(results)
    points = unit_terms(target_points(summary))
    fits, left_out = fit_table(points) if len(points) else (pd.DataFrame(columns=GROUP_KEYS), pd.DataFrame())
    ran_on = summary.loc[summary["status"] == "ok", "hardware"].dropna()
    hw_name = hardware or (ran_on.mode().iloc[0] if len(ran_on) else None)
    hw = (load_hardware(hardware) if hardware else hardware_for(hw_name)) if hw_name else None
    model_hw, model_source = model_constants(hw, fits) if hw is not None else (None, "no successful points")
    points = predict_points(points, model_hw)
    points["measured_over_model"] = points["time_s"] / points["model_time_s"]
    model = points.set_index(["job", "hlo_op"])[["model_time_s", "model_regime"]] if len(points) else None
    if model is not None:  # the summary carries the same model columns for its target rows
        summary = summary.join(model, on=["job", "hlo_op"])
    else:
        summary = summary.assign(model_time_s=float("nan"), model_regime=None)
    expected = expected_points(root)
    present = {job_number(d) for d in job_dirs(root)}
    missing = [p for p in expected if p["num"] not in present]
    return Sweep(root, results, summary, points, fits, left_out, model_hw, model_source,
                 curves(points, fits, model_hw), expected, missing)
