"""Figures of a sweep, one per question. Each function only draws the tables it is given and
saves a PNG; the numbers come from the analyzers.

Conventions, so that a figure reads in print and at a glance: measured medians are markers
with their 95% intervals as error bars, the alpha-beta fit is dashed, the book's model solid,
a point's ceiling dotted grey; axes in human units (KiB/MiB, us/ms, GB/s); one panel per
family when there are more than four (small multiples), and the legend outside the data.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # reports are written headless, from a sweep's end or a CI job
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogFormatter, LogLocator  # noqa: E402

from analysis.book.units import fmt_bytes, fmt_duration  # noqa: E402
from analysis.rundir import atomic_path  # noqa: E402

CURVE_STYLE = {"α-β fit": (0, (5, 2)), "book model": "-"}
MAX_FAMILIES = 2  # more families than this (each with measured, fit, model): one panel each
WIDTH_IN, DPI = 11.0, 110  # 1210 px: fits a 1280-px page


def bytes_axis(ax) -> None:
    """x: V on a log2 scale, ticks in binary units (1 KiB, 1 MiB ...)."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_bytes(v).replace(".0 ", " ") if v > 0 else ""))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
    ax.set_xlabel("V, the book's bytes (binary units)")


class _HumanLog(LogFormatter):
    """matplotlib's log-axis labelling (which ticks get a label: decades, and some minor ticks
    when the axis spans less than a decade or two), with our units instead of 1.5x10^9."""

    def __init__(self, one):
        super().__init__(labelOnlyBase=False)
        self._one = one

    def _num_to_string(self, x, vmin, vmax):
        return self._one(x) if x > 0 else ""


def human_log_labels(axis, one) -> None:
    """Label a log axis's major and (on a narrow axis) minor ticks with ``one(value)``."""
    axis.set_major_formatter(_HumanLog(one))
    axis.set_minor_formatter(_HumanLog(one))


def log_y_axis(ax, label: str, one) -> None:
    """y on a log scale, labelled by ``one``."""
    ax.set_yscale("log")
    human_log_labels(ax.yaxis, one)
    ax.set_ylabel(label)


def time_axis(ax, label: str) -> None:
    log_y_axis(ax, label, fmt_duration)


def gbps_axis(ax, label: str) -> None:
    log_y_axis(ax, label, lambda v: f"{v / 1e9:.3g}")


def _panels(families: list[str], title: str):
    """One axes for up to MAX_FAMILIES families, else a grid of small multiples."""
    if len(families) <= MAX_FAMILIES:
        fig, ax = plt.subplots(figsize=(WIDTH_IN, 5.0))
        return fig, {f: ax for f in families}
    cols = 2
    rows = math.ceil(len(families) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(WIDTH_IN, 3.2 * rows), sharex=True, squeeze=False)
    for ax in axes.flat[len(families) :]:
        ax.set_visible(False)
    for fam, ax in zip(families, axes.flat):
        ax.set_title(fam, fontsize=8)
    fig.suptitle(title)
    return fig, dict(zip(families, axes.flat))


def _finish(fig, axes: dict, title: str, path: Path) -> Path:
    first = next(iter(axes.values()))
    faceted = len(set(map(id, axes.values()))) > 1
    if not faceted:
        first.set_title(title)
    handles, labels = [], []
    for fam, ax in axes.items():
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if faceted:  # each panel names its family: the legend needs only the styles
                lab = lab.removeprefix(f"{fam}: ")
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:  # outside the data: below the axes
        fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=7, frameon=False)
        rows = math.ceil(len(labels) / 3)
        fig.tight_layout(rect=(0, 0.035 * rows + 0.02, 1, 1))
    else:
        fig.tight_layout()
    with atomic_path(path) as tmp:  # whole or not at all: a full disk leaves no stub
        fig.savefig(tmp, dpi=DPI)
    plt.close(fig)
    return path


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


def _palette(families) -> dict:
    return dict(zip(families, sns.color_palette("tab10", n_colors=max(len(families), 1))))


def time_vs_size(points: pd.DataFrame, curves: pd.DataFrame, path: Path, title: str) -> Path:
    """How long does it take? Medians with 95% intervals, the fit and the model, log-log."""
    fams = list(points["family"].unique())
    palette, (fig, axes) = _palette(fams), _panels(fams, title)
    for fam, p in points.groupby("family", sort=False):
        ax, color = axes[fam], palette[fam]
        ax.errorbar(
            p["V_bytes"],
            p["time_s"],
            yerr=[p["time_s"] - p["time_ci_low_s"], p["time_ci_high_s"] - p["time_s"]],
            fmt="o",
            ms=4,
            color=color,
            ecolor=color,
            capsize=2,
            label=f"{fam}: measured",
        )
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
    return _finish(fig, axes, title, path)


def busbw_vs_size(points: pd.DataFrame, curves: pd.DataFrame, crossovers: pd.DataFrame, path: Path, title: str) -> Path:
    """How much of the ceiling does it reach? Bus bandwidth (nccl-tests' convention) against V,
    the model's curve, each point's ceiling (dotted grey) and the latency/bandwidth crossover."""
    fams = list(points["family"].unique())
    palette, (fig, axes) = _palette(fams), _panels(fams, title)
    for fam, p in points.groupby("family", sort=False):
        ax, color = axes[fam], palette[fam]
        p = p.sort_values("V_bytes")
        lo = p["busbw_Bps"] * p["time_s"] / p["time_ci_high_s"]
        hi = p["busbw_Bps"] * p["time_s"] / p["time_ci_low_s"]
        ax.errorbar(
            p["V_bytes"],
            p["busbw_Bps"],
            yerr=[p["busbw_Bps"] - lo, hi - p["busbw_Bps"]],
            fmt="o",
            ms=4,
            color=color,
            ecolor=color,
            capsize=2,
            label=f"{fam}: measured",
        )
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
    return _finish(fig, axes, title, path)


def measured_over_model(points: pd.DataFrame, path: Path, title: str) -> Path:
    """Does the book's model predict it? Measured / model against V; 1 is a perfect prediction."""
    fams = list(points["family"].unique())
    palette = _palette(fams)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.2))
    for fam, p in points.dropna(subset=["measured_over_model"]).groupby("family", sort=False):
        p = p.sort_values("V_bytes")
        lo, hi = p["time_ci_low_s"] / p["model_time_s"], p["time_ci_high_s"] / p["model_time_s"]
        ax.errorbar(
            p["V_bytes"],
            p["measured_over_model"],
            yerr=[p["measured_over_model"] - lo, hi - p["measured_over_model"]],
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
    return _finish(fig, {"all": ax}, title, path)


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
    return _finish(fig, {"all": ax}, "", path)


def _log_axes(ax, ylabel: str) -> None:
    """Log-log axes with V in binary units (for the comparison figures)."""
    bytes_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
