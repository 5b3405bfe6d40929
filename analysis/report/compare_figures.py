"""Figures of a sweep comparison. Each function only draws the table it is given (one hue per
sweep, one marker style per collective) and saves a PNG."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from analysis.report.figures import _log_axes  # also selects the headless backend


def _palette(labels) -> dict:
    return dict(zip(labels, sns.color_palette("tab10")))


def _overlay(points: pd.DataFrame, y: str, ylabel: str, path: Path, title: str, labels: list[str]) -> Path:
    palette = _palette(labels)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    pts = points.sort_values("V_bytes")
    sns.lineplot(data=pts, x="V_bytes", y=y, hue="sweep", hue_order=labels, style="op", markers=True,
                 dashes=False, palette=palette, ax=ax, errorbar=None)
    if y == "time_s":  # the medians' 95% CIs
        _ci_bars(ax, pts, "time_s", "time_ci_low_s", "time_ci_high_s", palette)
    _log_axes(ax, ylabel)
    return _save(fig, ax, title, path)


def _ci_bars(ax, df: pd.DataFrame, y: str, lo: str, hi: str, palette: dict) -> None:
    """Vertical CI bars from ``lo`` to ``hi`` around ``y``, one colour per sweep."""
    for sweep, g in df.groupby("sweep", sort=False):
        ax.errorbar(g["V_bytes"], g[y], yerr=[g[y] - g[lo], g[hi] - g[y]], fmt="none", ecolor=palette[sweep],
                    alpha=0.6, capsize=2)


def _save(fig, ax, title: str, path: Path) -> Path:
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def time_vs_bytes(points: pd.DataFrame, path: Path, title: str, labels: list[str]) -> Path:
    """Every sweep's untraced medians (bars: their 95% CI) against V on the same log-log axes."""
    return _overlay(points, "time_s", "time per step (s), untraced median", path, title, labels)


def bandwidth_vs_bytes(points: pd.DataFrame, path: Path, title: str, labels: list[str]) -> Path:
    """Every sweep's bus bandwidth against V on the same log-log axes."""
    return _overlay(points, "busbw_Bps", "bus bandwidth (B/s), nccl-tests convention", path, title, labels)


def ratio_vs_bytes(ratios: pd.DataFrame, path: Path, title: str, labels: list[str]) -> Path:
    """Time ratio (sweep / reference) against V with its 95% CI, a line at 1 (no difference)."""
    palette = _palette(labels)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    r = ratios.sort_values("V_bytes")
    sns.lineplot(data=r, x="V_bytes", y="time_ratio", hue="sweep", hue_order=labels[1:],
                 style="op", markers=True, dashes=False, palette=palette, ax=ax, errorbar=None)
    _ci_bars(ax, r, "time_ratio", "time_ratio_ci_low", "time_ratio_ci_high", palette)
    ax.axhline(1.0, color="black", lw=1, linestyle="--")
    _log_axes(ax, f"time ratio: sweep / {labels[0]}")
    return _save(fig, ax, title, path)
