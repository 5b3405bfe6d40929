"""The report's training-step section: for each whole-step point (``op=transformer_block``,
``op=program``) the step time beside the book's T_math and predicted T_comms, what the trace
measured of its collectives (and how much of that the devices spent only waiting), the
costliest collective, and how far the model is per collective kind. Tables from
:mod:`analysis.profiling.training_steps`."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from analysis.book.units import fmt_duration, fmt_pct
from analysis.profiling.training_steps import model_error_by_kind, step_table
from analysis.report.axes import WIDTH_IN, finish
from analysis.report.document import Report
from analysis.runs.record import Result
from analysis.runs.rundir import write_text_atomic


def add_step_section(rep: Report, results: list[Result], model_hw, model_source: str, out: Path) -> pd.DataFrame | None:
    """Append the section (CSVs and figure under ``out``); return the step table, or None
    when the sweep ran no whole step."""
    table, colls = step_table(results, model_hw)
    if table.empty:
        return None
    write_text_atomic(out / "steps.csv", table.to_csv(index=False))
    if len(colls):
        write_text_atomic(out / "step_collectives.csv", colls.to_csv(index=False))
    rep.heading("Training step")
    rep.text(
        "Each point is one training step (forward and backward). **step** is the untraced step time (the "
        "estimator the report uses); **T_math** the book's FLOPs / (devices x C) where the hardware publishes "
        "C; **model T_comms** the sum of the model's time for every collective the compiled step ran, one after "
        f"another (constants: {model_source}); from the trace, per step (median over steps and devices): "
        "**comms** the devices' time in collectives, **exposed** the part of it during which that device ran no "
        "compute, and **comms share** comms / the traced step. On the CPU backend a traced step runs slower "
        "than an untraced one and a collective's time includes waiting for the last device to arrive."
    )
    rep.table(
        pd.DataFrame(
            {
                "point": table["point"],
                "sharding": table["sharding"],
                "mesh": table["mesh"],
                "B": table["B"],
                "step": table["step_s"].map(fmt_duration),
                "T_math": table["T_math_s"].map(fmt_duration),
                "model T_comms": table["model_comms_s"].map(fmt_duration),
                "comms": table["comms_s"].map(fmt_duration),
                "exposed": table["exposed_s"].map(fmt_duration),
                "comms share": table["comms_share"].map(fmt_pct),
                "costliest collective": table["top_collective"].fillna(""),
                "its time": table["top_collective_s"].map(fmt_duration),
            }
        )
    )
    skipped = table[table["skipped"].astype(bool)]
    for _, r in skipped.iterrows():
        rep.text(f"{r['point']}: no trace analysis ({r['skipped']}).")
    errors = model_error_by_kind(colls)
    if len(errors):
        rep.text(
            "Measured / model per collective kind: each collective's median time per execution against the "
            "model's time for it, the median over the kind's instructions in every point. *per device* takes each "
            "device's own time, which on the CPU backend includes waiting for the last device to arrive; *last "
            "arrival* takes the shortest device's time of each execution (from the last arrival to the end), the "
            "transfer the book's model describes. Both are traced steps, slower than untraced ones on CPU."
        )
        two = lambda v: f"{v:.2f}" if pd.notna(v) else ""  # noqa: E731
        rep.table(
            pd.DataFrame(
                {
                    "kind": errors["kind"],
                    "instructions": errors["instructions"],
                    "measured/model, per device": errors["measured_over_model_median"].map(two),
                    "measured/model, last arrival": errors["last_arrival_over_model_median"].map(two),
                }
            )
        )
    if table["B"].nunique() > 1 and table["comms_share"].notna().any():
        rep.figure(
            share_figure(table, out / "step_comms_share.png"),
            "Share of the traced step spent in collectives against the batch: where it falls, the step "
            "has turned compute-bound.",
        )
    return table


def share_figure(table: pd.DataFrame, path: Path) -> Path:
    """Comms share of the step against batch size, one line per sharding and mesh."""
    d = table.dropna(subset=["comms_share", "B"]).assign(layout=lambda t: t["sharding"] + " on " + t["mesh"])
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.5))
    sns.lineplot(data=d, x="B", y="comms_share", hue="layout", marker="o", ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch B (sequences per step)")
    ax.set_ylabel("collectives / traced step")
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.grid(True, alpha=0.3)
    if ax.get_legend():
        ax.get_legend().remove()
    return finish(fig, {"all": ax}, "Where the step turns communication-bound", path)
