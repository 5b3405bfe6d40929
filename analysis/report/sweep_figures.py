"""Figures of a sweep, one per question. Each function only draws the tables it is given and
saves a PNG; the numbers come from the analyzers.

Conventions, so that a figure reads in print and at a glance: measured medians are markers
with their 95% intervals as error bars, the alpha-beta fit is dashed, the book's model solid,
a point's ceiling dotted grey; axes in human units (KiB/MiB, us/ms, GB/s); one panel per
family when there are more than four (small multiples), and the legend outside the data.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from analysis.report.axes import (  # also selects the headless backend
    WIDTH_IN,
    bytes_axis,
    error_bars,
    family_colors,
    finish,
    gbps_axis,
    log_y_axis,
    panels,
    time_axis,
)

CURVE_STYLE = {"α-β fit": (0, (5, 2)), "book model": "-"}


def _measured(ax, p: pd.DataFrame, y: str, lo, hi, color, fam: str) -> None:
    """A family's medians as markers, their 95% intervals (``lo``..``hi``) as error bars."""
    ax.errorbar(
        p["V_bytes"],
        p[y],
        yerr=error_bars(p[y], lo, hi),
        fmt="o",
        ms=4,
        color=color,
        ecolor=color,
        capsize=2,
        label=f"{fam}: measured",
    )


def _mark_unchecked(ax, p: pd.DataFrame, y: str) -> None:
    """Points whose result was not checked (check_result=false): a hollow ring around them."""
    unchecked = p[p["caveats"].fillna("").astype(str).str.contains("unchecked")] if "caveats" in p else p.iloc[0:0]
    if len(unchecked):
        ax.scatter(
            unchecked["V_bytes"],
            unchecked[y],
            s=110,
            facecolors="none",
            edgecolors="black",
            linewidths=1.0,
            zorder=5,
            label="unchecked (check_result=false)",
        )


def time_vs_size(points: pd.DataFrame, curves: pd.DataFrame, path: Path, title: str) -> Path:
    """How long does it take? Medians with 95% intervals, the fit and the model, log-log."""
    fams = list(points["family"].unique())
    palette, (fig, axes) = family_colors(fams), panels(fams, title)
    for fam, p in points.groupby("family", sort=False):
        ax, color = axes[fam], palette[fam]
        _measured(ax, p, "time_s", p["time_ci_low_s"], p["time_ci_high_s"], color, fam)
        _mark_unchecked(ax, p, "time_s")
        for kind, c in curves[curves["family"] == fam].groupby("curve", sort=False):
            ax.plot(
                c["V_bytes"],
                c["time_s"],
                color=color,
                linestyle=CURVE_STYLE.get(kind, ":"),
                lw=1.2,
                label=f"{fam}: {kind}",
            )
    for ax in {id(a): a for a in axes.values()}.values():
        bytes_axis(ax)
        time_axis(ax, "time per step")
        ax.grid(True, which="major", alpha=0.3)
    return finish(fig, axes, title, path)


def busbw_vs_size(points: pd.DataFrame, curves: pd.DataFrame, crossovers: pd.DataFrame, path: Path, title: str) -> Path:
    """How much of the ceiling does it reach? Bus bandwidth (nccl-tests' convention) against V,
    the model's curve, each point's ceiling (dotted grey) and the latency/bandwidth crossover."""
    fams = list(points["family"].unique())
    palette, (fig, axes) = family_colors(fams), panels(fams, title)
    for fam, p in points.groupby("family", sort=False):
        ax, color = axes[fam], palette[fam]
        p = p.sort_values("V_bytes")
        lo = p["busbw_Bps"] * p["time_s"] / p["time_ci_high_s"]
        hi = p["busbw_Bps"] * p["time_s"] / p["time_ci_low_s"]
        _measured(ax, p, "busbw_Bps", lo, hi, color, fam)
        _mark_unchecked(ax, p, "busbw_Bps")
        flagged = p[p["flags"].fillna("").astype(str).ne("")] if "flags" in p else p.iloc[0:0]
        if len(flagged):
            ax.scatter(
                flagged["V_bytes"],
                flagged["busbw_Bps"],
                marker="x",
                s=60,
                color="black",
                zorder=4,
                label="flagged (left out of the fits)",
            )
        ceil = p.dropna(subset=["ceiling_busbw_Bps"])
        if len(ceil):
            ax.plot(
                ceil["V_bytes"],
                ceil["ceiling_busbw_Bps"],
                color="grey",
                linestyle=":",
                lw=1.5,
                label="ceiling"
                + (
                    " (measured device copies)" if (ceil["ceiling_kind"] == "device_copy").any() else " (link roofline)"
                ),
            )
        c = curves[(curves["family"] == fam) & (curves["curve"] == "book model")]
        if len(c):
            ax.plot(c["V_bytes"], c["busbw_Bps"], color=color, linestyle="-", lw=1.0, label=f"{fam}: book model")
        for row in crossovers[crossovers["family"] == fam].itertuples():
            ax.axvline(row.V_bytes, color=color, linestyle=(0, (1, 2)), lw=1)
            ax.text(
                row.V_bytes,
                0.02,
                f" bandwidth-bound above {row.label}",
                rotation=90,
                fontsize=7,
                va="bottom",
                ha="right",
                color=color,
                transform=ax.get_xaxis_transform(),
            )
    for ax in {id(a): a for a in axes.values()}.values():
        bytes_axis(ax)
        gbps_axis(ax, "bus bandwidth (GB/s)")
        ax.grid(True, which="major", alpha=0.3)
    return finish(fig, axes, title, path)


def measured_over_model(points: pd.DataFrame, path: Path, title: str) -> Path:
    """Does the book's model predict it? Measured / model against V; 1 is a perfect prediction."""
    fams = list(points["family"].unique())
    palette = family_colors(fams)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.2))
    for fam, p in points.dropna(subset=["measured_over_model"]).groupby("family", sort=False):
        p = p.sort_values("V_bytes")
        lo, hi = p["time_ci_low_s"] / p["model_time_s"], p["time_ci_high_s"] / p["model_time_s"]
        ax.errorbar(
            p["V_bytes"],
            p["measured_over_model"],
            yerr=error_bars(p["measured_over_model"], lo, hi),
            fmt="o-",
            ms=4,
            lw=0.8,
            color=palette[fam],
            capsize=2,
            label=fam,
        )
    ax.axhline(1.0, color="black", lw=1, linestyle="--", label="the model, exactly")
    bytes_axis(ax)
    log_y_axis(ax, "measured / model", lambda v: f"{v:.2g}x")
    ax.grid(True, which="both", alpha=0.3)
    return finish(fig, {"all": ax}, title, path)


def placement(table: pd.DataFrame, path: Path) -> Path:
    """Bus bandwidth against V, in-process and cross-process groups side by side (draws only)."""
    data = table.assign(placement=np.where(table["crosses_processes"], "cross-process group", "in-process group"))
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.5))
    sns.lineplot(
        data=data.sort_values("V_bytes"),
        x="V_bytes",
        y="busbw_Bps",
        hue="placement",
        style="op",
        markers=True,
        ax=ax,
        legend="brief",
    )
    bytes_axis(ax)
    gbps_axis(ax, "bus bandwidth (GB/s), median")
    ax.grid(True, alpha=0.3)
    if ax.get_legend():
        ax.get_legend().remove()
    return finish(fig, {"all": ax}, "", path)
