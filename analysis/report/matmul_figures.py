"""Figures of sharded matmuls: the roofline, Question 4's two strategies, and collective
matmul against its naive counterpart. Each only draws the tables it is given."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from analysis.report.axes import (  # also selects the headless backend
    WIDTH_IN,
    finish,
    human_log_labels,
    log_y_axis,
    time_axis,
)


def _flops_axis(ax, label: str) -> None:
    log_y_axis(ax, label, lambda v: f"{v / 1e9:.3g}")


def roofline(points: pd.DataFrame, C: float | None, bw_Bps: float | None, path: Path, title: str) -> Path:
    """Achieved GFLOP/s per device against arithmetic intensity (FLOPs per byte of the
    matmul's inputs and output), each point a marker (colour: case, marker: strategy), under the
    hardware's compute roof (C, horizontal) and memory roof (bandwidth x intensity)."""
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 5.0))
    d = points.dropna(subset=["intensity", "flops_per_s_per_device"]).copy()
    d["case"] = d["case"].map(lambda c: f"case {int(c)}" if pd.notna(c) else "case ?")
    sns.scatterplot(
        data=d, x="intensity", y="flops_per_s_per_device", hue="case", style="strategy", s=70, ax=ax, legend="brief"
    )
    lo, hi = (d["intensity"].min() / 3, d["intensity"].max() * 3) if len(d) else (1, 1e3)
    x = np.geomspace(lo, hi, 50)
    if C:
        ax.plot(x, np.full_like(x, C), color="black", lw=1.2, label=f"compute roof C = {C / 1e9:.3g} GFLOP/s")
    if bw_Bps:
        ax.plot(
            x,
            bw_Bps * x,
            color="black",
            lw=1.2,
            linestyle="--",
            label=f"memory roof {bw_Bps / 1e9:.3g} GB/s x intensity",
        )
    ax.set_xscale("log")
    human_log_labels(ax.xaxis, lambda v: f"{v:.3g}")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte of A, B and C)")
    _flops_axis(ax, "achieved GFLOP/s per device")
    ax.grid(True, which="major", alpha=0.3)
    if ax.get_legend():
        ax.get_legend().remove()
    return finish(fig, {"all": ax}, title, path)


def strategy_crossover(q4: pd.DataFrame, measured: float | None, model: float | None, path: Path, title: str) -> Path:
    """Time against the varying dim for Question 4's two strategies, with the measured
    crossover (dashed) and the model's (dotted)."""
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.5))
    dim = q4["dim"].iloc[0] if len(q4) else "D"
    ax.plot(q4["value"], q4["strategy1_s"], "o-", label="strategy 1: AllGather, then the whole matmul")
    ax.plot(q4["value"], q4["strategy2_s"], "s-", label="strategy 2: local matmul, then AllReduce")
    if measured:
        ax.axvline(measured, color="black", linestyle="--", lw=1, label=f"measured crossover {dim} ≈ {measured:.0f}")
    if model:
        ax.axvline(model, color="grey", linestyle=":", lw=1.5, label=f"model's crossover {dim} ≈ {model:.0f}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"{dim}")
    time_axis(ax, "time per step")
    ax.grid(True, which="major", alpha=0.3)
    return finish(fig, {"all": ax}, title, path)


def collective_matmul(pairs: pd.DataFrame, path: Path, title: str) -> Path:
    """Naive against ring (collective matmul) time, per expression and size."""
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.5))
    for (expr, strategy), g in pairs.groupby(["expr", "kind"], sort=False):
        g = g.sort_values("size")
        ax.plot(g["size"], g["time_s"], "o-" if strategy == "ring" else "s--", label=f"{expr}: {strategy}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("varying dim")
    time_axis(ax, "time per step")
    ax.grid(True, which="major", alpha=0.3)
    return finish(fig, {"all": ax}, title, path)
