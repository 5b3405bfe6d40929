"""Whole training steps in a sweep (``op=transformer_block``, ``op=program``): per point, the
step's time, the book's T_math and predicted T_comms, and what its trace measured of the
collectives (time, exposed time, the costliest one), from :mod:`analysis.profiling.profile_load`.

Tables only; the report section is :mod:`analysis.report.training_step_section`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.book.collective_cost import predict_collective
from analysis.book.collectives import BY_HLO, V_from_hlo
from analysis.book.errors import BookError
from analysis.book.hardware import Hardware
from analysis.profiling.profile import step_summary
from analysis.profiling.profile_load import analyse, load_hlo
from analysis.runs.record import Result, either
from analysis.runs.rundir import point_file
from analysis.trace import TraceError

STEP_OPS = ("transformer_block", "program")
STEP_COLUMNS = [
    "point",
    "op",
    "sharding",
    "mesh",
    "B",
    "devices",
    "dtype",
    "step_s",
    "T_math_s",
    "model_comms_s",
    "traced_step_s",
    "comms_s",
    "exposed_s",
    "comms_share",
    "top_collective",
    "top_collective_s",
    "skipped",
]


def mesh_predictor(hw: Hardware, mesh: dict[str, int]):
    """``predict(collective, axes)`` for :func:`analysis.profiling.profile.hlo_table`: the book's model
    over the mesh axes the collective's groups span (the whole group as one axis when they
    match none)."""

    def predict(c, axes):
        if c.kind not in BY_HLO:
            return {"model_time_s": math.nan, "model_note": "no model for this collective"}
        sizes = [mesh[a] for a in axes] if axes else [c.group_size]
        try:
            p = predict_collective(
                BY_HLO[c.kind].op, V_from_hlo(c.kind, c.operand_bytes, c.result_bytes, c.group_size), sizes, hw
            )
        except BookError as err:
            return {"model_time_s": math.nan, "model_note": f"no model: {err}"}
        return {"model_time_s": p.time_s, "model_note": f"{p.regime}-bound over {','.join(axes) or 'its group'}"}

    return predict


def step_points(results: list[Result]) -> list[Result]:
    """The ok results of whole-step ops."""
    return [r for r in results if r.ok and r.spec.op in STEP_OPS and r.point_dir]


def collective_rows(result: Result, hw: Hardware | None) -> tuple[pd.DataFrame | None, pd.DataFrame | None, str]:
    """The point's per-collective table and per-step summary from its trace and HLO, or
    (None, None, why not)."""
    try:
        xplane, hlo = point_file(result, "xplane"), point_file(result, "hlo_compiled")
    except ValueError as err:
        return None, None, str(err)
    if xplane is None or hlo is None:
        return None, None, "no trace or no HLO (trace.enabled=false?)"
    mesh = result.spec.mesh.axes
    try:
        texts, _ = load_hlo(str(hlo), [xplane])
        found = analyse([xplane], texts, mesh, mesh_predictor(hw, mesh) if hw is not None and mesh else None)
    except (OSError, ValueError, TraceError) as err:
        return None, None, str(err).splitlines()[0] if str(err) else type(err).__name__
    return found.table, step_summary(found.steps), ""


def _rate(hw: Hardware | None, dtype: str | None, precision: str | None) -> float | None:
    """The entry's FLOP/s for the step's matmuls (``dtype`` at ``precision``), or None."""
    try:
        return hw.flops(dtype, precision) if hw is not None and dtype else None
    except BookError:
        return None


def step_table(results: list[Result], hw: Hardware | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per whole-step point, :data:`STEP_COLUMNS`; every collective of every point
    with the point's ``point``)."""
    rows, colls = [], []
    for r in step_points(results):
        exp = r.spec
        table, steps, why = collective_rows(r, hw)
        mesh = exp.mesh.axes or {}
        devices = int(np.prod(list(mesh.values()) or [1]))
        C = _rate(hw, exp.dtype, exp.precision)
        row = {
            "point": r.point,
            "op": exp.op,
            "sharding": exp.sharding or "",
            "mesh": "x".join(str(v) for v in mesh.values()),
            "B": exp.dims.get("B") if exp.dims else None,
            "devices": devices,
            "dtype": exp.dtype,
            "step_s": either(r.timing.summary.median_s, np.nan),
            "T_math_s": exp.flops / (devices * C) if C and exp.flops else np.nan,
            "skipped": why,
        }
        if table is not None:
            ran = table[table["executions"] > 0]
            row["model_comms_s"] = float((ran["model_time_s"] * ran["executions_per_step"]).sum(min_count=1))
            row["traced_step_s"] = float(steps["step_s"].median())
            row["comms_s"] = float(steps["collective_s"].median())
            row["exposed_s"] = float(steps["exposed_s"].median())
            row["comms_share"] = row["comms_s"] / row["traced_step_s"]
            if len(ran):
                top = ran.sort_values("time_per_step_s", ascending=False).iloc[0]
                row["top_collective"] = f"{top['kind']} over {top['mesh_axes'] or '?'} ({top['name']})"
                row["top_collective_s"] = float(top["time_per_step_s"])
            colls.append(table.assign(point=row["point"]))
        rows.append(row)
    out = pd.DataFrame(rows, columns=STEP_COLUMNS)
    return out, (pd.concat(colls, ignore_index=True) if colls else pd.DataFrame())


def model_error_by_kind(collectives: pd.DataFrame) -> pd.DataFrame:
    """Per collective kind: how many instructions ran, and the median over them of measured /
    model per execution, twice: with each device's own time (waiting for the others
    included) and with the last device's (from the last arrival to the end)."""
    cols = ["kind", "instructions", "measured_over_model_median", "last_arrival_over_model_median"]
    if collectives.empty or "measured_over_model" not in collectives:
        return pd.DataFrame(columns=cols)
    ran = collectives[(collectives["executions"] > 0) & collectives["measured_over_model"].notna()]
    g = ran.groupby("kind")
    return pd.DataFrame(
        {
            "instructions": g.size(),
            "measured_over_model_median": g["measured_over_model"].median(),
            "last_arrival_over_model_median": g["last_arrival_over_model"].median(),
        }
    ).reset_index()[cols]
