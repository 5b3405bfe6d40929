"""The report's matmul section: the book's cases against the compiled HLO, and Question 4's
crossover (tables from :mod:`analysis.matmul_cases`)."""
from __future__ import annotations

import dataclasses

import pandas as pd

from analysis.book.errors import BookError
from analysis.book.hardware import Hardware, load_hardware
from analysis.matmul_cases import (_dims, _mesh, case_table, matmul_jobs, measured_C, measured_crossover,
                                   model_crossover, q4_table)
from analysis.report.document import Report, fmt


def add_matmul_section(rep: Report, summary: pd.DataFrame, model_hw: Hardware | None) -> pd.DataFrame | None:
    """Append the matmul section to ``rep``; return the case table, or None when the sweep
    ran no matmul."""
    jobs = matmul_jobs(summary)
    if not len(jobs):
        return None
    hw_name = jobs["hardware"].dropna().mode()
    hw = model_hw or (load_hardware(hw_name.iloc[0]) if len(hw_name) else None)
    C, how = measured_C(jobs)
    note = ""
    if hw is not None and C and not hw.flops_per_s:
        dtypes = set(jobs["dtype"].dropna())
        hw = dataclasses.replace(hw, flops_per_s={d: C for d in dtypes})
        note = f" `{hw.name}` has no published FLOP/s: C = {fmt(C)} FLOP/s per device, {how}."
    if hw is not None and hw.link_bw_bidir_Bps is None:
        note += (f" `{hw.name}` has no link constants, so T_comms is left out: calibrate them from an "
                 "AllGather sweep (`python -m analysis calibrate`) and rebuild with `--hardware NAME`.")
    table = case_table(jobs, hw)
    rep.heading("Sharded matmuls: the book's cases against the compiled HLO")
    rep.text("Each row: the expression in the book's notation, the strategy that ran, the book's case and "
             "the collectives it prescribes, the collectives XLA emitted in the compiled HLO (with the "
             "mesh axes their replica groups span), and **DIFFERS** with the reason where the two disagree. "
             "Times are untraced medians; T_math = FLOPs / (d x C), d (its own column) being the devices the book's recipe splits the product over (fewer than the mesh's where it gathers an input, so that every device of that axis repeats the work), T_comms from the book's collective "
             "formulas; the book's bound is their max (overlapped) and the serial cost their sum, both for the book's prescribed "
             "recipe (not for the strategy that ran, whose own cost the measured time shows). The last "
             "column is the share of collective time during which the same device was also computing, "
             f"from the trace (per device, merged intervals; median over devices).{note}")
    rep.table(table.drop(columns=["status"]))
    q4 = q4_table(jobs)
    if len(q4):
        rep.heading("Question 4: gather then multiply, or multiply then AllReduce")
        rep.table(q4.drop(columns=["dim"]).rename(columns={
            "value": "varying dim", "strategy1_s": "strategy 1 (s)", "strategy2_s": "strategy 2 (s)",
            "ratio_2_over_1": "strategy 2 / 1"}))
        lines = []
        for expr, g in q4.groupby("expr"):
            cross = measured_crossover(g)
            dim = g["dim"].iloc[0]
            lines.append(f"`{expr}`: measured here, strategy 2 " + (
                f"starts to win at {dim} ≈ {cross:.0f}" if cross else
                f"{'always' if (g['ratio_2_over_1'] < 1).all() else 'never'} wins over {dim} = "
                f"{g['value'].min():.0f}..{g['value'].max():.0f}") + ".")
            first = jobs[jobs["expr"] == expr].iloc[0]
            for label, h, dt in ((f"`{hw.name}`" if hw else "this hardware", hw, first["dtype"]), ("TPU v5e (bf16)", None, "bfloat16")):
                try:
                    h = h or load_hardware("tpu_v5e")
                    mc = model_crossover(expr, _dims(first["dims"]), dim, _mesh(first["mesh_axes"]), dt, h)
                except (BookError, KeyError, IndexError, TypeError) as exc:
                    lines.append(f"  {label}: no model crossover ({exc}).")
                    continue
                lines.append(f"  {label}: the book's model puts it between {dim} = {mc / 2:.0f} and {mc:.0f}." if mc else
                             f"  {label}: the book's model has one strategy win at every {dim}.")
        rep.text("\n\n".join(lines))
    return table
