"""Figures. Each function only draws the tables it is given and saves a PNG."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # reports are written headless, from a sweep's end or a CI job
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

_CURVE_STYLE = {"α-β fit": (0, (4, 2)), "book model": "-"}


def _log_axes(ax, ylabel: str) -> None:
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("V (bytes)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)


def _draw(ax, points, curves, y: str, palette) -> None:
    sns.scatterplot(data=points, x="V_bytes", y=y, hue="family", palette=palette, ax=ax, zorder=3, s=30)
    for _, c in curves.groupby(["family", "curve"], sort=False):
        fam, kind = c["family"].iloc[0], c["curve"].iloc[0]
        ax.plot(c["V_bytes"], c[y], color=palette[fam], linestyle=_CURVE_STYLE.get(kind, ":"), lw=1.2,
                label=f"{fam}: {kind}")


def time_vs_bytes(points: pd.DataFrame, curves: pd.DataFrame, path: Path, title: str) -> Path:
    """Measured medians (bars: p10-p90 of the untraced samples), fits and the model, log-log."""
    palette = dict(zip(points["family"].unique(), sns.color_palette("tab10")))
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for fam, p in points.groupby("family", sort=False):
        ax.errorbar(p["V_bytes"], p["time_s"], yerr=[p["time_s"] - p["time_p10_s"], p["time_p90_s"] - p["time_s"]],
                    fmt="none", ecolor=palette[fam], alpha=0.6, capsize=2)
    _draw(ax, points, curves, "time_s", palette)
    _log_axes(ax, "time per step (s), untraced median")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def bandwidth_vs_bytes(points: pd.DataFrame, curves: pd.DataFrame, crossovers: pd.DataFrame,
                       ceilings: pd.DataFrame, path: Path, title: str) -> Path:
    """Bus bandwidth against V, the model's curve, the latency/bandwidth crossover of each
    family (dotted vertical) and each point's ceiling (dashed grey, ``ceiling_busbw_Bps``)."""
    palette = dict(zip(points["family"].unique(), sns.color_palette("tab10")))
    fig, ax = plt.subplots(figsize=(8, 5.5))
    _draw(ax, points, curves, "busbw_Bps", palette)
    for row in crossovers.itertuples():
        color = palette.get(row.family, "grey")
        ax.axvline(row.V_bytes, color=color, linestyle=":", lw=1)
        ax.text(row.V_bytes, 0.02, f" crossover {row.label}", rotation=90, fontsize=7, va="bottom", ha="right",
                color=color, transform=ax.get_xaxis_transform())
    for fam, c in ceilings.groupby("family", sort=False):
        c = c.sort_values("V_bytes")
        ax.plot(c["V_bytes"], c["ceiling_busbw_Bps"], color=palette.get(fam, "grey"), linestyle="--", lw=0.8,
                alpha=0.6, label=f"{fam}: ceiling")
    _log_axes(ax, "bus bandwidth (B/s), nccl-tests convention")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def placement(table: pd.DataFrame, path: Path) -> Path:
    """Bus bandwidth against V, in-process and cross-process groups side by side (draws only)."""
    data = table.assign(placement=np.where(table["crosses_processes"], "cross-process group", "in-process group"))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sns.lineplot(data=data.sort_values("V_bytes"), x="V_bytes", y="busbw_Bps", hue="placement", style="op",
                 markers=True, ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("V (bytes)")
    ax.set_ylabel("bus bandwidth (B/s), untraced median")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
