"""The report's matmul section: the book's cases against the compiled HLO, and Question 4's
crossover (tables from :mod:`analysis.matmul_cases`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.book.errors import BookError
from analysis.book.hardware import load_hardware
from analysis.book.units import fmt_duration, fmt_pct
from analysis.matmul_cases import Matmuls, ring_pairs
from analysis.report import matmul_figures
from analysis.report.document import Report
from analysis.runs.summary import dims_of, mesh_of
from analysis.strategy_crossover import measured_crossover, model_crossover, q4_table


def add_matmul_section(rep: Report, mm: Matmuls, out: Path) -> None:
    """Append the matmul section to ``rep`` (figures saved under ``out``)."""
    points, table, hw = mm.points, mm.table, mm.hw
    rep.heading("Sharded matmuls: the book's cases against the compiled HLO")
    _cases(rep, table, mm.note)
    _costs(rep, table)
    points = points.merge(table[["point", "case"]], on="point", how="left")
    figs = [_roofline(points, hw, mm.C, out)]
    q4 = q4_table(points)
    if len(q4):
        rep.heading("Question 4: gather then multiply, or multiply then AllReduce")
        shown = q4.drop(columns=["dim"]).assign(
            strategy1_s=q4["strategy1_s"].map(fmt_duration), strategy2_s=q4["strategy2_s"].map(fmt_duration)
        )
        rep.table(
            shown.rename(
                columns={
                    "value": "varying dim",
                    "strategy1_s": "strategy 1",
                    "strategy2_s": "strategy 2",
                    "ratio_2_over_1": "strategy 2 / 1",
                }
            )
        )
        rep.text("\n\n".join(_q4_crossovers(q4, points, hw)))
        _q4_figures(q4, points, hw, out, figs)
    pairs = ring_pairs(points)
    if len(pairs):
        figs.append(
            (
                matmul_figures.collective_matmul(
                    pairs, out / "collective_matmul.png", "Collective matmul against its naive counterpart"
                ),
                "Time per step of the ppermute ring (collective matmul) and of the same expression run the "
                "naive way, over the dim the sweep varies.",
            )
        )
    for path, caption in figs:
        rep.figure(path, caption)


def _cases(rep: Report, table: pd.DataFrame, note: str) -> None:
    """Per point the book's case against the HLO's collectives, the reasons they differ, and
    what the times below mean."""
    rep.text(
        "Per point: the expression in the book's notation, the strategy that ran, the book's case and the "
        "collectives it prescribes, and the collectives XLA emitted in the compiled HLO (with the mesh axes "
        "their replica groups span); **DIFFERS** where the two disagree, with the reason below the table."
    )
    what = table[["point", "expr", "strategy", "dims", "case", "book prescribes", "HLO has", "match"]]
    rep.table(what.assign(strategy=what["strategy"].fillna("(not run)")))
    reasons = table[table["why"].astype(str).str.len() > 0]
    if len(reasons):
        rep.text("\n\n".join(f"`{r['point']}`: {r['why']}" for _, r in reasons.iterrows()))
    rep.text(
        "Times: the measured median; T_math = FLOPs / (d x C), with d the devices the book's recipe splits the "
        "product over (fewer than the mesh's where it gathers an input, so that every device of that axis "
        "repeats the work); T_comms from the book's collective formulas; max (overlapped, as a collective "
        "matmul) and sum (serial) are the book's prescribed recipe, not the strategy that ran, whose own cost "
        "the measured time shows. *Overlapped*: the share of collective time during which the same device was "
        f"also computing, from the trace (per device, merged intervals; median over devices).{note}"
    )


def _costs(rep: Report, table: pd.DataFrame) -> None:
    """The times per point in human units: measured, the book's T_math, T_comms and their max and sum."""
    cost = table[
        [
            "point",
            "time (s)",
            "d",
            "T_math (s)",
            "T_comms (s)",
            "max (s)",
            "sum (s)",
            "FLOP/s",
            "trace: collective overlapped",
        ]
    ].copy()
    for col in ("time (s)", "T_math (s)", "T_comms (s)", "max (s)", "sum (s)"):
        cost[col] = cost[col].map(fmt_duration)
    cost["FLOP/s"] = cost["FLOP/s"].map(lambda v: f"{v / 1e9:.3g}" if pd.notna(v) else "")
    traced = cost["trace: collective overlapped"].notna()
    cost["trace: collective overlapped"] = cost["trace: collective overlapped"].map(fmt_pct)
    rep.table(
        cost.rename(
            columns={
                "time (s)": "time",
                "T_math (s)": "T_math",
                "T_comms (s)": "T_comms",
                "max (s)": "max",
                "sum (s)": "sum",
                "FLOP/s": "GFLOP/s",
                "trace: collective overlapped": "overlapped",
            }
        )
    )
    if not traced.any():
        rep.text("No point here has a collective in a parsed trace, so *overlapped* is empty.")


def _roofline(points: pd.DataFrame, hw, C, out: Path) -> tuple[Path, str]:
    """The roofline figure and its caption: the compute roof at the first dtype's rate where the
    hardware names one (else ``C``), the memory roof where it has an HBM bandwidth."""
    precision = points["precision"].dropna() if "precision" in points else []  # none: runs from before the key
    C_used = (
        hw.flops(points["dtype"].dropna().iloc[0], precision.iloc[0] if len(precision) else None)
        if hw is not None
        and hw.flops_per_s
        and points["dtype"].notna().any()
        and points["dtype"].dropna().iloc[0] in hw.flops_per_s
        else C
    )
    bw = getattr(hw, "hbm_bw_Bps", None) if hw is not None else None
    return (
        matmul_figures.roofline(points, C_used, bw, out / "matmul_roofline.png", "Matmuls on the roofline"),
        "Achieved GFLOP/s per device against arithmetic intensity (FLOPs per byte of A, B and C), each point "
        "a point (colour: the book's case, marker: strategy), under the compute roof C"
        + (
            " and the memory roof (HBM bandwidth x intensity)."
            if bw
            else f" (`{hw.name if hw else '?'}` has no HBM bandwidth, so no memory roof)."
        ),
    )


def _q4_crossovers(q4: pd.DataFrame, points: pd.DataFrame, hw) -> list[str]:
    """Per expression where strategy 2 starts to win, measured, then by the book's model on
    this hardware and on TPU v5e."""
    lines = []
    for expr, g in q4.groupby("expr"):
        cross = measured_crossover(g)
        dim = g["dim"].iloc[0]
        lines.append(
            f"`{expr}`: measured here, strategy 2 "
            + (
                f"starts to win at {dim} ≈ {cross:.0f}"
                if cross
                else f"{'always' if (g['ratio_2_over_1'] < 1).all() else 'never'} wins over {dim} = "
                f"{g['value'].min():.0f}..{g['value'].max():.0f}"
            )
            + "."
        )
        first = points[points["expr"] == expr].iloc[0]
        for label, h, dt in (
            (f"`{hw.name}`" if hw else "this hardware", hw, first["dtype"]),
            ("TPU v5e (bf16)", None, "bfloat16"),
        ):
            try:
                h = h or load_hardware("tpu_v5e")
                mc = model_crossover(expr, dims_of(first["dims"]), dim, mesh_of(first["mesh_axes"]), dt, h)
            except (BookError, KeyError, IndexError, TypeError) as exc:
                lines.append(f"  {label}: no model crossover ({exc}).")
                continue
            lines.append(
                f"  {label}: the book's model puts it between {dim} = {mc / 2:.0f} and {mc:.0f}."
                if mc
                else f"  {label}: the book's model has one strategy win at every {dim}."
            )
    return lines


def _q4_figures(q4: pd.DataFrame, points: pd.DataFrame, hw, out: Path, figs: list) -> None:
    """Append to ``figs`` one figure per expression: both strategies' times, the measured and
    the model's crossover."""
    for expr, g in q4.groupby("expr"):
        first = points[points["expr"] == expr].iloc[0]
        try:
            mc = (
                model_crossover(
                    expr, dims_of(first["dims"]), g["dim"].iloc[0], mesh_of(first["mesh_axes"]), first["dtype"], hw
                )
                if hw is not None
                else None
            )
        except (BookError, KeyError, IndexError, TypeError):
            mc = None
        figs.append(
            (
                matmul_figures.strategy_crossover(
                    g, measured_crossover(g), mc, out / f"question4_{len(figs)}.png", f"Question 4: {expr}"
                ),
                "Time against the varying dim for both strategies; dashed: the measured crossover, dotted: "
                "the model's (for this hardware's constants).",
            )
        )
