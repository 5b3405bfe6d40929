"""The book's model applied to a sweep: predicted times per point and model curves.

For hardware with published constants (TPU, GPU entries) the prediction uses them. The
``cpu`` entry has none, so its constants come from the sweep: the AllGather fit calibrates
W and T_min, and the other collectives are predicted from those two numbers and the book's
factors (2x for AllReduce, 1/4 for AllToAll...). Where there is no AllGather, each family is
predicted from its own fit, and the report says so.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable

import numpy as np
import pandas as pd

from analysis.book.collective_cost import placed_group, predict_collective
from analysis.book.collectives import OPS
from analysis.book.errors import BookError
from analysis.book.expected_cost import expected_time_s
from analysis.book.hardware import Hardware, is_full_record, load_hardware, wraparound_for
from analysis.book.placement import Placement
from analysis.runs.record import Result


def axis_sizes(row) -> list[int]:
    """``"4x2"`` (a summary row's ``axis_sizes``) -> ``[4, 2]``."""
    return [int(s) for s in str(row["axis_sizes"]).split("x") if s]


def group_args(row, hw: Hardware) -> dict:
    """How the model takes a point's group (keyword arguments of ``predict_collective``): over
    the physical axes the run recorded (``placement``, on a torus), else its mesh axes with the
    chip's wraparound rule."""
    placement = row.get("placement")
    if isinstance(placement, str) and placement and hw.interconnect == "torus":
        return placed_group(hw, Placement.from_dict(json.loads(placement)), list(str(row["axes"])))
    sizes = axis_sizes(row)
    return {"axis_sizes": sizes, "wraparound": wraparound_for(hw, sizes)}


def recorded_node(results: Iterable[Result], name: str) -> dict | None:
    """The hardware node the ok points that ran on ``name`` recorded in ``result.json`` (the
    entry with the run's ``hardware.X=...`` overrides; the most common one if they differ),
    or None where none recorded the full node: a result file written before the run recorded
    every key (``hardware=auto`` wrote the YAML entry as it was) is read by name instead."""
    counts: Counter[str] = Counter()
    nodes: dict[str, dict] = {}
    for r in results:
        node = r.hardware if r.ok else None
        if is_full_record(node) and node.get("name") == name:
            key = json.dumps(node, sort_keys=True, default=str)
            counts[key] += 1
            nodes.setdefault(key, node)
    return nodes[counts.most_common(1)[0][0]] if counts else None


def hardware_for(name: str, results: Iterable[Result] = ()) -> Hardware | None:
    """The constants the points that ran on ``name`` ran with: the node ``results`` recorded
    (:func:`recorded_node`: overrides and entries found on Hydra's search path included),
    else the ``conf/hardware`` entry ``name``; None when there is neither."""
    node = recorded_node(results, name)
    if node is not None:
        try:
            return Hardware.from_dict(node, f"hardware {name!r} as its points recorded it")
        except BookError:
            pass  # a record this reader cannot take: the entry by name, as for an old result
    try:
        return load_hardware(name)
    except BookError:
        return None


def _unit_hw(hw: Hardware) -> Hardware:
    return dataclasses.replace(hw, link_bw_bidir_Bps=1.0, link_bw_unidir_Bps=1.0, hop_latency_s=1.0, calibrated=())


def unit_terms(points: pd.DataFrame, results: Iterable[Result] = ()) -> pd.DataFrame:
    """Add ``latency_unit`` (seconds per second of T_min: the hops) and ``bandwidth_unit``
    (seconds per 1/W: the bytes the formula sends over a link) to each point, on the hardware
    its run recorded in ``results`` (:func:`hardware_for`)."""
    results = list(results)
    lat, bw = [], []
    cache: dict[str, Hardware | None] = {}
    for row in points.to_dict("records"):
        if row["hardware"] not in cache:  # (setdefault would load the file for every row)
            cache[row["hardware"]] = hardware_for(row["hardware"], results)
        hw = cache[row["hardware"]]
        if hw is None or row["op"] not in OPS:
            lat.append(np.nan), bw.append(np.nan)
            continue
        sizes = axis_sizes(row)
        if not any(n > 1 for n in sizes):  # a group of one moves nothing: no terms to fit
            lat.append(np.nan), bw.append(np.nan)
            continue
        p = predict_collective(row["op"], float(row["V_bytes"]), hw=_unit_hw(hw), **group_args(row, hw))
        lat.append(p.latency_time_s), bw.append(p.bandwidth_time_s)
    return points.assign(latency_unit=lat, bandwidth_unit=bw)


def model_constants(hw: Hardware, fits: pd.DataFrame) -> tuple[Hardware | None, str]:
    """The constants to predict with, and where they came from (for the report)."""
    if hw.calibrated:
        return hw, (
            f"constants of `{hw.name}` measured per collective and number of mesh axes "
            f"({len(hw.calibrated)} entries; {hw.source})"
        )
    if hw.link_bw_bidir_Bps is not None and hw.hop_latency_s is not None:
        if changed := overridden(hw):
            return hw, f"constants of `{hw.name}` as its runs set them ({', '.join(changed)}; the entry: {hw.source})"
        return hw, f"published constants of `{hw.name}` ({hw.source})"
    best = calibration_fit(fits)
    if best is not None:
        fitted = dataclasses.replace(
            hw,
            link_bw_bidir_Bps=float(best["W_Bps"]),
            link_bw_unidir_Bps=float(best["W_Bps"]) / 2,
            hop_latency_s=float(best["T_min_s"]),
        )
        return fitted, (
            f"`{hw.name}` has no published constants: W and T_min were fitted to the "
            f"AllGather points (mesh {best['mesh']}, axes {best['axes']}) and predict every collective"
        )
    return None, (
        f"`{hw.name}` has no published constants and the sweep has no AllGather fit with a bandwidth "
        "regime to calibrate them"
    )


def overridden(hw: Hardware) -> list[str]:
    """``key=value`` for each model constant of ``hw`` that differs from its ``conf/hardware``
    entry (a run's ``hardware.X=...``); empty when they agree or there is no such entry."""
    try:
        entry = load_hardware(hw.name)
    except BookError:
        return []
    keys = ("link_bw_bidir_Bps", "link_bw_unidir_Bps", "hop_latency_s")
    changed = [(k, getattr(hw, k)) for k in keys if getattr(hw, k) != getattr(entry, k)]
    return [f"hardware.{k}={'null' if v is None else f'{v:g}'}" for k, v in changed]


def calibration_fit(fits: pd.DataFrame) -> pd.Series | None:
    """The fit whose W and T_min stand in for hardware without published constants: the
    AllGather family with a W (a bandwidth regime) and the most points; None if there is none."""
    if not len(fits) or "W_Bps" not in fits:
        return None
    ag = fits[(fits["op"] == "all_gather") & fits["W_Bps"].notna() & fits["T_min_s"].notna()]
    return ag.sort_values("n_points", kind="stable").iloc[-1] if len(ag) else None


def self_fit(points: pd.DataFrame, hw: Hardware | None, fits: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Per point, whether the model's constants were fitted to the point's own family in this
    sweep (``hw`` has neither measured nor published constants, so :func:`model_constants`
    took them from :func:`calibration_fit`): measured/model there agrees by construction."""
    published = hw is not None and hw.link_bw_bidir_Bps is not None and hw.hop_latency_s is not None
    best = calibration_fit(fits) if hw is not None and not hw.calibrated and not published else None
    if best is None or not len(points):
        return pd.Series(False, index=points.index)
    same = pd.Series(True, index=points.index)
    for k in keys:
        same &= points[k].astype(str) == str(best[k])
    return same


def predict_points(points: pd.DataFrame, hw: Hardware | None) -> pd.DataFrame:
    """Add ``model_time_s`` and ``model_regime`` from the book's formula with ``hw`` (the
    roofline), and ``expected_time_s`` (:mod:`analysis.book.expected_cost`: the hardware
    entry's bandwidth shares and floors on top of it; NaN where the entry has no ``expected:``
    block, since the roofline's own terms would stand in and repeat ``model_time_s``)."""
    if hw is None:
        return points.assign(model_time_s=np.nan, model_regime=None, expected_time_s=np.nan)
    t, regime, expected = [], [], []
    for row in points.to_dict("records"):
        sizes = axis_sizes(row)
        if not any(n > 1 for n in sizes):  # a group of one: the model has nothing to predict
            t.append(np.nan), regime.append(None), expected.append(np.nan)
            continue
        p = predict_collective(row["op"], float(row["V_bytes"]), hw=hw, **group_args(row, hw))
        t.append(p.time_s), regime.append(p.regime)
        expected.append(expected_time_s(p, hw) if hw.expected or hw.nccl or hw.rccl else np.nan)  # NCCL's/RCCL's model
    out = points.assign(model_time_s=t, model_regime=regime, expected_time_s=expected)
    if "time_s" in out:  # measured / expected, beside measured / roofline (the report's measured_over_model)
        out["measured_over_expected"] = out["time_s"] / out["expected_time_s"]
    return out


def family_fit(fits: pd.DataFrame, point) -> pd.DataFrame:
    """The row of ``fits`` for the family ``point`` (a points row) belongs to, or none."""
    if not len(fits) or "op" not in fits:
        return fits.iloc[0:0]
    return fits[
        (fits["op"] == point["op"])
        & (fits["axes"] == point["axes"])
        & (fits["mesh"] == point["mesh"])
        & (fits["dtype"] == point["dtype"])
    ]


def curves(points: pd.DataFrame, fits: pd.DataFrame, hw: Hardware | None, n: int = 60) -> pd.DataFrame:
    """Smooth lines for the figures: per family, the α-β fit and the book model over V."""
    rows = []
    for fam, g in points.groupby("family", sort=False):
        V = np.geomspace(g["V_bytes"].min(), g["V_bytes"].max(), n)
        first = g.iloc[0]
        f = family_fit(fits, first)
        if len(f) and "beta_Bps" in f and pd.notna(f["beta_Bps"].iloc[0]):
            rows.append(
                pd.DataFrame(
                    {
                        "family": fam,
                        "curve": "α-β fit",
                        "V_bytes": V,
                        "time_s": f["alpha_s"].iloc[0] + V / f["beta_Bps"].iloc[0],
                    }
                )
            )
        if hw is not None:
            grid = pd.DataFrame({"op": first["op"], "V_bytes": V, "axis_sizes": first["axis_sizes"]})
            rows.append(
                pd.DataFrame(
                    {
                        "family": fam,
                        "curve": "book model",
                        "V_bytes": V,
                        "time_s": predict_points(grid, hw)["model_time_s"].to_numpy(),
                    }
                )
            )
    if not rows:
        return pd.DataFrame(columns=["family", "curve", "V_bytes", "time_s", "busbw_Bps"])
    out = pd.concat(rows, ignore_index=True)
    factor = points.groupby("family")["busbw_Bps"].first() / points.groupby("family")["algbw_Bps"].first()
    out["busbw_Bps"] = out["V_bytes"] / out["time_s"] * out["family"].map(factor)
    return out
