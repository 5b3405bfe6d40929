"""Figures of a sweep comparison. Each function only draws the table it is given (one hue per
sweep, one marker style per collective) and saves a PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from analysis.report.axes import WIDTH_IN, bytes_axis, error_bars, gbps_axis, time_axis  # also selects Agg
from analysis.runs.rundir import atomic_path


def _palette(labels) -> dict:
    return dict(zip(labels, sns.color_palette("tab10")))


def _overlay(points: pd.DataFrame, y: str, ylabel: str, path: Path, title: str, labels: list[str]) -> Path:
    palette = _palette(labels)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 5.0))
    pts = points.sort_values("V_bytes")
    sns.lineplot(
        data=pts,
        x="V_bytes",
        y=y,
        hue="sweep",
        hue_order=labels,
        style="op",
        markers=True,
        dashes=False,
        palette=palette,
        ax=ax,
        errorbar=None,
    )
    if y == "time_s":  # the medians' 95% CIs
        _ci_bars(ax, pts, "time_s", "time_ci_low_s", "time_ci_high_s", palette)
    bytes_axis(ax)
    (time_axis if y == "time_s" else gbps_axis)(ax, ylabel)
    ax.grid(True, which="major", alpha=0.3)
    return _save(fig, ax, title, path)


def _ci_bars(ax, df: pd.DataFrame, y: str, lo: str, hi: str, palette: dict) -> None:
    """Vertical CI bars from ``lo`` to ``hi`` around ``y``, one colour per sweep."""
    for sweep, g in df.groupby("sweep", sort=False):
        ax.errorbar(
            g["V_bytes"],
            g[y],
            yerr=error_bars(g[y], g[lo], g[hi]),
            fmt="none",
            ecolor=palette[sweep],
            alpha=0.6,
            capsize=2,
        )


def _save(fig, ax, title: str, path: Path) -> Path:
    ax.set_title(title)
    if ax.get_legend():  # outside the data
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    with atomic_path(path) as tmp:  # whole or not at all
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path


def time_vs_size(points: pd.DataFrame, path: Path, title: str, labels: list[str]) -> Path:
    """Every sweep's untraced medians (bars: their 95% CI) against V on the same log-log axes."""
    return _overlay(points, "time_s", "time per step (median)", path, title, labels)


def busbw_vs_size(points: pd.DataFrame, path: Path, title: str, labels: list[str]) -> Path:
    """Every sweep's bus bandwidth against V on the same log-log axes."""
    return _overlay(points, "busbw_Bps", "bus bandwidth (GB/s), nccl-tests convention", path, title, labels)


def ratio_vs_size(ratios: pd.DataFrame, path: Path, title: str, labels: list[str]) -> Path:
    """Time ratio (sweep / reference) against V with its 95% CI, a line at 1 (no difference)."""
    palette = _palette(labels)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.5))
    r = ratios.sort_values("V_bytes")
    sns.lineplot(
        data=r,
        x="V_bytes",
        y="time_ratio",
        hue="sweep",
        hue_order=labels[1:],
        style="op",
        markers=True,
        dashes=False,
        palette=palette,
        ax=ax,
        errorbar=None,
    )
    _ci_bars(ax, r, "time_ratio", "time_ratio_ci_low", "time_ratio_ci_high", palette)
    ax.axhline(1.0, color="black", lw=1, linestyle="--")
    bytes_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel(f"time ratio: sweep / {labels[0]}")
    ax.grid(True, which="major", alpha=0.3)
    return _save(fig, ax, title, path)
