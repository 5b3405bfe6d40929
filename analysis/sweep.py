"""A sweep loaded once: its results, the tidy summary, the points of the collectives it asked
for, their fits and the book's model. Built by :func:`load_sweep` and handed to every
analyzer and report (as HolisticTraceAnalysis hands one parsed trace to its analyzers).

    from analysis import load_sweep
    s = load_sweep("outputs/sweeps/allgather_sizes/<time>")
    s.points[["op", "V_bytes", "time_s", "busbw_Bps", "model_time_s"]]
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.book.device_kinds import resolve
from analysis.book.hardware import Hardware, load_hardware
from analysis.predictions import curves, hardware_for, model_constants, predict_points, self_fit, unit_terms
from analysis.runs.record import DEVICE, ESTIMATORS, Result
from analysis.runs.rundir import expected_points, point_dirs, read_results
from analysis.runs.summary import in_reading_order, summary_table
from analysis.runs.sweep_id import sweep_identity
from analysis.runs.sweep_match import match_points
from analysis.statistics.fit import GROUP_KEYS, fit_points
from analysis.statistics.resample import rounds_by_point


@dataclass
class Sweep:
    """Everything one sweep folder holds, as tables.

    ``results``: every point's record (:class:`analysis.runs.record.Result`), read once by
    :func:`analysis.runs.rundir.read_results`, in point-number order. ``summary``: one row
    per point and collective (``summary.csv``). ``points``: the ok rows of the collective
    each point asked for, with a ``family`` label, the model's unit terms and
    ``model_time_s``. ``fits``: one row of fitted constants per family; ``left_out``: the
    points the fits did not use, each with the reason. ``model_hw``: the
    constants the model used (published, calibrated or fitted here) and ``model_source``
    says which. ``curves``: smooth fit and model lines for the figures.
    """

    root: Path
    results: list[Result]
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
    def by_point(self) -> pd.DataFrame:
        """One summary row per point."""
        return self.summary.drop_duplicates("point")

    @property
    def samples(self) -> pd.DataFrame:
        """Every timing sample (``samples.csv``): ``point, round, estimator, sample, time_s``."""
        return samples_table(self.results)

    @property
    def profiles(self) -> dict[str, pd.DataFrame]:
        """The profile tables of the points that were profiled (``python -m analysis profile
        POINT`` wrote ``POINT/profile_report/``): ``{"collectives": ..., "steps": ...}``, each
        with a ``point`` column first; empty tables where no point was."""
        return profile_tables(self.results)


PROFILE_TABLES = ("collectives", "steps")  # analysis.report.profile_report's CSV files


def profile_tables(results: list[Result]) -> dict[str, pd.DataFrame]:
    """Each point's ``profile_report/<name>.csv`` (:data:`PROFILE_TABLES`), concatenated with a
    ``point`` column; a table that cannot be read is left out with a warning, not an error (the
    profile is an extra beside the measurement)."""
    out = {}
    for name in PROFILE_TABLES:
        parts = []
        for r in results:
            path = Path(r.point_dir) / "profile_report" / f"{name}.csv"
            if not path.is_file():
                continue
            try:
                table = pd.read_csv(path)
            except (OSError, ValueError) as err:  # pandas' parser errors are ValueErrors
                warnings.warn(f"{path}: {err}", stacklevel=2)
                continue
            parts.append(table.assign(point=r.point)[["point", *table.columns]])
        out[name] = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["point"])
    return out


def samples_table(results: list[Result]) -> pd.DataFrame:
    """Every timing sample of every point, long format: ``point, round, estimator, sample, time_s``."""
    rows = []
    for r in results:
        t = r.timing
        for rnd in t.rounds:
            for est in ESTIMATORS:  # (a later round has device samples where device is the estimator)
                rows += [(r.point, rnd.round, est, i, v) for i, v in enumerate(rnd.samples(est))]
        rows += [(r.point, 1, DEVICE, i, v) for i, v in enumerate(t.device.samples_s or [])]
    return pd.DataFrame(rows, columns=["point", "round", "estimator", "sample", "time_s"])


def family_label(df: pd.DataFrame) -> pd.Series:
    """``all_gather over X (8), float32, mesh auto``: what one fit and one curve cover."""
    return (
        df["op"]
        + " over "
        + df["axes"].astype(str)
        + " ("
        + df["axis_sizes"].astype(str)
        + "), "
        + df["dtype"].astype(str)
        + ", mesh "
        + df["mesh"].astype(str)
    )


def target_points(summary: pd.DataFrame) -> pd.DataFrame:
    """The ok rows of the collective each point asked for, labelled by family."""
    pts = summary[(summary["status"] == "ok") & summary["is_target"]].copy()
    pts["family"] = family_label(pts)
    return pts.sort_values(["family", "V_bytes"]).reset_index(drop=True)


class MixedSweepError(ValueError):
    """The folder's points were not measured alike (another JAX, another machine, another
    config than the sweep's own variation); the message says which keys differ."""


# What must agree across a sweep's points for them to share a fit (beyond the sweep's own
# variation): the software and machine they ran on.
ENVIRONMENT_KEYS = ("jax_version", "jaxlib_version", "backend", "device_kind", "device_count", "host", "process_count")


def mixture(results: list[Result], expected: list[dict]) -> dict[str, list[str]]:
    """Keys whose values differ between the ok points, beyond what the sweep varies (the keys
    of ``sweep.json``'s overrides): ``{key: [values]}``, empty when the points agree."""
    ok = [r for r in results if r.ok]
    varied = {o.split("=", 1)[0].lstrip("+~") for p in expected for o in p.get("overrides", [])}
    varied |= {"resume"}  # resuming is not part of what was measured
    seen: dict[str, set[str]] = {}
    for r in ok:
        for k in ENVIRONMENT_KEYS:
            seen.setdefault(f"environment.{k}", set()).add(str(getattr(r.environment, k)))
        # A varied group that names no node of the config (``+claim=ag_x8``: a ``_global_``
        # package) may set any key: only the environment can tell a mixture then.
        config = r.config.tree  # every key of it: any group may add one
        global_groups = any("." not in x and x not in config for x in varied - {"resume"})
        if expected and not global_groups:  # without the sweep's list there is no telling variation from mixture
            for k, v in _flatten(config).items():
                if not any(k == x or k.startswith(x + ".") for x in varied):
                    seen.setdefault(f"config.{k}", set()).add(v)
    return {k: sorted(v) for k, v in seen.items() if len(v) > 1}


def _flatten(cfg, prefix: str = "") -> dict[str, str]:
    if isinstance(cfg, dict) and cfg:
        out: dict[str, str] = {}
        for k, v in cfg.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: json.dumps(cfg, sort_keys=True, default=str)}


def _no_model_why(summary: pd.DataFrame, hw_name: str | None) -> str:
    """Why a sweep has no model: no point ran, or the chip it ran on has no catalogue entry
    (the resolver's own line: which kind, and how to add an entry or calibrate one)."""
    if not hw_name:
        return "no successful points"
    ok = summary[(summary["hardware"] == hw_name) & summary["device_kind"].notna()]
    if not len(ok):
        return f"no conf/hardware entry named {hw_name!r}, so the model has no constants"
    row = ok.iloc[0]
    why = resolve(str(row["device_kind"]), str(row.get("backend") or "") or None)
    if why.known:  # the kind is known now, though the points were recorded under another name
        return f"no conf/hardware entry named {hw_name!r}; the device kind resolves to {why.entry['name']} today"
    return why.reason


def load_sweep(root: str | Path, hardware: str | None = None, allow_mixed: bool = False) -> Sweep:
    """Read the sweep (or single run) in ``root`` once and analyse it.

    ``hardware`` names the entry whose constants the model uses (default: the one the sweep
    ran on), e.g. one written by ``python -m analysis calibrate``. Points measured unlike
    the others (:func:`mixture`) raise :class:`MixedSweepError` unless ``allow_mixed``.
    """
    root = Path(root)
    results = read_results(root)
    expected = expected_points(root)
    mixed = mixture(results, expected)
    # point folders are the sweep's points by their overrides, not their numbers (sweep_match)
    matched, extra = match_points(point_dirs(root), expected) if expected else ({}, [])
    if extra:  # folders the sweep never asked for: copied in, or left by another sweep in this folder
        mixed["point folders the sweep did not ask for"] = sorted(d.name for d in extra)
    if mixed and not allow_mixed:
        said = "; ".join(f"{k}: {', '.join(v[:4])}{' ...' if len(v) > 4 else ''}" for k, v in list(mixed.items())[:6])
        raise MixedSweepError(
            f"{root}: its points were not measured alike ({said}); one fit over them would mix "
            "them. Report them together anyway with --allow-mixed, or re-run the odd ones"
        )
    summary = summary_table(results)
    points = unit_terms(target_points(summary), results)
    fitted = fit_points(points, rounds_by_point(results)) if len(points) else None
    fits, left_out = (fitted.fits, fitted.left_out) if fitted else (pd.DataFrame(columns=GROUP_KEYS), pd.DataFrame())
    ran_on = summary.loc[summary["status"] == "ok", "hardware"].dropna()
    hw_name = hardware or (ran_on.mode().iloc[0] if len(ran_on) else None)
    hw = (load_hardware(hardware) if hardware else hardware_for(hw_name, results)) if hw_name else None
    if hw is not None:
        model_hw, model_source = model_constants(hw, fits)
    else:
        model_hw, model_source = None, _no_model_why(summary, hw_name)
    points = predict_points(points, model_hw)
    points["measured_over_model"] = points["time_s"] / points["model_time_s"]
    # measured/model against constants fitted to the same points agrees by construction: such a
    # point is marked, and its out-of-sample ratio is against its family's fit without its size
    points["model_self_fit"] = self_fit(points, hw, fits, GROUP_KEYS)
    points["cv_model_time_s"] = fitted.cv_model_time_s if fitted else float("nan")
    points["measured_over_model_cv"] = points["measured_over_model"].where(
        ~points["model_self_fit"], points["time_s"] / points["cv_model_time_s"]
    )
    if len(points):  # the summary carries the same model columns for its target rows
        # A merge on the columns, not a join on an index: a point whose compiled HLO has no
        # collective (one device: XLA runs it as a copy) has no hlo_op, and pandas 2.2's join
        # fails on a MultiIndex level that holds only NaN ("cannot do a non-empty take from an
        # empty axes"); a merge matches the missing keys as pandas 3's join does.
        model = points[["point", "hlo_op", "model_time_s", "model_regime"]]
        summary = summary.merge(model, on=["point", "hlo_op"], how="left")
    else:
        summary = summary.assign(model_time_s=float("nan"), model_regime=None)
    missing = [p for p in expected if p["num"] not in matched]
    # every row names its sweep, so summary.csv files of several sweeps concatenate
    sweep_id, started = sweep_identity(root, results)
    summary = in_reading_order(summary.assign(sweep_id=sweep_id, sweep_start_time=started))
    return Sweep(
        root,
        results,
        summary,
        points,
        fits,
        left_out,
        model_hw,
        model_source,
        curves(points, fits, model_hw),
        expected,
        missing,
    )
